"""Reduce*, ArgMax/ArgMin and CumSum/CumProd on the GPU against onnxruntime or onnx.reference (CumProd,
opset 26) and against folding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

from onyxia.operators.reduction.reduction import REDUCE_OPS
from tests.helpers import assert_matches_ort, compile_model, make_model, run_onyxia, run_ort

RNG = np.random.default_rng(0)
SHAPE = (3, 4, 5)
X = RNG.standard_normal(SHAPE).astype(np.float32)


def reduce_model(op: str, axes: list[int] | None, shape=SHAPE, dtype=np.float32, opset: int = 18,
                 as_input: bool = True, **attrs):
    """One Reduce* node; axes as a constant input (None: no axes input) or as an attribute."""
    if as_input:
        inputs, inits = (["x", "axes"], {"axes": np.array(axes, np.int64)}) if axes is not None else (["x"], {})
        node = h.make_node(op, inputs, ["y"], **attrs)
    else:
        inits = {}
        node = h.make_node(op, ["x"], ["y"], **({"axes": axes} if axes is not None else {}), **attrs)
    return make_model([node], [("x", dtype, shape)], ["y"], inits, opset=opset)


AXES_CASES = [([1], 1), ([0, 2], 0), ([-1], 1), ([-3, -1], 1), ([0, 1, 2], 0), (None, 0), (None, 1)]


@pytest.mark.parametrize("op", list(REDUCE_OPS))
@pytest.mark.parametrize("axes,keepdims", AXES_CASES)
def test_reduce_matches_ort(runtime, op, axes, keepdims):
    x = X * 0.5 if op == "ReduceProd" else X  # keep products in a comfortable range
    assert_matches_ort(runtime, reduce_model(op, axes, keepdims=keepdims), {"x": x}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", list(REDUCE_OPS))
def test_noop_with_empty_axes_maps_each_element(runtime, op):
    # noop_with_empty_axes reduces nothing: ReduceL1 gives |x|, ReduceSumSquare x², as ORT does.
    for axes in ([], None):
        assert_matches_ort(runtime, reduce_model(op, axes, noop_with_empty_axes=1), {"x": X})


@pytest.mark.parametrize("op,opset", [("ReduceSum", 11), ("ReduceMean", 13), ("ReduceMax", 17), ("ReduceL2", 13),
                                      ("ReduceLogSumExp", 11)])
def test_axes_attribute_in_older_opsets(runtime, op, opset):
    assert_matches_ort(runtime, reduce_model(op, [0, -1], opset=opset, as_input=False, keepdims=0), {"x": X})
    assert_matches_ort(runtime, reduce_model(op, None, opset=opset, as_input=False), {"x": X})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                                "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"])
def test_reduce_integers(runtime, op, dtype):
    # Mean truncates toward zero; L2 and LogSumExp go through f32 and truncate back, as ORT does.
    x = RNG.integers(-7, 8, SHAPE).astype(dtype)
    if op == "ReduceProd":
        x = RNG.integers(-3, 4, SHAPE).astype(dtype)
    assert_matches_ort(runtime, reduce_model(op, [1], dtype=dtype, keepdims=0), {"x": x}, rtol=0, atol=0)


def test_reduce_log_sum_exp_is_stable(runtime):
    x = (X * 100 + 500).astype(np.float32)  # exp would overflow without the max shift
    assert_matches_ort(runtime, reduce_model("ReduceLogSumExp", [2]), {"x": x}, rtol=1e-6, atol=1e-4)


def test_reduce_over_an_empty_axis(runtime):
    x = np.zeros((2, 0, 3), np.float32)
    for op in ("ReduceSum", "ReduceMax", "ReduceMean", "ReduceLogSumExp"):
        assert_matches_ort(runtime, reduce_model(op, [1], shape=x.shape, keepdims=0), {"x": x})


def test_symbolic_dims_change_without_recompiling(runtime):
    model = make_model([h.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0),
                        h.make_node("ReduceMax", ["x", "ax0"], ["z"], keepdims=1)],
                       [("x", np.float32, ["batch", "seq", 6])], ["y", "z"],
                       {"axes": np.array([-1], np.int64), "ax0": np.array([0, 1], np.int64)})
    exe = runtime.load_model(compile_model(model, {"batch": 2, "seq": 3}))
    for dims in ({"batch": 2, "seq": 3}, {"batch": 1, "seq": 300}, {"batch": 5, "seq": 1}):
        exe.update_dimensions(dims)
        x = RNG.standard_normal((dims["batch"], dims["seq"], 6)).astype(np.float32)
        out, ref = exe.run({"x": x}), run_ort(model, {"x": x})
        np.testing.assert_allclose(out["y"], ref[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out["z"], ref[1], rtol=1e-5, atol=1e-6)
    assert exe.stats.recompiles == 0


def test_long_rows_and_a_folded_grid(runtime):
    # A symbolic row length gives 256 lanes per row; 70000 rows need a grid folded into 2-D.
    model = reduce_model("ReduceSum", [-1], shape=["rows", "k"], keepdims=0)
    x = RNG.standard_normal((70000, 3)).astype(np.float32)
    assert_matches_ort(runtime, model, {"x": x}, {"rows": 70000, "k": 3}, rtol=1e-5, atol=1e-5)
    x = RNG.standard_normal((2, 5000)).astype(np.float32)
    assert_matches_ort(runtime, model, {"x": x}, {"rows": 2, "k": 5000}, rtol=1e-4, atol=1e-4)
    # Outer-axis reduction of many columns: adjacent threads take adjacent outputs.
    x = RNG.standard_normal((300, 700)).astype(np.float32)
    assert_matches_ort(runtime, reduce_model("ReduceMax", [0], shape=x.shape), {"x": x})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims,last", [(1, 0), (0, 0), (1, 1), (0, 1)])
def test_arg_reduce_matches_ort(runtime, op, axis, keepdims, last):
    x = RNG.integers(0, 3, SHAPE).astype(np.float32)  # many ties: select_last_index matters
    model = make_model([h.make_node(op, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=last)],
                       [("x", np.float32, SHAPE)], ["y"])
    assert_matches_ort(runtime, model, {"x": x}, rtol=0, atol=0)


def test_arg_reduce_int_input_and_long_axis(runtime):
    x = RNG.integers(-50, 50, (3, 1000)).astype(np.int64)
    model = make_model([h.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)], [("x", np.int64, ["b", "n"])], ["y"])
    assert_matches_ort(runtime, model, {"x": x}, {"b": 3, "n": 1000}, rtol=0, atol=0)


def cumsum_model(axis: int, shape=SHAPE, dtype=np.float32, **attrs):
    return make_model([h.make_node("CumSum", ["x", "axis"], ["y"], **attrs)], [("x", dtype, shape)], ["y"],
                      {"axis": np.array(axis, np.int32)})


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_matches_ort(runtime, axis, exclusive, reverse):
    assert_matches_ort(runtime, cumsum_model(axis, exclusive=exclusive, reverse=reverse), {"x": X})


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 1)])
def test_cumsum_long_symbolic_lines_and_ints(runtime, exclusive, reverse):
    x = RNG.integers(-5, 6, (2, 1300)).astype(np.int64)  # several chunks per line, exact in integers
    model = cumsum_model(1, shape=["b", "n"], dtype=np.int64, exclusive=exclusive, reverse=reverse)
    assert_matches_ort(runtime, model, {"x": x}, {"b": 2, "n": 1300}, rtol=0, atol=0)


def cumprod_model(axis: int, shape, dtype, **attrs):
    return make_model([h.make_node("CumProd", ["x", "axis"], ["y"], **attrs)], [("x", dtype, shape)], ["y"],
                      {"axis": np.array(axis, np.int64)}, opset=26)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_cumprod_matches_reference(runtime, axis, exclusive, reverse, dtype):
    x = (RNG.uniform(0.5, 1.5, SHAPE) if dtype == np.float32 else RNG.integers(-3, 4, SHAPE)).astype(dtype)
    model = cumprod_model(axis, SHAPE, dtype, exclusive=exclusive, reverse=reverse)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = run_onyxia(runtime, model, {"x": x})
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_cumprod_long_symbolic_lines(runtime):
    x = np.where(RNG.random((2, 1300)) < 0.5, -1, 1).astype(np.int64)  # signs: exact over many chunks
    model = cumprod_model(1, ["b", "n"], np.int64, exclusive=1)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(run_onyxia(runtime, model, {"x": x}, {"b": 2, "n": 1300})[0], expected)


# ---- folding agrees with the GPU ----------------------------------------------------------

def folded_vs_gpu(runtime, nodes, x, extra_inits):
    """The same nodes with x as a graph input (GPU) and as an initializer (folded); the folded
    values also match onnxruntime."""
    outs = [o for n in nodes for o in n.output]
    fed = make_model(nodes, [("x", x.dtype, x.shape)], outs, extra_inits)
    gpu = run_onyxia(runtime, fed, {"x": x})
    folded_model = make_model(nodes, [], outs, {**extra_inits, "x": x})
    compiled = compile_model(folded_model)
    assert not any(op.steps for op in compiled.operations if op.op_type != "WriteBuffer"), "expected no dispatches"
    folded = run_onyxia(runtime, folded_model, {})
    for name, a, b, ref in zip(outs, gpu, folded, run_ort(fed, {"x": x}), strict=True):
        assert a.dtype == b.dtype == ref.dtype and a.shape == b.shape == ref.shape, name
        np.testing.assert_allclose(b, ref, rtol=1e-5, atol=1e-6, err_msg=f"{name} folded vs onnxruntime")
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_folding_matches_gpu(runtime):
    axes = {"axes": np.array([0, 2], np.int64), "ax": np.array(1, np.int64)}
    nodes = [h.make_node(op, ["x", "axes"], [f"y_{op}"], keepdims=0) for op in REDUCE_OPS]
    nodes += [h.make_node("ArgMax", ["x"], ["am"], axis=1), h.make_node("ArgMin", ["x"], ["an"], axis=2,
                                                                         select_last_index=1)]
    nodes += [h.make_node("CumSum", ["x", "ax"], ["cs"], exclusive=1, reverse=1)]
    folded_vs_gpu(runtime, nodes, X * 0.5, axes)


def test_cumprod_folding_matches_gpu(runtime):
    nodes = [h.make_node("CumProd", ["x", "ax"], ["cp"], exclusive=1, reverse=1),
             h.make_node("CumProd", ["x", "ax0"], ["cp0"])]
    x = RNG.uniform(0.5, 1.5, SHAPE).astype(np.float32)
    fed = make_model(nodes, [("x", x.dtype, x.shape)], ["cp", "cp0"], {
        "ax": np.array(1, np.int64), "ax0": np.array(0, np.int64)}, opset=26)
    gpu = run_onyxia(runtime, fed, {"x": x})
    folded_model = make_model(nodes, [], ["cp", "cp0"], {"x": x, "ax": np.array(1, np.int64),
                                                         "ax0": np.array(0, np.int64)}, opset=26)
    assert compile_model(folded_model).num_dispatches == 0
    # onnxruntime has no CumProd (opset 26): onnx.reference is the oracle, as for the GPU above
    expected = ReferenceEvaluator(fed).run(None, {"x": x})
    for a, b, ref in zip(gpu, run_onyxia(runtime, folded_model, {}), expected, strict=True):
        np.testing.assert_allclose(b, ref, rtol=1e-5, err_msg="folded vs onnx.reference")
        np.testing.assert_allclose(a, b, rtol=1e-6)


# ---- property test ------------------------------------------------------------------------

@st.composite
def reduce_cases(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    axes = draw(st.lists(st.integers(-rank, rank - 1), unique_by=lambda a: a % rank, max_size=rank))
    op = draw(st.sampled_from(sorted(REDUCE_OPS) + ["ArgMax", "ArgMin"]))
    return op, shape, axes, draw(st.integers(0, 1)), draw(st.integers(0, 2 ** 31))


@settings(max_examples=25, deadline=None)
@given(reduce_cases())
def test_random_reductions_match_ort(runtime, case):
    op, shape, axes, keepdims, seed = case
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    if op.startswith("Arg"):
        model = make_model([h.make_node(op, ["x"], ["y"], axis=axes[0] if axes else 0, keepdims=keepdims)],
                           [("x", np.float32, shape)], ["y"])
    else:
        model = reduce_model(op, axes, shape=shape, keepdims=keepdims)
    assert_matches_ort(runtime, model, {"x": x * 0.7}, rtol=1e-4, atol=1e-5)
