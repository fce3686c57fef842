"""Quantized operators (operators/quantized/qlinear.py) on the GPU against onnxruntime.

Integer products and their requantization are exact: every output equals onnxruntime's. The
com.microsoft elementwise and pooling ops go through float (onnxruntime computes some of them in
fixed point), so they may differ by one quantization step.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.errors import OnyxiaError
from onyxia.operators import core_operator_registry
from tests.builders.qlinear import I8, MS, U8, ms_model, qlinear_matmul_model, qvalues, scalar
from tests.helpers import compile_model, make_model, run_onyxia, run_ort

PROPERTY = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# (A, B) element types onnxruntime's CPU kernels take
PAIRS = [(U8, U8), (U8, I8), (I8, I8)]


def check_exact(runtime, model, feeds, dims=None):
    ours = run_onyxia(runtime, model, feeds, dims)
    theirs = run_ort(model, feeds)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.dtype == b.dtype and a.shape == b.shape, f"output {i}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        np.testing.assert_array_equal(a, b, err_msg=f"output {i}")
    return ours


def check_within_one(runtime, model, feeds, dims=None):
    ours = run_onyxia(runtime, model, feeds, dims)[0]
    (theirs,) = run_ort(model, feeds)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert np.abs(ours.astype(np.int32) - theirs.astype(np.int32)).max(initial=0) <= 1


# ---- MatMulInteger / QLinearMatMul ----------------------------------------------------------------

@PROPERTY
@given(pair=st.sampled_from(PAIRS), m=st.integers(1, 9), k=st.sampled_from([1, 7, 64, 300]), n=st.integers(1, 9),
       batch=st.sampled_from([(), (2,)]), zps=st.sampled_from(["none", "scalar", "column"]), seed=st.integers(0, 2**16))
def test_matmul_integer_matches_ort(runtime, pair, m, k, n, batch, zps, seed):
    rng = np.random.default_rng(seed)
    (ta, tb), inits = pair, {}
    inputs = ["a", "b"]
    if zps != "none":
        inits["azp"] = qvalues(rng, ta, ())
        inits["bzp"] = qvalues(rng, tb, (n,) if zps == "column" else ())
        inputs += ["azp", "bzp"]
    model = make_model([h.make_node("MatMulInteger", inputs, ["y"])], [("a", ta, [*batch, "m", k]), ("b", tb, [k, n])],
                       ["y"], inits)
    feeds = {"a": qvalues(rng, ta, (*batch, m, k)), "b": qvalues(rng, tb, (k, n))}
    check_exact(runtime, model, feeds, {"m": m})


def test_matmul_integer_long_k_accumulates_in_int32(runtime):
    # 4096 products of 255 * 255: sums far beyond float32's exact integers (2^24)
    a = np.full((2, 4096), 255, U8)
    b = np.full((4096, 3), 255, U8)
    b[::7] = 254
    model = make_model([h.make_node("MatMulInteger", ["a", "b"], ["y"])], [("a", U8, [2, 4096]), ("b", U8, [4096, 3])],
                       ["y"])
    (y,) = check_exact(runtime, model, {"a": a, "b": b})
    assert y[0, 0] == int(a[0].astype(np.int64) @ b[:, 0].astype(np.int64))


@PROPERTY
@given(pair=st.sampled_from(PAIRS), m=st.integers(1, 9), k=st.sampled_from([3, 64, 257]), n=st.integers(1, 9),
       per_column=st.booleans(), seed=st.integers(0, 2**16))
def test_qlinear_matmul_is_exact(runtime, pair, m, k, n, per_column, seed):
    rng = np.random.default_rng(seed)
    ta, tb = pair
    model = qlinear_matmul_model(ta, tb, k, n, per_column, rng)
    check_exact(runtime, model, {"a": qvalues(rng, ta, (m, k)), "b": qvalues(rng, tb, (k, n))}, {"m": m})


def test_constant_integer_product_folds_to_the_gpu_result(runtime):
    rng = np.random.default_rng(3)
    model = qlinear_matmul_model(U8, I8, 16, 4, True, rng, m=5)
    a, b = qvalues(rng, U8, (5, 16)), qvalues(rng, I8, (16, 4))
    (gpu,) = run_onyxia(runtime, model, {"a": a, "b": b})
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer} | {"a": a, "b": b}
    const = make_model(model.graph.node, [], ["y"], inits)
    assert compile_model(const).num_dispatches == 0
    (on_host,) = run_onyxia(runtime, const, {})
    (expected,) = run_ort(model, {"a": a, "b": b})
    assert on_host.dtype == expected.dtype
    np.testing.assert_array_equal(on_host, expected)  # integer products: exact
    np.testing.assert_array_equal(on_host, gpu)


def test_constant_weights_fold_to_int32(runtime):
    rng = np.random.default_rng(4)
    model = qlinear_matmul_model(U8, U8, 32, 8, False, rng)
    model.graph.initializer.append(onnx.numpy_helper.from_array(qvalues(rng, U8, (32, 8)), "b"))
    del model.graph.input[1]
    graph = CompilerPipeline(core_operator_registry()).run_passes(onyxia.load_model(model), {"m": 4})
    matmul = next(n for n in graph.nodes if n.op_type == "MatMul")
    weight = graph.tensor(matmul.inputs[1])
    assert weight.value is not None and weight.value.dtype == np.int32  # B - zp computed on the host


# ---- ConvInteger / QLinearConv --------------------------------------------------------------------

CONV_CASES = [
    ([1, 3, 7, 7], [4, 3, 3, 3], {}),
    ([2, 4, 6, 5], [8, 2, 3, 3], {"group": 2, "pads": [1, 1, 1, 1], "strides": [2, 1]}),
    ([1, 16, 5, 5], [16, 16, 1, 1], {}),  # pointwise: the matmul kernels
    ([1, 6, 8, 8], [6, 1, 3, 3], {"group": 6, "pads": [1, 1, 1, 1]}),  # depthwise: the direct kernel
    ([2, 2, 9], [3, 2, 4], {"dilations": [2]}),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_CASES)
def test_conv_integer_matches_ort(runtime, x_shape, w_shape, attrs):
    rng = np.random.default_rng(5)
    inits = {"w": qvalues(rng, U8, w_shape), "xzp": scalar(131, U8), "wzp": scalar(7, U8)}
    model = make_model([h.make_node("ConvInteger", ["x", "w", "xzp", "wzp"], ["y"], **attrs)],
                       [("x", U8, x_shape)], ["y"], inits)
    check_exact(runtime, model, {"x": qvalues(rng, U8, x_shape)})


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_CASES)
@pytest.mark.parametrize("tx,tw", PAIRS)
@pytest.mark.parametrize("bias", [False, True])
def test_qlinear_conv_is_exact(runtime, x_shape, w_shape, attrs, tx, tw, bias):
    rng = np.random.default_rng(6)
    m = w_shape[0]
    inits = {"xs": scalar(0.05, np.float32), "xzp": qvalues(rng, tx, ()), "w": qvalues(rng, tw, w_shape),
             "ws": (rng.random(m) * 0.02 + 0.005).astype(np.float32), "wzp": np.zeros(m, tw),
             "ys": scalar(0.4, np.float32), "yzp": qvalues(rng, tx, ())}
    inputs = ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp"]
    if bias:
        inits["B"] = rng.integers(-3000, 3000, m).astype(np.int32)
        inputs.append("B")
    model = make_model([h.make_node("QLinearConv", inputs, ["y"], **attrs)], [("x", tx, x_shape)], ["y"], inits)
    check_exact(runtime, model, {"x": qvalues(rng, tx, x_shape)})


def test_conv_integer_with_symbolic_batch(runtime):
    rng = np.random.default_rng(7)
    model = make_model([h.make_node("ConvInteger", ["x", "w", "xzp"], ["y"], pads=[1, 1, 1, 1])],
                       [("x", U8, ["n", 3, 6, 6])], ["y"], {"w": qvalues(rng, U8, (5, 3, 3, 3)), "xzp": scalar(9, U8)})
    for n in (1, 3):
        check_exact(runtime, model, {"x": qvalues(rng, U8, (n, 3, 6, 6))}, {"n": n})


# ---- DynamicQuantizeLinear and the dynamic products --------------------------------------------------

@pytest.mark.parametrize("values", [np.linspace(-3, 5, 37), np.linspace(0.5, 2, 10), np.linspace(-4, -1, 9),
                                    np.zeros(6), np.array([0.1, 2.5, -1.25, 1e-3])])
def test_dynamic_quantize_linear_matches_ort(runtime, values):
    x = np.asarray(values, np.float32).reshape(1, -1)
    model = make_model([h.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zp"])],
                       [("x", np.float32, list(x.shape))], ["y", "scale", "zp"], opset=11)
    check_exact(runtime, model, {"x": x})


def test_matmul_integer_to_float_and_dynamic_quantize_matmul_match_ort(runtime):
    rng = np.random.default_rng(8)
    k, n = 24, 6
    inits = {"b": qvalues(rng, I8, (k, n)), "as": scalar(0.03, np.float32),
             "bs": (rng.random(n) * 0.05).astype(np.float32), "azp": scalar(120, U8), "bzp": np.zeros(n, I8),
             "bias": rng.standard_normal(n).astype(np.float32)}
    nodes = [h.make_node("MatMulIntegerToFloat", ["a8", "b", "as", "bs", "azp", "bzp", "bias"], ["y1"], domain=MS),
             h.make_node("DynamicQuantizeMatMul", ["af", "b", "bs", "bzp", "bias"], ["y2"], domain=MS)]
    model = make_model(nodes, [("a8", U8, ["m", k]), ("af", np.float32, ["m", k])], ["y1", "y2"], inits,
                       extra_opsets={MS: 1})
    feeds = {"a8": qvalues(rng, U8, (3, k)), "af": rng.standard_normal((3, k)).astype(np.float32)}
    ours, theirs = run_onyxia(runtime, model, feeds, {"m": 3}), run_ort(model, feeds)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("quantized_out", [False, True])
@pytest.mark.parametrize("trans", [(0, 0), (1, 1)])
def test_qgemm_matches_ort(runtime, quantized_out, trans):
    rng = np.random.default_rng(9)
    m, k, n = 5, 16, 7
    a_shape, b_shape = ((k, m) if trans[0] else (m, k)), ((n, k) if trans[1] else (k, n))
    inits = {"as": scalar(0.02, np.float32), "azp": scalar(100, U8), "b": qvalues(rng, I8, b_shape),
             "bs": (rng.random(n) * 0.02 + 0.005).astype(np.float32), "bzp": np.zeros(n, I8),  # per column
             "c": rng.integers(-500, 500, n).astype(np.int32)}
    inputs = ["a", "as", "azp", "b", "bs", "bzp", "c"]
    if quantized_out:
        inits |= {"ys": scalar(0.05, np.float32), "yzp": scalar(128, U8)}
        inputs += ["ys", "yzp"]
    model = make_model([h.make_node("QGemm", inputs, ["y"], domain=MS, alpha=1.5, transA=trans[0], transB=trans[1])],
                       [("a", U8, list(a_shape))], ["y"], inits, extra_opsets={MS: 1})
    feeds = {"a": qvalues(rng, U8, a_shape)}
    if quantized_out:
        check_exact(runtime, model, feeds)
    else:
        np.testing.assert_allclose(run_onyxia(runtime, model, feeds)[0], run_ort(model, feeds)[0], rtol=1e-6)


# ---- com.microsoft dequantize / float op / quantize -------------------------------------------------


@PROPERTY
@given(op=st.sampled_from(["QLinearAdd", "QLinearMul"]), dtype=st.sampled_from([U8, I8]),
       broadcast=st.booleans(), seed=st.integers(0, 2**16))
def test_qlinear_binary_within_one_step_of_ort(runtime, op, dtype, broadcast, seed):
    rng = np.random.default_rng(seed)
    b_shape = [4] if broadcast else [3, 4]
    inits = {"as": scalar(0.05, np.float32), "azp": qvalues(rng, dtype, ()), "bs": scalar(0.08, np.float32),
             "bzp": qvalues(rng, dtype, ()), "cs": scalar(0.1 if op == "QLinearAdd" else 0.3, np.float32),
             "czp": qvalues(rng, dtype, ())}
    model = ms_model(op, ["a", "as", "azp", "b", "bs", "bzp", "cs", "czp"],
                     [("a", dtype, [3, 4]), ("b", dtype, b_shape)], inits)
    check_within_one(runtime, model, {"a": qvalues(rng, dtype, (3, 4)), "b": qvalues(rng, dtype, b_shape)})


@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1}),
                                      ("QLinearSoftmax", {"axis": -1, "opset": 13}),
                                      ("QLinearSoftmax", {"axis": 1, "opset": 12})])
@pytest.mark.parametrize("dtype", [U8, I8])
def test_qlinear_unary_within_one_step_of_ort(runtime, op, attrs, dtype):
    rng = np.random.default_rng(10)
    inits = {"xs": scalar(0.05, np.float32), "xzp": qvalues(rng, dtype, ()), "ys": scalar(1 / 256, np.float32),
             "yzp": np.array(0 if dtype == U8 else -128, dtype)}
    x = np.arange(np.iinfo(dtype).min, np.iinfo(dtype).max + 1).astype(dtype).reshape(16, 16)  # every value
    model = ms_model(op, ["x", "xs", "xzp", "ys", "yzp"], [("x", dtype, [16, 16])], inits, **attrs)
    check_within_one(runtime, model, {"x": x})


@pytest.mark.parametrize("op,attrs", [
    ("QLinearAveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("QLinearAveragePool", {"kernel_shape": [2, 2], "count_include_pad": 1, "pads": [0, 0, 1, 1]}),
    ("QLinearGlobalAveragePool", {}),
])
def test_qlinear_pools_within_one_step_of_ort(runtime, op, attrs):
    rng = np.random.default_rng(11)
    inits = {"xs": scalar(0.05, np.float32), "xzp": scalar(128, U8), "ys": scalar(0.04, np.float32),
             "yzp": scalar(120, U8)}
    model = ms_model(op, ["x", "xs", "xzp", "ys", "yzp"], [("x", U8, [2, 3, 7, 7])], inits, **attrs)
    check_within_one(runtime, model, {"x": qvalues(rng, U8, (2, 3, 7, 7))})


def test_qlinear_concat_within_one_step_of_ort(runtime):
    rng = np.random.default_rng(12)
    inits = {"ys": scalar(0.1, np.float32), "yzp": scalar(128, U8), "s1": scalar(0.05, np.float32),
             "z1": scalar(100, U8), "s2": scalar(0.2, np.float32), "z2": scalar(130, U8)}
    model = ms_model("QLinearConcat", ["ys", "yzp", "x1", "s1", "z1", "x2", "s2", "z2"],
                     [("x1", U8, [2, 3]), ("x2", U8, [2, 5])], inits, axis=1)
    check_within_one(runtime, model, {"x1": qvalues(rng, U8, (2, 3)), "x2": qvalues(rng, U8, (2, 5))})


# ---- QuantizeLinear / DequantizeLinear --------------------------------------------------------------

@PROPERTY
@given(dtype=st.sampled_from([U8, I8, np.uint16, np.int16]), per_axis=st.sampled_from([None, 0, 1, -1]),
       seed=st.integers(0, 2**16))
def test_quantize_dequantize_match_ort(runtime, dtype, per_axis, seed):
    rng = np.random.default_rng(seed)
    shape = (3, 4, 5)
    axis = per_axis if per_axis is not None else 1
    n = shape[axis]
    scale = (rng.random(n if per_axis is not None else ()) * 0.1 + 0.01).astype(np.float32)
    zp = qvalues(rng, dtype, scale.shape) // 4  # keep most values inside the range
    inits = {"s": scale, "z": zp}
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=axis),
             h.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], axis=axis)]
    model = make_model(nodes, [("x", np.float32, list(shape))], ["q", "d"], inits, opset=21)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    x.reshape(-1)[:6] = [0.5, 1.5, -0.5, -2.5, 1e9, -1e9]  # halves round to even; saturation
    check_exact(runtime, model, {"x": x * scale.max()})


def test_contrib_quantize_dequantize_match_ort(runtime):
    rng = np.random.default_rng(14)
    inits = {"s": (rng.random(4) * 0.1 + 0.01).astype(np.float32), "z": qvalues(rng, U8, (4,))}
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], domain=MS, axis=1),
             h.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], domain=MS, axis=1)]
    model = make_model(nodes, [("x", np.float32, [3, 4])], ["q", "d"], inits, extra_opsets={MS: 1})
    check_exact(runtime, model, {"x": (rng.standard_normal((3, 4)) * 5).astype(np.float32)})


def test_blocked_dequantize_matches_ort(runtime):
    rng = np.random.default_rng(13)
    w = qvalues(rng, I8, (6, 8))
    scale = (rng.random((6, 2)) * 0.1).astype(np.float32)
    zp = qvalues(rng, I8, (6, 2)) // 8
    model = make_model([h.make_node("DequantizeLinear", ["w", "s", "z"], ["y"], axis=1, block_size=4)],
                       [("w", I8, [6, 8])], ["y"], {"s": scale, "z": zp}, opset=21)
    check_exact(runtime, model, {"w": w})


# ---- errors --------------------------------------------------------------------------------------

def test_channels_last_is_refused_naming_node_and_attribute():
    inits = {"xs": scalar(0.05, np.float32), "xzp": scalar(128, U8), "ys": scalar(0.04, np.float32),
             "yzp": scalar(120, U8)}
    model = make_model([h.make_node("QLinearGlobalAveragePool", ["x", "xs", "xzp", "ys", "yzp"], ["y"], domain=MS,
                                    name="gap", channels_last=1)], [("x", U8, [1, 4, 4, 3])], ["y"], inits,
                       extra_opsets={MS: 1})
    with pytest.raises(OnyxiaError, match="gap.*channels_last"):
        compile_model(model)


def test_float_operand_is_refused_naming_node_and_input():
    model = make_model([h.make_node("MatMulInteger", ["a", "b"], ["y"], name="mmi")],
                       [("a", np.float32, [2, 3]), ("b", U8, [3, 2])], ["y"])
    with pytest.raises(OnyxiaError, match="mmi"):
        compile_model(model)


