"""Softmax/LogSoftmax and the LayerNorm family on the GPU against onnxruntime (and folding)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper as h

from onyxia.operators.base import MAX_TRIPS
from tests.helpers import assert_matches_ort, compile_model, make_model, run_onyxia, run_ort

RNG = np.random.default_rng(0)
MS = {"com.microsoft": 1}


def randn(*shape, scale=1.0, offset=0.0):
    return (RNG.standard_normal(shape) * scale + offset).astype(np.float32)


def softmax_model(op: str, shape, opset: int, **attrs):
    return make_model([h.make_node(op, ["x"], ["y"], **attrs)], [("x", np.float32, shape)], ["y"], opset=opset)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, -2])
def test_softmax_matches_ort(runtime, op, opset, axis):
    # Before opset 13 the input is coerced to 2-D at `axis`; from 13 on only `axis` is normalized.
    attrs = {} if axis is None else {"axis": axis}
    x = randn(2, 3, 5, scale=3.0)
    assert_matches_ort(runtime, softmax_model(op, (2, 3, 5), opset, **attrs), {"x": x}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_is_stable_for_large_logits(runtime, op):
    x = randn(4, 300, scale=50.0, offset=1000.0)
    x[1, :] = -1e30  # a row of huge negatives still normalizes
    assert_matches_ort(runtime, softmax_model(op, x.shape, 13), {"x": x}, rtol=1e-5, atol=1e-5)


def test_softmax_symbolic_dims_and_strided_axis(runtime):
    # axis 1 of [batch, heads, seq]: rows are strided by the symbolic seq.
    model = softmax_model("Softmax", ["batch", 4, "seq"], 13, axis=1)
    exe = runtime.load_model(compile_model(model, {"batch": 2, "seq": 3}))
    for dims in ({"batch": 2, "seq": 3}, {"batch": 3, "seq": 700}):
        exe.update_dimensions(dims)
        x = randn(dims["batch"], 4, dims["seq"], scale=2.0)
        np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert exe.stats.recompiles == 0


def layernorm_model(axis: int, norm_shape, *, bias: bool = True, outputs=("y", "mean", "inv"), opset: int = 17,
                    **attrs):
    inputs = ["x", "scale", "bias"] if bias else ["x", "scale"]
    node = h.make_node("LayerNormalization", inputs, list(outputs), axis=axis, **attrs)
    # scale [5, 16] against x's dims [seq, 16]: seq must be 5 (checked at compile time, then a plan constraint)
    vis = [("x", np.float32, ["batch", "seq", norm_shape[-1]]), ("scale", np.float32, norm_shape)]
    vis += [("bias", np.float32, norm_shape)] if bias else []
    return make_model([node], vis, [o for o in outputs if o], opset=opset)


@pytest.mark.parametrize("axis,norm_shape", [(-1, [16]), (2, [16]), (-2, [5, 16]), (1, [5, 16])])
@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_matches_ort(runtime, axis, norm_shape, bias):
    model = layernorm_model(axis, norm_shape, bias=bias, epsilon=1e-3)
    feeds = {"x": randn(3, 5, 16, scale=2.0, offset=100.0), "scale": randn(*norm_shape)}  # |mean| >> std
    if bias:
        feeds["bias"] = randn(*norm_shape)
    assert_matches_ort(runtime, model, feeds, {"batch": 3, "seq": 5}, rtol=1e-4, atol=1e-4)


def test_layernorm_symbolic_batch_and_seq(runtime):
    model = layernorm_model(-1, [64], outputs=("y", "", "inv"))
    exe = runtime.load_model(compile_model(model, {"batch": 1, "seq": 4}))
    for dims in ({"batch": 1, "seq": 4}, {"batch": 3, "seq": 1}, {"batch": 2, "seq": 33}):
        exe.update_dimensions(dims)
        feeds = {"x": randn(dims["batch"], dims["seq"], 64), "scale": randn(64), "bias": randn(64)}
        out, ref = exe.run(feeds), run_ort(model, feeds)
        np.testing.assert_allclose(out["y"], ref[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(out["inv"], ref[1], rtol=1e-4, atol=1e-5)
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("opset", [13, 17])
def test_simplified_layernorm_matches_ort(runtime, opset):
    # onnxruntime accepts SimplifiedLayerNormalization (RMSNorm) in the default domain only.
    model = make_model([h.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y", "inv"], epsilon=1e-5)],
                       [("x", np.float32, ["batch", "seq", 32]), ("scale", np.float32, [32])], ["y", "inv"],
                       opset=opset)
    feeds = {"x": randn(2, 7, 32, scale=3.0), "scale": randn(32)}
    assert_matches_ort(runtime, model, feeds, {"batch": 2, "seq": 7}, rtol=1e-5, atol=1e-5)
    # The com.microsoft spelling some exporters emit computes the same.
    ms = make_model([h.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y", "inv"], epsilon=1e-5,
                                 domain="com.microsoft")],
                    [("x", np.float32, ["batch", "seq", 32]), ("scale", np.float32, [32])], ["y", "inv"],
                    opset=opset, extra_opsets=MS)
    for a, b in zip(run_onyxia(runtime, ms, feeds, {"batch": 2, "seq": 7}), run_ort(model, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def skip_model(op: str, inputs, skip_shape, outputs, **attrs):
    shapes = {"x": ["batch", "seq", 24], "skip": skip_shape, "gamma": [24], "beta": [24], "bias": [24]}
    node = h.make_node(op, inputs, list(outputs), domain="com.microsoft", **attrs)
    vis = [(n, np.float32, shapes[n]) for n in inputs if n]
    return make_model([node], vis, [o for o in outputs if o], opset=17, extra_opsets=MS)


SKIP_CASES = [
    ("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"], ["y", "mean", "inv", "sum"]),
    ("SkipLayerNormalization", ["x", "skip", "gamma"], ["y"]),
    ("SkipLayerNormalization", ["x", "skip", "gamma", "", "bias"], ["y", "", "", "sum"]),
    ("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma", "bias"], ["y", "mean", "inv", "sum"]),
    ("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], ["y", "", "inv"]),
]


@pytest.mark.parametrize("op,inputs,outputs", SKIP_CASES)
@pytest.mark.parametrize("skip_shape", [["batch", "seq", 24], [1, "seq", 24], ["seq", 24]])
def test_skip_layernorm_matches_ort(runtime, op, inputs, outputs, skip_shape):
    model = skip_model(op, inputs, skip_shape, outputs, epsilon=1e-5)
    dims = {"batch": 2, "seq": 3}
    sizes = {"batch": 2, "seq": 3}
    feeds = {"x": randn(2, 3, 24, scale=2.0, offset=1.0), "skip": randn(*[sizes.get(d, d) for d in skip_shape]),
             "gamma": randn(24), "beta": randn(24), "bias": randn(24)}
    feeds = {k: v for k, v in feeds.items() if k in inputs}
    assert_matches_ort(runtime, model, feeds, dims, rtol=1e-4, atol=1e-5)


def test_skip_layernorm_default_epsilon(runtime):
    # The Skip* ops default epsilon to 1e-12: constant rows give inv_std_var 1e6.
    for op in ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization"):
        model = skip_model(op, ["x", "skip", "gamma"], ["batch", "seq", 24], ["y", "mean", "inv"])
        feeds = {"x": np.full((1, 2, 24), 1e-3, np.float32), "skip": np.zeros((1, 2, 24), np.float32),
                 "gamma": randn(24)}
        assert_matches_ort(runtime, model, feeds, {"batch": 1, "seq": 2}, rtol=1e-4, atol=1e-5)


# ---- folding agrees with the GPU ----------------------------------------------------------

def test_folding_matches_gpu(runtime):
    x, scale, beta = randn(2, 3, 8, scale=2.0), randn(8), randn(8)
    nodes = [h.make_node("Softmax", ["x"], ["sm"], axis=1), h.make_node("LogSoftmax", ["x"], ["lsm"]),
             h.make_node("LayerNormalization", ["x", "scale", "beta"], ["ln", "ln_mean", "ln_inv"]),
             h.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["rms", "rms_inv"]),
             h.make_node("SkipLayerNormalization", ["x", "x", "scale", "beta", "beta"], ["sk", "sk_m", "sk_i", "sk_s"],
                         domain="com.microsoft"),
             h.make_node("SkipSimplifiedLayerNormalization", ["x", "x", "scale"], ["ss", "ss_m", "ss_i", "ss_s"],
                         domain="com.microsoft")]
    outs = [o for n in nodes for o in n.output]
    weights = {"scale": scale, "beta": beta}
    gpu = run_onyxia(runtime, make_model(nodes, [("x", np.float32, x.shape)], outs, weights, opset=17,
                                         extra_opsets=MS), {"x": x})
    folded_model = make_model(nodes, [], outs, {**weights, "x": x}, opset=17, extra_opsets=MS)
    assert not any(op.steps for op in compile_model(folded_model).operations if op.op_type != "WriteBuffer")
    expected = run_ort(make_model(nodes, [("x", np.float32, x.shape)], outs, weights, opset=17, extra_opsets=MS),
                       {"x": x})
    for name, a, b, ref in zip(outs, gpu, run_onyxia(runtime, folded_model, {}), expected, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        np.testing.assert_allclose(b, ref, rtol=1e-5, atol=1e-5, err_msg=f"{name} folded vs onnxruntime")
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=name)


# ---- property tests -----------------------------------------------------------------------

@st.composite
def row_cases(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank)))
    return shape, draw(st.integers(-rank, rank - 1)), draw(st.integers(0, 2 ** 31))


@settings(max_examples=25, deadline=None)
@given(row_cases(), st.sampled_from(["Softmax", "LogSoftmax"]), st.sampled_from([11, 13]))
def test_random_softmax_matches_ort(runtime, case, op, opset):
    shape, axis, seed = case
    x = (np.random.default_rng(seed).standard_normal(shape) * 4).astype(np.float32)
    assert_matches_ort(runtime, softmax_model(op, shape, opset, axis=axis), {"x": x}, rtol=1e-5, atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(row_cases())
def test_random_layernorm_matches_ort(runtime, case):
    shape, axis, seed = case
    rng = np.random.default_rng(seed)
    norm = shape[axis % len(shape):]
    model = make_model([h.make_node("LayerNormalization", ["x", "s", "b"], ["y", "m", "i"], axis=axis)],
                       [("x", np.float32, shape), ("s", np.float32, norm), ("b", np.float32, norm)], ["y", "m", "i"],
                       opset=17)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32), "s": rng.standard_normal(norm).astype(np.float32),
             "b": rng.standard_normal(norm).astype(np.float32)}
    assert_matches_ort(runtime, model, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cpu", [0, 1], ids=["gpu-kernel", "cpu-kernel"])
# 40: a thread a row on a CPU-type adapter; 70,000: three parts of the 8-thread rows (8 x 4,096 each)
@pytest.mark.parametrize("k", [6, 40, 512, 70_000])
def test_row_kernels_of_both_adapter_kinds(runtime, cpu, k):
    """Rows of 64+ elements run 8 threads per row on a CPU-type adapter, shorter ones a thread
    each, 256-thread workgroups elsewhere (assume_adapter): each variant against onnxruntime,
    whatever this adapter is."""

    nodes = [h.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], ["y", "mean", "inv", "sum"],
                         domain="com.microsoft", epsilon=1e-5),
             h.make_node("Softmax", ["x"], ["p"], axis=-1),
             h.make_node("LayerNormalization", ["x", "gamma", "beta"], ["n"], axis=-1, epsilon=1e-5)]
    model = make_model(nodes, [("x", np.float32, ["rows", k]), ("skip", np.float32, ["rows", k]),
                               ("gamma", np.float32, [k]), ("beta", np.float32, [k])],
                       ["y", "inv", "sum", "p", "n"], opset=17, extra_opsets=MS)
    exe = runtime.load_model(compile_model(model, {"rows": 3}))
    exe.assume_adapter("cpu" if cpu else "gpu")
    for rows in (3, 1):
        exe.update_dimensions({"rows": rows})
        feeds = {"x": randn(rows, k, scale=2.0, offset=1.0), "skip": randn(rows, k), "gamma": randn(k),
                 "beta": randn(k)}
        ours = exe.run(feeds)
        for name, ref in zip(["y", "inv", "sum", "p", "n"], run_ort(model, feeds)):
            np.testing.assert_allclose(ours[name], ref, rtol=2e-4, atol=1e-5, err_msg=f"{name}, {rows} rows")


# ---- RMS norms in onnxruntime's order ----------------------------------------------------------
@pytest.mark.parametrize("k", [96, 100, 2000, 8 * MAX_TRIPS])  # the longest row in this order: 4096 trips a lane
def test_rms_norm_rounds_as_onnxruntime(runtime, k):
    """SimplifiedLayerNormalization sums its squares in onnxruntime's order (eight running fused
    multiply-adds, halved, then the rest one at a time): on a CPU-type adapter, whose division
    and square root are IEEE's, every output bit equals onnxruntime's for rows of whole groups
    of eight (every hidden size in use); its scalar tail (K = 100) a row in a few hundred may
    round differently, as a GPU's division may in the last bit."""
    scale = np.linspace(0.5, 1.5, k).astype(np.float32)
    model = make_model([h.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], epsilon=1e-6, axis=-1)],
                       [("x", np.float32, [40, k])], ["y"], {"scale": scale})
    x = (np.random.default_rng(k).standard_normal((40, k)) * 3).astype(np.float32)
    ours, ref = run_onyxia(runtime, model, {"x": x})[0], run_ort(model, {"x": x})[0]
    if runtime.info.adapter_type == "CPU" and k % 8 == 0:
        np.testing.assert_array_equal(ours, ref)
    else:
        np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6)


