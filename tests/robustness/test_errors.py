"""Issue 12 root cause 8, and bad feeds and dimensions: every error names the element at fault.

Before: a Pad or Split with negative sizes passed inference and failed as a raw naga error; an
empty model file's message lacked the file name; opset 0 was reported as "unsupported operators".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from onyxia.errors import DeviceError, DimensionError, InputError, ModelLoadError, ShapeInferenceError
from tests.builders.hostile import compile_and_run, h, make_model, relu_model
from tests.builders.isolate import expect_error, expect_value

F = np.float32


def shape_model(kind: str):
    x = [("x", F, [2, 3])]
    if kind == "pad_negative_beyond_dim":
        return make_model([h.make_node("Pad", ["x", "p"], ["y"], name="pad")], x, ["y"],
                          {"p": np.int64([0, -2, 0, -2])})
    if kind == "split_negative_size":
        return make_model([h.make_node("Split", ["x", "s"], ["a", "b"], name="split", axis=1)], x, ["a", "b"],
                          {"s": np.int64([4, -1])})
    if kind == "slice_and_concat_to_negative":
        return make_model([h.make_node("ConstantOfShape", ["s"], ["y"], name="fill")], [], ["y"],
                          {"s": np.int64([2, -3])})
    if kind == "reshape_two_minus_ones":
        return make_model([h.make_node("Reshape", ["x", "s"], ["y"], name="reshape")], x, ["y"],
                          {"s": np.int64([-1, -1])})
    if kind == "reshape_wrong_count":
        return make_model([h.make_node("Reshape", ["x", "s"], ["y"], name="reshape")], x, ["y"],
                          {"s": np.int64([4, 2])})
    if kind == "expand_incompatible":
        return make_model([h.make_node("Expand", ["x", "s"], ["y"], name="expand")], x, ["y"],
                          {"s": np.int64([2, 4])})
    if kind == "tile_negative_repeats":
        return make_model([h.make_node("Tile", ["x", "r"], ["y"], name="tile")], x, ["y"],
                          {"r": np.int64([1, -2])})
    if kind == "matmul_mismatch":
        return make_model([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")], x, ["y"],
                          {"w": np.ones((4, 2), F)})
    if kind == "gather_axis_out_of_range":
        return make_model([h.make_node("Gather", ["x", "i"], ["y"], name="gather", axis=5)], x, ["y"],
                          {"i": np.int64([0])})
    raise AssertionError(kind)


def compile_shape_model(kind: str) -> None:
    model = shape_model(kind)
    feeds = {"x": np.ones((2, 3), F)} if model.graph.input else {}
    compile_and_run(model, feeds)


@pytest.mark.parametrize("kind,node", [
    ("pad_negative_beyond_dim", "pad"),
    ("split_negative_size", "split"),
    ("slice_and_concat_to_negative", "fill"),
    ("reshape_two_minus_ones", "reshape"),
    ("reshape_wrong_count", "reshape"),
    ("expand_incompatible", "expand"),
    ("tile_negative_repeats", "tile"),
    ("matmul_mismatch", "mm"),
    ("gather_axis_out_of_range", "gather"),
])
def test_bad_shapes_name_the_node(kind, node):
    expect_error(compile_shape_model, kind, error=ShapeInferenceError, match=f"node '{node}'")


def load_empty_file(tmp: str) -> None:
    import onyxia

    path = Path(tmp) / "empty.onnx"
    path.write_bytes(b"")
    onyxia.load_model(path)


def test_empty_model_file_names_the_file(tmp_path):
    expect_error(load_empty_file, str(tmp_path), error=ModelLoadError, match="empty.onnx")


def compile_opset_zero() -> None:
    compile_and_run(make_model([h.make_node("Relu", ["x"], ["y"])], [("x", F, [2])], ["y"], opset=0),
                    {"x": np.ones(2, F)})


def test_opset_zero_is_a_version_error_not_unsupported_ops():
    out = expect_error(compile_opset_zero, error=ModelLoadError, match="version 0")
    assert "unsupported" not in out.message


# ---- feeds and dimensions on a loaded executor ----------------------------------------------

FEEDS = {
    "string": ("abc", "input 'x'"),
    "nested_list": ([[1.0] * 4] * 2, "input 'x'"),
    "float64": (np.ones((2, 4)), "input 'x' has dtype float64"),
    "wrong_last_dim": (np.ones((2, 5), F), "input 'x' dim 1 is 5, expected 4"),
    "wrong_rank": (np.ones((2, 4, 1), F), "input 'x'"),
    "object_array": (np.array([[None] * 4] * 2), "input 'x'"),
    "none": (None, "input 'x'"),
}


def bad_feed(kind: str) -> None:
    import onyxia
    from onyxia.compiler import CompilerPipeline

    graph = onyxia.load_model(relu_model("n", 4))
    exe = onyxia.Runtime().load_model(CompilerPipeline(onyxia.core_operator_registry()).compile(graph, {"n": 2}))
    x = np.float32([[1, -2, 3, -4], [5, -6, 7, -8]])
    try:
        exe.run({"x": FEEDS[kind][0]})
    finally:
        # The executor stays usable after a refused run.
        np.testing.assert_array_equal(exe.run({"x": x})["y"], np.maximum(x, 0))


@pytest.mark.parametrize("kind", sorted(FEEDS))
def test_bad_feed_names_the_input_and_leaves_the_executor_usable(kind):
    expect_error(bad_feed, kind, error=InputError, match=FEEDS[kind][1])


def unknown_and_missing_feeds() -> None:
    import onyxia
    from onyxia.compiler import CompilerPipeline

    graph = onyxia.load_model(relu_model(4))
    exe = onyxia.Runtime().load_model(CompilerPipeline(onyxia.core_operator_registry()).compile(graph, {}))
    exe.run({"y": np.ones(4, F)})


def test_unknown_feed_names_both_sides():
    expect_error(unknown_and_missing_feeds, error=InputError, match=r"unknown inputs \['y'\]; missing inputs \['x'\]")


DIMS = {
    "negative": ({"n": -1}, "non-negative integer"),
    "string": ({"n": "3"}, "non-negative integer"),
    "float": ({"n": 2.5}, "non-negative integer"),
    "bool": ({"n": True}, "non-negative integer"),
    "unknown": ({"zz": 3}, "unknown dimension 'zz'"),
}


def bad_dims(kind: str) -> None:
    import onyxia
    from onyxia.compiler import CompilerPipeline

    graph = onyxia.load_model(relu_model("n", 4))
    exe = onyxia.Runtime().load_model(CompilerPipeline(onyxia.core_operator_registry()).compile(graph, {"n": 2}))
    try:
        exe.update_dimensions(DIMS[kind][0])
    finally:
        x = np.float32([[1, -2, 3, -4], [5, -6, 7, -8]])
        np.testing.assert_array_equal(exe.run({"x": x})["y"], np.maximum(x, 0))


@pytest.mark.parametrize("kind", sorted(DIMS))
def test_bad_dimensions_are_named(kind):
    expect_error(bad_dims, kind, error=DimensionError, match=DIMS[kind][1])


def repeated_runs_are_deterministic() -> None:
    rng = np.random.default_rng(0)
    model = make_model([h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Softmax", ["m"], ["y"])],
                       [("x", F, ["n", 64])], ["y"], {"w": rng.standard_normal((64, 32)).astype(F)})
    import onyxia
    from onyxia.compiler import CompilerPipeline

    exe = onyxia.Runtime().load_model(CompilerPipeline(onyxia.core_operator_registry()).compile(
        onyxia.load_model(model), {"n": 8}))
    x = rng.standard_normal((8, 64)).astype(F)
    first = exe.run({"x": x})["y"]
    for _ in range(20):
        assert exe.run({"x": x})["y"].tobytes() == first.tobytes()


HUGE = {
    "input_dim": (lambda: make_model([h.make_node("Relu", ["x"], ["y"])], [("x", F, [2**40])], ["y"]), "'x'"),
    "numel_over_2_64": (lambda: make_model([h.make_node("Relu", ["x"], ["y"])], [("x", F, [2**31, 2**31])], ["y"]),
                        "'x'"),
    "expand": (lambda: make_model([h.make_node("Expand", ["x", "s"], ["y"])], [("x", F, [1])], ["y"],
                                  {"s": np.int64([2**20, 2**20])}), "'y'"),
    "range": (lambda: make_model([h.make_node("Range", ["a", "b", "c"], ["y"])], [], ["y"],
                                 {"a": np.float32(0), "b": np.float32(1e12), "c": np.float32(1)}), "'y'"),
    "resize": (lambda: make_model([h.make_node("Resize", ["x", "", "sc"], ["y"])], [("x", F, [1, 1, 2, 2])], ["y"],
                                  {"sc": np.float32([1, 1, 1e6, 1e6])}), "'y'"),
}


def load_huge(kind: str) -> None:
    import onyxia
    from onyxia.compiler import CompilerPipeline

    compiled = CompilerPipeline(onyxia.core_operator_registry()).compile(onyxia.load_model(HUGE[kind][0]()), {})
    onyxia.Runtime().load_model(compiled)


@pytest.mark.parametrize("kind", sorted(HUGE))
def test_huge_tensors_are_refused_before_running(kind):
    """Terabyte tensors: refused when the executor is created, naming the tensor and the limit."""
    expect_error(load_huge, kind, error=DeviceError,
                 match=f"tensor {HUGE[kind][1]} needs .* bytes.*over this device's max")


def test_reruns_are_bitwise_deterministic():
    expect_value(repeated_runs_are_deterministic)
