"""Data-dependent output shapes on the GPU against onnxruntime: NonZero, Compress, Unique,
NonMaxSuppression and TopK with a fed k. Each count is read back (a ReadSymbol step) and sizes
everything after it; constant inputs fold to the same values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper as h

from onyxia.errors import InputError, ShapeInferenceError
from onyxia.plan import ReadSymbol
from tests.helpers import compile_model, make_model, run_onyxia, run_ort

RNG = np.random.default_rng(7)


def sparse(shape, dtype, density: float = 0.4) -> np.ndarray:
    """Mostly zeros, so the counts vary between draws."""
    keep = RNG.random(shape) < density
    if np.dtype(dtype) == np.bool_:
        return keep
    return (keep * RNG.integers(1, 9, shape)).astype(dtype)


def assert_same(ours: list[np.ndarray], ref: list[np.ndarray]) -> None:
    assert len(ours) == len(ref)
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, a.shape, b.dtype, b.shape)
        np.testing.assert_array_equal(a, b, err_msg=f"output {i}")


def run_exe_like_ort(exe, model, feeds_list):
    """One executor, several feeds: every run matches onnxruntime, nothing recompiles."""
    for feeds in feeds_list:
        out = exe.run(feeds)
        assert_same([out[n] for n in exe.model.outputs], run_ort(model, feeds))
    assert exe.stats.recompiles == 0


# ---- NonZero ---------------------------------------------------------------------------------

@settings(max_examples=15, deadline=None)
@given(shape=st.lists(st.integers(1, 7), min_size=1, max_size=3), dtype=st.sampled_from([np.float32, np.int64,
                                                                                         np.bool_, np.uint8]))
def test_nonzero_matches_ort(runtime, shape, dtype):
    model = make_model([h.make_node("NonZero", ["x"], ["y"])], [("x", dtype, shape)], ["y"])
    exe = runtime.load_model(compile_model(model))
    run_exe_like_ort(exe, model, [{"x": sparse(shape, dtype, d)} for d in (0.0, 0.3, 1.0)])


def test_nonzero_count_sizes_later_dispatches(runtime):
    """The count symbol reaches the kernels after it: Transpose and Cast over [rank, count], and a
    symbolic input dim changes the bound without recompiling."""
    nodes = [h.make_node("NonZero", ["x"], ["nz"]), h.make_node("Transpose", ["nz"], ["t"]),
             h.make_node("Cast", ["t"], ["y"], to=1), h.make_node("ReduceSum", ["y"], ["s"], keepdims=0)]
    model = make_model(nodes, [("x", np.float32, ["n", 5])], ["y", "s"])
    compiled = compile_model(model, {"n": 3})
    reads = [s for s in compiled.steps if isinstance(s, ReadSymbol)]
    assert len(reads) == 1 and set(compiled.data_symbols) == {reads[0].symbol}
    exe = runtime.load_model(compiled)
    for n in (3, 9, 1, 4):
        exe.update_dimensions({"n": n})
        run_exe_like_ort(exe, model, [{"x": sparse((n, 5), np.float32, 0.5)}])


def test_nonzero_folds_like_the_gpu(runtime):
    x = sparse((4, 6), np.float32)
    folded = make_model([h.make_node("NonZero", ["c"], ["y"])], [], ["y"], {"c": x})
    assert not any(op.steps for op in compile_model(folded).operations)
    live = make_model([h.make_node("NonZero", ["x"], ["y"])], [("x", np.float32, (4, 6))], ["y"])
    on_host = run_onyxia(runtime, folded, {})
    assert_same(on_host, run_ort(live, {"x": x}))
    assert_same(on_host, run_onyxia(runtime, live, {"x": x}))


# ---- Compress --------------------------------------------------------------------------------

@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_compress_matches_ort(runtime, data):
    shape = tuple(data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=3), label="shape"))
    axis = data.draw(st.sampled_from([None, *range(-len(shape), len(shape))]), label="axis")
    dim = int(np.prod(shape)) if axis is None else shape[axis]
    length = data.draw(st.integers(1, dim), label="condition length")  # shorter: the rest is dropped
    attrs = {} if axis is None else {"axis": axis}
    model = make_model([h.make_node("Compress", ["x", "c"], ["y"], **attrs)],
                       [("x", np.float32, shape), ("c", np.bool_, (length,))], ["y"], opset=11)
    exe = runtime.load_model(compile_model(model))
    x = RNG.standard_normal(shape).astype(np.float32)
    run_exe_like_ort(exe, model, [{"x": x, "c": sparse((length,), np.bool_, d)} for d in (0.0, 0.5, 1.0)])


def test_compress_constant_condition_needs_no_readback(runtime):
    cond = np.array([True, False, True, True])
    model = make_model([h.make_node("Compress", ["x", "c"], ["y"], axis=1)], [("x", np.float32, (3, 4))], ["y"],
                       {"c": cond})
    compiled = compile_model(model)
    assert not compiled.data_symbols and not any(isinstance(s, ReadSymbol) for s in compiled.steps)
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    assert_same(run_onyxia(runtime, model, {"x": x}), run_ort(model, {"x": x}))


# ---- Unique ----------------------------------------------------------------------------------

@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_unique_matches_ort(runtime, data):
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3), label="shape"))
    axis = data.draw(st.sampled_from([None, *range(-len(shape), len(shape))]), label="axis")
    sorted_ = data.draw(st.sampled_from([0, 1]), label="sorted")
    dtype = data.draw(st.sampled_from([np.float32, np.int64]), label="dtype")
    attrs = {"sorted": sorted_} | ({} if axis is None else {"axis": axis})
    model = make_model([h.make_node("Unique", ["x"], ["y", "i", "inv", "c"], **attrs)], [("x", dtype, shape)],
                       ["y", "i", "inv", "c"], opset=11)
    exe = runtime.load_model(compile_model(model))
    run_exe_like_ort(exe, model, [{"x": RNG.integers(-2, 2, shape).astype(dtype)} for _ in range(2)])


def test_unique_folds_like_the_gpu(runtime):
    x = RNG.integers(0, 4, (3, 5)).astype(np.float32)
    for attrs in ({}, {"axis": 1, "sorted": 0}):
        folded = make_model([h.make_node("Unique", ["c"], ["y", "i", "inv", "n"], **attrs)], [], ["y", "i", "inv", "n"],
                            {"c": x}, opset=11)
        assert not any(op.steps for op in compile_model(folded).operations)
        live = make_model([h.make_node("Unique", ["x"], ["y", "i", "inv", "n"], **attrs)], [("x", np.float32, (3, 5))],
                          ["y", "i", "inv", "n"], opset=11)
        on_host = run_onyxia(runtime, folded, {})
        assert_same(on_host, run_ort(live, {"x": x}))
        assert_same(on_host, run_onyxia(runtime, live, {"x": x}))


def test_unique_past_the_loop_budget_is_refused():
    model = make_model([h.make_node("Unique", ["x"], ["y"], name="big")], [("x", np.float32, (300, 200))], ["y"],
                       opset=11)
    with pytest.raises(ShapeInferenceError, match="node 'big' \\(Unique\\).*up to 32768"):
        compile_model(model)


# ---- NonMaxSuppression -----------------------------------------------------------------------

def nms_model(batch, classes, boxes, inputs=5, center=0):
    names = ["boxes", "scores", "max", "iou", "score"][:inputs]
    spec = [("boxes", np.float32, (batch, boxes, 4)), ("scores", np.float32, (batch, classes, boxes)),
            ("max", np.int64, (1,)), ("iou", np.float32, (1,)), ("score", np.float32, (1,))][:inputs]
    return make_model([h.make_node("NonMaxSuppression", names, ["y"], center_point_box=center)], spec, ["y"],
                      opset=11)


def nms_feeds(batch, classes, boxes, inputs=5, max_out=3, iou=0.5, score=0.2):
    corners = RNG.random((batch, boxes, 2)).astype(np.float32) * 4
    sizes = 0.5 + RNG.random((batch, boxes, 2)).astype(np.float32)
    feeds = {"boxes": np.concatenate([corners, corners + sizes], axis=2)[..., [1, 0, 3, 2]],
             "scores": RNG.random((batch, classes, boxes)).astype(np.float32),
             "max": np.array([max_out], np.int64), "iou": np.array([iou], np.float32),
             "score": np.array([score], np.float32)}
    return {k: feeds[k] for k in list(feeds)[:inputs]}


@pytest.mark.parametrize("batch,classes,boxes", [(1, 1, 6), (2, 3, 40), (1, 2, 300)])
@pytest.mark.parametrize("center", [0, 1])
def test_nms_matches_ort(runtime, batch, classes, boxes, center):
    model = nms_model(batch, classes, boxes, center=center)
    exe = runtime.load_model(compile_model(model))
    run_exe_like_ort(exe, model, [nms_feeds(batch, classes, boxes, max_out=m, iou=iou, score=s)
                                  for m, iou, s in ((3, 0.5, 0.2), (100, 0.3, 0.0), (0, 0.5, 0.0), (5, 0.9, 0.9))])


@pytest.mark.parametrize("inputs", [2, 3, 4])
def test_nms_optional_inputs(runtime, inputs):
    model = nms_model(2, 2, 10, inputs=inputs)
    exe = runtime.load_model(compile_model(model))
    run_exe_like_ort(exe, model, [nms_feeds(2, 2, 10, inputs=inputs, max_out=4)])


def test_nms_errors_name_node_and_attribute():
    model = nms_model(1, 1, 6, center=2)
    with pytest.raises(ShapeInferenceError, match="NonMaxSuppression.*'center_point_box' must be 0 or 1"):
        compile_model(model)


# ---- TopK with a fed k -----------------------------------------------------------------------

def test_topk_fed_k_changes_without_recompiling(runtime):
    model = make_model([h.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)],
                       [("x", np.float32, (3, 50)), ("k", np.int64, (1,))], ["v", "i"])
    compiled = compile_model(model)
    assert [s.tensor for s in compiled.steps if isinstance(s, ReadSymbol)] == ["k"]
    exe = runtime.load_model(compiled)
    run_exe_like_ort(exe, model, [{"x": RNG.standard_normal((3, 50)).astype(np.float32),
                                   "k": np.array([k], np.int64)} for k in (5, 1, 50, 0, 12)])
    assert exe.backend is not None and exe.stats.reallocs == 0  # capacity: the bound (k <= 50)
    with pytest.raises(InputError, match="tensor 'k' holds 51, which must be \\[0, 50\\]"):
        exe.run({"x": np.zeros((3, 50), np.float32), "k": np.array([51], np.int64)})


def test_errors_name_node_and_input():
    model = make_model([h.make_node("Compress", ["x", "c"], ["y"], name="pick")],
                       [("x", np.float32, (3, 4)), ("c", np.bool_, (2, 2))], ["y"], opset=11)
    with pytest.raises(ShapeInferenceError, match="node 'pick' \\(Compress\\) input 1: condition must be 1-D"):
        compile_model(model)
    model = make_model([h.make_node("Compress", ["x", "c"], ["y"], name="pick", axis=0)],
                       [("x", np.float32, (3, 4)), ("c", np.bool_, (5,))], ["y"], opset=11)
    with pytest.raises(ShapeInferenceError, match="node 'pick' \\(Compress\\) input 1: condition has 5 entries"):
        compile_model(model)


def test_nms_at_its_box_limit(runtime):
    """1024 boxes in one class: the most one workgroup ranks within lavapipe's loop budget; past
    it the large path, up to 32768."""
    model = nms_model(1, 1, 1024)
    exe = runtime.load_model(compile_model(model))
    run_exe_like_ort(exe, model, [nms_feeds(1, 1, 1024, max_out=2000, iou=0.2, score=0.0)])
    past = nms_model(1, 1, 1025)  # one past it: the large path (rank, bit matrix, chunked scan)
    run_exe_like_ort(runtime.load_model(compile_model(past)), past,
                     [nms_feeds(1, 1, 1025, max_out=2000, iou=0.2, score=0.0)])
    with pytest.raises(ShapeInferenceError, match="up to 32768"):
        compile_model(nms_model(1, 1, 32769))