def test_a_torch_exported_rms_norm_runs_fused_as_onnxruntime_runs_it(runtime):
    """Pow, ReduceMean, Add, Sqrt, Div(1, .), Mul, Cast, Mul(w) (torch.onnx's RMSNorm) is one
    SimplifiedLayerNormalization dispatch, with onnxruntime's (default, optimized) results."""
    from tests.builders.rms_norm_fusion import K, torch_rms_norm

    model = torch_rms_norm()
    compiled = compile_model(model)
    assert [op.op_type for op in compiled.operations] == ["SimplifiedLayerNormalization"]
    x = (np.random.default_rng(1).standard_normal((3, K)) * 2).astype(np.float32)
    ours, ref = run_onyxia(runtime, model, {"x": x})[0], run_ort(model, {"x": x})[0]
    if runtime.info.adapter_type == "CPU":
        np.testing.assert_array_equal(ours, ref)
    else:
        np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6)


def test_rms_norm_rows_with_an_infinite_square_match_onnxruntime(runtime):
    """A row holding inf, a value whose square overflows, or NaN: onnxruntime's sum is inf (its
    outputs 0, NaN where x is inf) or NaN; the exact fused multiply-add must not turn inf into NaN."""
    k = 32
    model = make_model([h.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], epsilon=1e-6, axis=-1)],
                       [("x", np.float32, [4, k])], ["y"], {"scale": np.ones(k, np.float32)})
    x = np.random.default_rng(5).standard_normal((4, k)).astype(np.float32)
    x[0, 3], x[1, 5], x[2, 7] = np.inf, 3e30, np.nan
    np.testing.assert_array_equal(run_onyxia(runtime, model, {"x": x})[0], run_ort(model, {"x": x})[0])


