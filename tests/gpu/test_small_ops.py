"""ReverseSequence, TensorScatter, LRN, Col2Im, Det, Multinomial, MelWeightMatrix and
LayerNormalization's stash_type on the GPU, against onnxruntime (onnx.reference where onnxruntime
lacks the op), and against folding."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

from onyxia.errors import OnyxiaError
from tests.builders.small_ops import multinomial_model
from tests.helpers import assert_matches_ort, compile_model, make_model, run_onyxia, run_ort

PROPERTY = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)


def fold_equals_gpu(runtime, node: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int, rtol=0.0):
    """The node with `feeds` as graph inputs (kernels) and as initializers (folded): same values."""
    fed = make_model([node], [(k, v.dtype, v.shape) for k, v in feeds.items()], list(node.output), opset=opset)
    const = make_model([node], [], list(node.output), feeds, opset=opset)
    assert compile_model(const).num_dispatches == 0
    for a, b in zip(run_onyxia(runtime, fed, feeds), run_onyxia(runtime, const, {})):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)


# ---- ReverseSequence ----------------------------------------------------------------------------

@PROPERTY
@given(batch_axis=st.sampled_from([0, 1]), batch=st.integers(1, 4), time=st.integers(1, 6),
       inner=st.sampled_from([(), (3,), (2, 2)]), dtype=st.sampled_from([np.float32, np.int64]),
       seed=st.integers(0, 2**16))
def test_reverse_sequence_matches_ort(runtime, batch_axis, batch, time, inner, dtype, seed):
    rng = np.random.default_rng(seed)
    shape = ((batch, time) if batch_axis == 0 else (time, batch)) + inner
    x = rng.integers(-50, 50, shape).astype(dtype)
    lens = rng.integers(1, time + 1, batch).astype(np.int64)
    node = h.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=batch_axis, time_axis=1 - batch_axis)
    model = make_model([node], [("x", dtype, list(shape)), ("lens", np.int64, [batch])], ["y"])
    assert_matches_ort(runtime, model, {"x": x, "lens": lens}, rtol=0, atol=0)
    fold_equals_gpu(runtime, node, {"x": x, "lens": lens}, 18)


def test_reverse_sequence_axes_error_names_node_and_attributes():
    node = h.make_node("ReverseSequence", ["x", "lens"], ["y"], name="rev", batch_axis=1, time_axis=2)
    model = make_model([node], [("x", np.float32, [2, 3, 4]), ("lens", np.int64, [3])], ["y"])
    with pytest.raises(OnyxiaError, match="rev.*batch_axis"):
        compile_model(model)


# ---- TensorScatter ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis,update_len", [(-2, 2), (2, 3), (1, 1)])
@pytest.mark.parametrize("indices", [False, True])
def test_tensor_scatter_matches_reference(runtime, mode, axis, update_len, indices):
    rng = np.random.default_rng(1)
    cache_shape = [2, 3, 6, 4]
    update_shape = list(cache_shape)
    update_shape[axis] = update_len
    feeds = {"cache": rng.standard_normal(cache_shape).astype(np.float32),
             "update": rng.standard_normal(update_shape).astype(np.float32)}
    ins = ["cache", "update"]
    if indices:  # circular wraps past the end; linear stays inside
        limit = cache_shape[axis] + (3 if mode == "circular" else 1 - update_len)
        feeds["idx"] = rng.integers(0, limit, 2).astype(np.int64)
        ins.append("idx")
    node = h.make_node("TensorScatter", ins, ["y"], axis=axis, mode=mode)
    model = make_model([node], [(k, v.dtype, v.shape) for k, v in feeds.items()], ["y"], opset=24)
    (expected,) = reference(model, feeds)
    np.testing.assert_array_equal(run_onyxia(runtime, model, feeds)[0], expected)
    fold_equals_gpu(runtime, node, feeds, 24)


def test_tensor_scatter_on_the_batch_axis_is_refused():
    node = h.make_node("TensorScatter", ["c", "u"], ["y"], name="kv", axis=0)
    model = make_model([node], [("c", np.float32, [4, 2]), ("u", np.float32, [1, 2])], ["y"], opset=24)
    with pytest.raises(OnyxiaError, match="kv.*'axis'"):
        compile_model(model)


# ---- LRN / Col2Im / Det -------------------------------------------------------------------------

@pytest.mark.parametrize("size,shape", [(3, [2, 5, 4, 4]), (2, [1, 6, 3, 5]), (5, [2, 4, 7]), (1, [1, 3, 2, 2, 2])])
def test_lrn_matches_ort(runtime, size, shape):
    node = h.make_node("LRN", ["x"], ["y"], size=size, alpha=0.002, beta=0.6, bias=1.5)
    model = make_model([node], [("x", np.float32, ["n", *shape[1:]])], ["y"])
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32) * 3
    if size % 2 and len(shape) == 4:
        assert_matches_ort(runtime, model, {"x": x}, {"n": shape[0]}, rtol=1e-5, atol=1e-6)
    else:
        # onnxruntime's LRN takes odd sizes and 4-D inputs only, and onnx.reference's sums the
        # channels only up to the batch size: the spec's formula, term by term, is the oracle here
        c, lo, hi = shape[1], (size - 1) // 2, size // 2
        squares = x.astype(np.float64) ** 2
        window = np.stack([squares[:, max(0, k - lo):min(c, k + hi + 1)].sum(axis=1) for k in range(c)], axis=1)
        expected = x / (1.5 + 0.002 / size * window) ** 0.6
        np.testing.assert_allclose(run_onyxia(runtime, model, {"x": x}, {"n": shape[0]})[0], expected, rtol=1e-5,
                                   atol=1e-6)
    fold_equals_gpu(runtime, node, {"x": x}, 18, rtol=1e-6)


@pytest.mark.parametrize("image,block,attrs", [
    ([5, 5], [2, 2], {}),
    ([6, 7], [3, 2], {"strides": [2, 1], "pads": [1, 0, 1, 1]}),
    ([7, 6], [2, 3], {"dilations": [2, 1]}),
    ([4, 4, 3], [2, 2, 2], {}),
])
def test_col2im_matches_ort(runtime, image, block, attrs):
    n = len(image)
    strides, dil, pads = attrs.get("strides", [1] * n), attrs.get("dilations", [1] * n), attrs.get("pads", [0] * 2 * n)
    counts = [(i + pads[a] + pads[a + n] - (d * (k - 1) + 1)) // s + 1
              for a, (i, k, s, d) in enumerate(zip(image, block, strides, dil))]
    x = np.random.default_rng(3).standard_normal((2, 3 * int(np.prod(block)), int(np.prod(counts)))).astype(np.float32)
    inits = {"image": np.array(image, np.int64), "block": np.array(block, np.int64)}
    model = make_model([h.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)],
                       [("x", np.float32, list(x.shape))], ["y"], inits)
    assert_matches_ort(runtime, model, {"x": x}, rtol=1e-5, atol=1e-5)


@PROPERTY
@given(n=st.integers(1, 12), batch=st.sampled_from([(), (3,), (2, 2)]), seed=st.integers(0, 2**16))
def test_det_matches_ort(runtime, n, batch, seed):
    x = np.random.default_rng(seed).standard_normal((*batch, n, n)).astype(np.float32)
    node = h.make_node("Det", ["x"], ["y"])
    assert_matches_ort(runtime, make_model([node], [("x", np.float32, list(x.shape))], ["y"]), {"x": x},
                       rtol=1e-4, atol=1e-5)


def test_det_of_singular_and_folded_matrices(runtime):
    x = np.array([[[1, 2], [2, 4]], [[0, 1], [1, 0]], [[2, 0], [0, 3]]], np.float32)  # 0, -1 (a swap), 6
    node = h.make_node("Det", ["x"], ["y"])
    (y,) = run_onyxia(runtime, make_model([node], [("x", np.float32, [3, 2, 2])], ["y"]), {"x": x})
    np.testing.assert_allclose(y, [0.0, -1.0, 6.0], atol=1e-6)
    fold_equals_gpu(runtime, node, {"x": x}, 18, rtol=1e-6)


def test_det_of_a_large_matrix_is_refused():
    model = make_model([h.make_node("Det", ["x"], ["y"], name="big")], [("x", np.float32, [40, 40])], ["y"])
    with pytest.raises(OnyxiaError, match="big.*at most 32"):
        compile_model(model)


# ---- Multinomial --------------------------------------------------------------------------------


def test_multinomial_follows_the_distribution(runtime):
    probs = np.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.0, 0.0, 0.3]])
    logits = np.log(np.maximum(probs, 1e-30)).astype(np.float32)
    (y,) = run_onyxia(runtime, multinomial_model(4, 20000), {"x": logits}, {"b": 2})
    assert y.dtype == np.int32 and y.shape == (2, 20000)
    for row, p in zip(y, probs):
        freq = np.bincount(row, minlength=4) / row.size
        np.testing.assert_allclose(freq, p, atol=5 * np.sqrt(0.25 / row.size))


def test_multinomial_certain_outcomes_match_ort(runtime):
    logits = np.array([[-1e30, 0.0, -1e30], [5.0, -1e30, -1e30]], np.float32)  # one class carries everything
    model = multinomial_model(3, 16, TensorProto.INT64)
    assert_matches_ort(runtime, model, {"x": logits}, {"b": 2}, rtol=0, atol=0)


# ---- MelWeightMatrix ------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [(8, 64, 8000, 0.0, 4000.0), (12, 100, 16000, 100.0, 7000.0), (4, 16, 22050, 20, 500)])
def test_mel_weight_matrix_matches_ort_and_folds(runtime, args):
    mel, dft, rate, lo, hi = args
    inits = {"m": np.array(mel, np.int64), "d": np.array(dft, np.int64), "r": np.array(rate, np.int64),
             "lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
    model = make_model([h.make_node("MelWeightMatrix", ["m", "d", "r", "lo", "hi"], ["y"])], [], ["y"], inits,
                       opset=17)
    assert compile_model(model).num_dispatches == 0
    (expected,) = run_ort(model, {})
    (ours,) = run_onyxia(runtime, model, {})
    assert ours.dtype == expected.dtype
    np.testing.assert_allclose(ours, expected, rtol=1e-6, atol=1e-7)


# ---- LayerNormalization stash_type ------------------------------------------------------------------

def test_layer_norm_stash_type_is_honoured(runtime):
    inits = {"s": np.ones(8, np.float32)}
    # bfloat16 statistics: the ONNX function body casts to bfloat16 (stored as bfloat16)
    bf16 = make_model([h.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln", stash_type=16)],
                      [("x", np.float32, [2, 8])], ["y"], inits, opset=17)
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    (ref,) = run_ort(bf16, {"x": x})  # (onnx.reference has no stash_type 16)
    np.testing.assert_allclose(runtime.load_model(compile_model(bf16)).run({"x": x})["y"], ref, rtol=2e-2, atol=2e-2)
    # float16 is no valid stash type (Mean/InvStdDev are float or bfloat16): onnx's check says so
    fp16 = make_model([h.make_node("LayerNormalization", ["x", "s"], ["y", "m"], name="ln", stash_type=10)],
                      [("x", np.float32, [2, 8])], ["y", "m"], inits, opset=17)
    with pytest.raises(OnyxiaError, match="ln.*unsupported type"):
        compile_model(fp16)


def test_layer_norm_stash_type_1_uses_the_kernel(runtime):
    node = h.make_node("LayerNormalization", ["x", "s"], ["y"], stash_type=1)
    model = make_model([node], [("x", np.float32, ["n", 8])], ["y"], {"s": np.ones(8, np.float32)}, opset=17)
    assert {s.label for s in compile_model(model, {"n": 2}).shaders} == {"rownorm_layernorm"}  # each adapter kind's


