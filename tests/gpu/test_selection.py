"""TopK, Hardmax and OneHot on the GPU against onnxruntime (and their folding against numpy)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

from tests.builders.selection import onehot_model, topk_model
from tests.helpers import assert_matches_ort, compile_model, make_model, run_onyxia, run_ort

RNG = np.random.default_rng(0)


def ties(shape, dtype=np.float32, spread: int = 4) -> np.ndarray:
    """Small integers: many equal values, so the tie order (lower index first) is exercised."""
    return RNG.integers(-spread, spread + 1, shape).astype(dtype)


# ---- TopK ---------------------------------------------------------------------------------

@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_topk_random_shapes_match_ort(runtime, data):
    shape = tuple(data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=3), label="shape"))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    k = data.draw(st.integers(1, shape[axis]), label="k")
    largest = data.draw(st.sampled_from([0, 1]), label="largest")
    x = ties(shape)
    model = topk_model(shape, k, axis=axis, largest=largest)
    assert_matches_ort(runtime, model, {"x": x}, rtol=0, atol=0)


@pytest.mark.parametrize("n,k", [(700, 9), (2048, 3), (3000, 40)])
@pytest.mark.parametrize("largest", [0, 1])
def test_topk_long_lines(runtime, n, k, largest):
    # 700 and 2048 are bitonic-sorted in shared memory; 3000 takes the k-pass selection kernel.
    x = ties((3, n), spread=50)
    assert_matches_ort(runtime, topk_model((3, n), k, axis=1, largest=largest), {"x": x}, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float16, np.uint8])
def test_topk_dtypes(runtime, dtype):
    x = RNG.integers(0, 20, (4, 9)).astype(dtype)
    for largest in (0, 1):
        assert_matches_ort(runtime, topk_model((4, 9), 4, dtype=dtype, largest=largest), {"x": x}, rtol=0, atol=0)


def test_topk_inner_axis_and_opset1(runtime):
    x = ties((2, 7, 3))
    assert_matches_ort(runtime, topk_model((2, 7, 3), 3, axis=1, sorted=1), {"x": x}, rtol=0, atol=0)
    assert_matches_ort(runtime, topk_model((2, 7, 3), 2, opset=9, axis=1), {"x": x}, rtol=0, atol=0)


def test_topk_symbolic_line_length(runtime):
    """A symbolic axis length takes the selection kernel; dims change without a recompile."""
    model = topk_model(["b", "n"], 3, axis=-1)
    exe = runtime.load_model(compile_model(model, {"b": 2, "n": 10}))
    for b, n in ((2, 10), (5, 300), (1, 3)):
        exe.update_dimensions({"b": b, "n": n})
        x = ties((b, n), spread=20)
        out = exe.run({"x": x})
        for ours, ref in zip((out["v"], out["i"]), run_ort(model, {"x": x})):
            np.testing.assert_array_equal(ours, ref)
    assert exe.stats.recompiles == 0


def assert_folds_like_ort(runtime, nodes, outputs, inits):
    """An all-constant model folds to no dispatches and still matches onnxruntime."""
    model = make_model(nodes, [], outputs, inits)
    assert not any(op.steps for op in compile_model(model).operations if op.op_type != "WriteBuffer")
    for ours, ref in zip(run_onyxia(runtime, model, {}), run_ort(model, {})):
        assert ours.dtype == ref.dtype
        np.testing.assert_array_equal(ours, ref)


def test_constant_inputs_fold(runtime):
    x = ties((3, 5))
    assert_folds_like_ort(runtime, [h.make_node("TopK", ["c", "k"], ["v", "i"], axis=1, largest=0)], ["v", "i"],
                          {"c": x, "k": np.array([2], np.int64)})
    assert_folds_like_ort(runtime, [h.make_node("TopK", ["c", "k"], ["v", "i"], axis=0)], ["v", "i"],
                          {"c": x, "k": np.array([3], np.int64)})
    assert_folds_like_ort(runtime, [h.make_node("Hardmax", ["c"], ["y"], axis=0)], ["y"], {"c": x})
    assert_folds_like_ort(runtime, [h.make_node("OneHot", ["i", "d", "v"], ["y"], axis=0)], ["y"],
                          {"i": np.array([[0, -1], [7, 2]], np.int64), "d": np.array(3, np.int64),
                           "v": np.array([1, 5], np.float32)})


# ---- Hardmax ------------------------------------------------------------------------------

@pytest.mark.parametrize("opset,axis", [(11, 0), (11, 1), (11, 2), (11, -1), (13, 0), (13, 1), (13, -1)])
def test_hardmax_matches_ort(runtime, opset, axis):
    x = ties((3, 4, 5), spread=2)  # repeated maxima: the first one wins
    model = make_model([h.make_node("Hardmax", ["x"], ["y"], axis=axis)], [("x", np.float32, (3, 4, 5))], ["y"],
                       opset=opset)
    assert_matches_ort(runtime, model, {"x": x}, rtol=0, atol=0)


def test_hardmax_long_rows_and_default_axis(runtime):
    x = RNG.standard_normal((2, 1000)).astype(np.float32)
    for opset in (11, 13):
        model = make_model([h.make_node("Hardmax", ["x"], ["y"])], [("x", np.float32, (2, 1000))], ["y"], opset=opset)
        assert_matches_ort(runtime, model, {"x": x}, rtol=0, atol=0)


# ---- OneHot -------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 0, 1, 2, -3])
def test_onehot_axes_and_negative_indices(runtime, axis):
    idx = np.array([[1, -1, 5], [0, 2, -4], [3, -5, 4]], np.int64)  # -5 and 5 are out of range: all off
    model = onehot_model(idx.shape, 5, np.array([-2.0, 3.5], np.float32), axis=axis)
    assert_matches_ort(runtime, model, {"i": idx}, rtol=0, atol=0)


def test_onehot_float_indices_and_int_values(runtime):
    # onnxruntime has kernels for a few (indices, values, depth) type triples only; onnx.reference
    # is the oracle for the others.
    for idx, depth, values, axis in [
        (np.array([0.0, 2.7, -1.2, 3.0], np.float32), np.float32(4.0), np.array([0, 9], np.int64), -1),
        (np.array([[3, -2], [0, 8]], np.int32), np.int64(4), np.array([-1, 7], np.int32), 1),
    ]:
        model = onehot_model(idx.shape, depth, values, ind_dtype=idx.dtype, depth_dtype=depth.dtype, axis=axis)
        ref = ReferenceEvaluator(model).run(None, {"i": idx})[0]
        ours = run_onyxia(runtime, model, {"i": idx})[0]
        assert ours.dtype == ref.dtype
        np.testing.assert_array_equal(ours, ref)


def test_onehot_symbolic_indices(runtime):
    model = onehot_model(["n"], 6, np.array([0, 1], np.int32), ind_dtype=np.int32)
    exe = runtime.load_model(compile_model(model, {"n": 4}))
    for n in (4, 9):
        exe.update_dimensions({"n": n})
        idx = RNG.integers(-6, 6, n).astype(np.int32)
        np.testing.assert_array_equal(exe.run({"i": idx})["y"], ReferenceEvaluator(model).run(None, {"i": idx})[0])
    assert exe.stats.recompiles == 0


# ---- models for shader validation (one per kernel variant) --------------------------------