@pytest.mark.parametrize("k, quads", [(1500, True), (1502, False)])
def test_rows_of_whole_quads_read_and_write_vec4s(runtime, k, quads):
    """Rows a multiple of 4 long (Whisper's 1500 keys) run rownorm.wgsl's QUADS form (x and y as
    vec4s); the others element by element: the same results against onnxruntime."""
    nodes = [h.make_node("Softmax", ["x"], ["p"], axis=-1), h.make_node("LogSoftmax", ["x"], ["q"], axis=-1),
             h.make_node("LayerNormalization", ["x", "gamma", "beta"], ["n"], axis=-1, epsilon=1e-5)]
    model = make_model(nodes, [("x", np.float32, ["rows", k]), ("gamma", np.float32, [k]), ("beta", np.float32, [k])],
                       ["p", "q", "n"], opset=17)
    compiled = compile_model(model, {"rows": 5})
    assert {bool(dict(s.defs).get("QUADS")) for s in compiled.shaders if "rownorm" in s.label} == {quads}
    exe = runtime.load_model(compiled)
    for rows in (5, 2):
        exe.update_dimensions({"rows": rows})
        feeds = {"x": randn(rows, k, scale=4.0, offset=1.0), "gamma": randn(k), "beta": randn(k)}
        feeds["x"][0, : k // 2] = -np.inf  # a half-masked row
        ours = exe.run(feeds)
        for name, ref in zip(["p", "q", "n"], run_ort(model, feeds)):
            if name == "n":
                ref, got = ref[1:], ours[name][1:]  # LayerNorm of a row with -inf is NaN in both
            else:
                got = ours[name]
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5, err_msg=f"{name}, {rows} rows")
