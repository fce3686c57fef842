"""Indexing operators on the GPU against onnxruntime: Gather, GatherElements, GatherND, Slice,
ScatterND, ScatterElements, Trilu; property tests for Slice and Gather; folded == GPU."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper as h

from tests.helpers import assert_matches_ort, check_across_dims, compile_model, i64, make_model, random_array, run_ort

rng = np.random.default_rng(1)
rand = functools.partial(random_array, rng)
INT64_MAX = np.iinfo(np.int64).max


def check(runtime, nodes, inputs, feeds, inits=None, dims=None, opset=18, outputs=("y",)):
    assert_matches_ort(runtime, make_model(nodes, inputs, list(outputs), inits, opset=opset), feeds, dims)


# ---- Gather ---------------------------------------------------------------------------------

@pytest.mark.parametrize("axis, idx, dtype", [
    (0, i64(2, 0, -1), np.float32),
    (1, i64(1, -3, 1, 0).reshape(2, 2), np.int64),
    (-1, np.array(-2, np.int64), np.bool_),          # scalar index drops the axis
    (2, np.array([3, 0], np.int32), np.float16),
])
def test_gather(runtime, axis, idx, dtype):
    check(runtime, [h.make_node("Gather", ["x", "i"], ["y"], axis=axis)],
          [("x", dtype, [3, 4, 5]), ("i", idx.dtype, list(idx.shape))],
          {"x": rand(3, 4, 5, dtype=dtype), "i": idx})


def test_gather_embedding_and_last_token_over_symbolic_seq(runtime):
    # an embedding lookup of [b, s] ids, then the hidden state of the last position (index s - 1
    # computed from the shape: a symbolic index written to the device when dims change)
    nodes = [h.make_node("Gather", ["emb", "ids"], ["hid"]), h.make_node("Shape", ["ids"], ["sh"]),
             h.make_node("Gather", ["sh", "one"], ["s"]), h.make_node("Sub", ["s", "one"], ["last"]),
             h.make_node("Gather", ["hid", "last"], ["y"], axis=1)]
    model = make_model(nodes, [("ids", np.int64, ["b", "s"])], ["y"],
                       {"emb": rand(10, 4), "one": np.array(1, np.int64)})
    check_across_dims(runtime, model, lambda d: {"ids": rng.integers(0, 10, (d["b"], d["s"]))},
                      [{"b": 2, "s": 5}, {"b": 1, "s": 1}, {"b": 3, "s": 2}])


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_gather_random(runtime, data):
    rank = data.draw(st.integers(1, 4))
    shape = data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    axis = data.draw(st.integers(-rank, rank - 1))
    n = shape[axis]
    idx_shape = data.draw(st.lists(st.integers(0, 3), max_size=2))
    idx = np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=int(np.prod(idx_shape)),
                                      max_size=int(np.prod(idx_shape)))), np.int64).reshape(idx_shape)
    check(runtime, [h.make_node("Gather", ["x", "i"], ["y"], axis=axis)],
          [("x", np.float32, shape), ("i", np.int64, idx_shape)], {"x": rand(*shape), "i": idx})


@pytest.mark.parametrize("axis, idx_shape", [(0, [2, 4]), (1, [3, 2]), (-1, [2, 3])])
def test_gather_elements(runtime, axis, idx_shape):
    n = [3, 4][axis]
    idx = rng.integers(-n, n, idx_shape).astype(np.int64)
    check(runtime, [h.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)],
          [("x", np.float32, [3, 4]), ("i", np.int64, idx_shape)], {"x": rand(3, 4), "i": idx})


@pytest.mark.parametrize("data_shape, idx, batch_dims", [
    ([2, 2], np.array([[0, 0], [1, 1]], np.int64), 0),
    ([2, 3, 4], np.array([[1], [-1]], np.int64), 0),                 # slices
    ([2, 3, 4], np.array([[[0, 1]], [[1, 2]]], np.int64), 0),
    ([2, 3, 4], np.array([[1], [0]], np.int64), 1),                  # batch dims
    ([2, 3, 4], np.array([[[2, 3], [0, 0]], [[1, 1], [0, -1]]], np.int64), 1),
])
def test_gather_nd(runtime, data_shape, idx, batch_dims):
    check(runtime, [h.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)],
          [("x", np.float32, data_shape), ("i", idx.dtype, list(idx.shape))], {"x": rand(*data_shape), "i": idx})


# ---- Slice ----------------------------------------------------------------------------------

@pytest.mark.parametrize("starts, ends, axes, steps", [
    ([1, 0], [3, 3], [0, 1], [1, 1]),
    ([-1], [-INT64_MAX], [2], [-1]),               # reversed
    ([10], [-10], [1], [-2]),                       # clamped, stepped backwards
    ([0, 1], [INT64_MAX, 1000], [-1, 0], [2, 1]),
    ([2], [1], [0], [1]),                           # empty
])
def test_slice(runtime, starts, ends, axes, steps):
    check(runtime, [h.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])], [("x", np.float32, [3, 4, 5])],
          {"x": rand(3, 4, 5)}, inits={"s": i64(*starts), "e": i64(*ends), "a": i64(*axes), "t": i64(*steps)})


def test_slice_opset1_attributes(runtime):
    node = h.make_node("Slice", ["x"], ["y"], starts=[1, -3], ends=[100, -1], axes=[0, 1])
    check(runtime, [node], [("x", np.int64, [3, 4])], {"x": rand(3, 4, dtype=np.int64)}, opset=9)


def test_slice_over_symbolic_dims(runtime):
    nodes = [h.make_node("Slice", ["x", "s1", "e1", "a1"], ["last"]),       # x[:, -1:]
             h.make_node("Slice", ["x", "s2", "e2", "a1", "t2"], ["rev"]),  # x[:, ::-2]
             h.make_node("Shape", ["k"], ["ks"]),                           # x[:, :len(k)]
             h.make_node("Slice", ["x", "z", "ks", "a1"], ["head"])]
    inits = {"s1": i64(-1), "e1": i64(INT64_MAX), "a1": i64(1), "s2": i64(-1), "e2": i64(-INT64_MAX), "t2": i64(-2),
             "z": i64(0)}
    model = make_model(nodes, [("x", np.float32, [2, "s", 3]), ("k", np.float32, ["n"])], ["last", "rev", "head"],
                       inits)
    check_across_dims(runtime, model, lambda d: {"x": rand(2, d["s"], 3), "k": rand(d["n"])},
                      [{"s": 7, "n": 3}, {"s": 4, "n": 4}, {"s": 1, "n": 0}])


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_slice_random(runtime, data):
    shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    axes = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, max_size=len(shape),
                              unique_by=lambda a: a % len(shape)))
    bound = st.one_of(st.integers(-7, 7), st.sampled_from([INT64_MAX, -INT64_MAX]))
    starts = [data.draw(bound) for _ in axes]
    ends = [data.draw(bound) for _ in axes]
    steps = [data.draw(st.sampled_from([-3, -2, -1, 1, 2, 3])) for _ in axes]
    check(runtime, [h.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])], [("x", np.float32, shape)],
          {"x": rand(*shape)}, inits={"s": i64(*starts), "e": i64(*ends), "a": i64(*axes), "t": i64(*steps)})


# ---- Scatter --------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_reductions(runtime, reduction):
    dup = reduction != "none"  # duplicate indices are only defined with a reduction
    idx = np.array([[0], [2], [0] if dup else [1]], np.int64)
    check(runtime, [h.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction)],
          [("x", np.float32, [4, 2, 3]), ("i", np.int64, [3, 1]), ("u", np.float32, [3, 2, 3])],
          {"x": rand(4, 2, 3), "i": idx, "u": rand(3, 2, 3)})


def test_scatter_nd_elements_and_negative_indices(runtime):
    idx = np.array([[0, 1, -1], [1, -2, 0]], np.int64)
    check(runtime, [h.make_node("ScatterND", ["x", "i", "u"], ["y"])],
          [("x", np.int64, [2, 3, 4]), ("i", np.int64, [2, 3]), ("u", np.int64, [2])],
          {"x": rand(2, 3, 4, dtype=np.int64), "i": idx, "u": i64(100, 200)})


def test_scatter_nd_kv_cache_update_over_symbolic_seq(runtime):
    node = h.make_node("ScatterND", ["cache", "pos", "new"], ["y"])
    model = make_model([node], [("cache", np.float32, [6, "s", 4]), ("pos", np.int64, [2, 1]),
                                ("new", np.float32, [2, "s", 4])], ["y"])
    check_across_dims(runtime, model, lambda d: {"cache": rand(6, d["s"], 4), "pos": i64(4, 1).reshape(2, 1),
                                                 "new": rand(2, d["s"], 4)}, [{"s": 3}, {"s": 1}])


@pytest.mark.parametrize("axis, reduction", [(0, "none"), (1, "add"), (-1, "mul"), (0, "max"), (1, "min")])
def test_scatter_elements(runtime, axis, reduction):
    n = [3, 4][axis]
    idx = rng.integers(-n, n, (2, 3)).astype(np.int64)
    if reduction == "none":  # unique along the axis: duplicates are undefined without a reduction
        idx = np.array([[0, 1, 2], [1, 2, 0]], np.int64) if axis == 0 else idx
    check(runtime, [h.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=axis, reduction=reduction)],
          [("x", np.float32, [3, 4]), ("i", np.int64, [2, 3]), ("u", np.float32, [2, 3])],
          {"x": rand(3, 4), "i": idx, "u": rand(2, 3)})


def test_scatter_opset10_name(runtime):
    check(runtime, [h.make_node("Scatter", ["x", "i", "u"], ["y"], axis=1)],
          [("x", np.float32, [2, 3]), ("i", np.int64, [2, 1]), ("u", np.float32, [2, 1])],
          {"x": rand(2, 3), "i": np.array([[2], [-3]], np.int64), "u": rand(2, 1)}, opset=10)


# ---- Trilu ----------------------------------------------------------------------------------

@pytest.mark.parametrize("upper, k", [(1, None), (0, None), (1, -1), (0, 2), (1, 7)])
def test_trilu(runtime, upper, k):
    inputs = ["x"] + ([] if k is None else ["k"])
    inits = {} if k is None else {"k": np.array(k, np.int64)}
    check(runtime, [h.make_node("Trilu", inputs, ["y"], upper=upper)], [("x", np.float32, [2, 3, 5])],
          {"x": rand(2, 3, 5)}, inits=inits)


def test_trilu_k_as_runtime_input_and_symbolic_dims(runtime):
    node = h.make_node("Trilu", ["x", "k"], ["y"], upper=0)
    model = make_model([node], [("x", np.int64, ["s", "s"]), ("k", np.int64, [])], ["y"])
    check_across_dims(runtime, model,
                      lambda d: {"x": rand(d["s"], d["s"], dtype=np.int64), "k": np.array(-1, np.int64)},
                      [{"s": 4}, {"s": 6}])


# ---- folded == GPU ---------------------------------------------------------------------------

FOLD_VS_GPU = {
    "gather": (h.make_node("Gather", ["a", "i"], ["y"], axis=1), {"i": i64(2, -1, 0)}),
    "gather_elements": (h.make_node("GatherElements", ["a", "j"], ["y"], axis=2),
                        {"j": rng.integers(-5, 5, (2, 2, 4))}),
    "gather_nd": (h.make_node("GatherND", ["a", "n"], ["y"], batch_dims=1), {"n": i64(1, 0, 2, 1).reshape(2, 2)}),
    "slice": (h.make_node("Slice", ["a", "s", "e", "x", "t"], ["y"]),
              {"s": i64(-1, 0), "e": i64(-INT64_MAX, 5), "x": i64(1, 2), "t": i64(-1, 2)}),
    "scatter_nd": (h.make_node("ScatterND", ["a", "n", "u"], ["y"], reduction="add"),
                   {"n": i64(1, 0, 1, 0).reshape(2, 2), "u": np.ones((2, 5), np.float32)}),
    "scatter_elements": (h.make_node("ScatterElements", ["a", "j", "v"], ["y"], axis=2, reduction="min"),
                         {"j": rng.integers(-5, 5, (2, 2, 4)), "v": np.zeros((2, 2, 4), np.float32)}),
    "trilu": (h.make_node("Trilu", ["a", "k"], ["y"]), {"k": np.array(1, np.int64)}),
}


@pytest.mark.parametrize("case", sorted(FOLD_VS_GPU))
def test_folded_equals_gpu(runtime, case):
    node, consts = FOLD_VS_GPU[case]
    a = rand(2, 3, 5)
    folded = compile_model(make_model([node], [], ["y"], {"a": a, **consts}))
    assert folded.metadata["planned_nodes"] == 0
    fed = make_model([node], [("a", np.float32, [2, 3, 5])], ["y"], consts)
    gpu = runtime.load_model(compile_model(fed))
    (expected,) = run_ort(fed, {"a": a})
    np.testing.assert_array_equal(folded.tensors["y"].data, expected, err_msg="folded vs onnxruntime")
    np.testing.assert_array_equal(gpu.run({"a": a})["y"], folded.tensors["y"].data)


# ---- copies by quads ------------------------------------------------------------------------

@pytest.mark.parametrize("shape, perm, dtype, quads", [
    ((2, 5, 3, 8), (0, 2, 1, 3), np.float32, True),   # heads split: the innermost axis moves whole
    ((2, 5, 3, 8), (2, 0, 1, 3), np.int32, True),
    ((2, 5, 3, 6), (0, 2, 1, 3), np.float32, False),  # 6 elements: not whole quads
    ((2, 5, 3, 8), (0, 1, 3, 2), np.float32, False),  # the innermost axis strided in x
    ((2, 5, 3, 8), (0, 2, 1, 3), np.int64, True),     # on the device one word an element too
    ((2, 5, 3, 8), (0, 2, 1, 3), np.float16, False),  # half words
])
def test_transposes_move_whole_quads_where_they_can(runtime, shape, perm, dtype, quads):
    """A copy whose innermost axis is contiguous, a multiple of 4 long, of 32-bit elements
    moves vec4s (gather.wgsl QUADS); the others element by element. Both against onnxruntime."""
    model = make_model([h.make_node("Transpose", ["x"], ["y"], perm=list(perm))], [("x", dtype, list(shape))], ["y"])
    compiled = compile_model(model)
    assert any(dict(s.defs).get("QUADS") for s in compiled.shaders) == quads
    x = rand(*shape, dtype=dtype)
    np.testing.assert_array_equal(runtime.load_model(compiled).run({"x": x})["y"], run_ort(model, {"x": x})[0])


def _running_quads(exe, label: str) -> list[bool]:
    """QUADS of each `label` dispatch a run launches now."""
    return [bool(dict(exe.model.shaders[d.shader].defs).get("QUADS")) for d in exe.dispatch_commands()
            if all(d.workgroups) and exe.model.shaders[d.shader].label == label]


@pytest.mark.parametrize("op", ["slice", "concat", "split"])
def test_symbolic_widths_move_quads_where_the_run_allows(runtime, op):
    """A channel Slice, Concat or Split of NCHW images of symbolic size (yolo_style's): whole quads where
    the run's width makes every row a multiple of 4 (a Select on the dims), elements where not.
    Each size against onnxruntime, one plan."""
    if op == "slice":
        nodes = [h.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"])]
        consts = {"starts": np.array([2], np.int64), "ends": np.array([6], np.int64), "axes": np.array([1], np.int64)}
        inputs = [("x", np.float32, ["n", 8, "h", "w"])]
        label = "strided_copy"
    elif op == "split":  # 5 + 3 channels, the second part unused
        nodes = [h.make_node("Split", ["x", "sizes"], ["y", "unused"], axis=1)]
        consts = {"sizes": np.array([5, 3], np.int64)}
        inputs = [("x", np.float32, ["n", 8, "h", "w"])]
        label = "split"
    else:
        nodes = [h.make_node("Concat", ["x", "z"], ["y"], axis=1)]
        consts = {}
        inputs = [("x", np.float32, ["n", 8, "h", "w"]), ("z", np.float32, ["n", 3, "h", "w"])]
        label = "concat"
    model = make_model(nodes, inputs, ["y"], consts)
    exe = runtime.load_model(compile_model(model, {"n": 1, "h": 5, "w": 8}))
    for size, quads in (((1, 5, 8), True), ((2, 3, 7), False), ((1, 2, 12), True), ((1, 3, 6), False)):
        n, hh, ww = size
        exe.update_dimensions({"n": n, "h": hh, "w": ww})
        feeds = {name: rand(n, shape[1], hh, ww) for name, _, shape in inputs}
        np.testing.assert_array_equal(exe.run(feeds)["y"], run_ort(model, feeds)[0], err_msg=str(size))
        assert _running_quads(exe, label) == [quads], size
    assert exe.stats.recompiles == 0
