"""ONNX-domain Attention (opsets 23-25) against onnxruntime, and onnx.reference where noted.

Covers 3-D and 4-D layouts, MHA/GQA/MQA heads, a V head size different from Q/K, scale and
softcap, bool and float masks (broadcast, shorter than the keys), is_causal with and without a
past cache, present outputs, every qk_matmul_output_mode, nonpad_kv_seqlen (opset 24), the
opset-25 windows, float16, and a decode loop whose lengths change without a recompile.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

from tests.builders.onnx_attention import OUTPUTS, attention_model, bhsd
from tests.helpers import assert_matches_ort, compile_model, run_onyxia, run_ort

RNG = np.random.default_rng(0)


def random_feeds(model, nonpad=None) -> dict[str, np.ndarray]:
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        dtype = h.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        if vi.name == "nonpad_kv_seqlen":
            feeds[vi.name] = np.asarray(nonpad, np.int64)
        elif dtype == np.bool_:
            feeds[vi.name] = RNG.random(shape) < 0.7
        elif vi.name == "attn_mask":
            feeds[vi.name] = RNG.standard_normal(shape).astype(dtype)
        else:
            feeds[vi.name] = RNG.standard_normal(shape).astype(dtype)
    return feeds


# name -> (input shapes, outputs, attributes)
CASES = {
    "4d": ({"Q": bhsd(2, 2, 3, 8), "K": bhsd(2, 2, 5, 8), "V": bhsd(2, 2, 5, 8)}, ("Y",), {}),
    "3d": ({"Q": (2, 3, 16), "K": (2, 5, 16), "V": (2, 5, 16)}, ("Y",), dict(q_num_heads=2, kv_num_heads=2)),
    "3d-gqa-diff-v-head": ({"Q": (1, 4, 32), "K": (1, 6, 16), "V": (1, 6, 20)}, ("Y",),
                           dict(q_num_heads=4, kv_num_heads=2)),
    "4d-mqa-scale-softcap": ({"Q": bhsd(1, 4, 3, 8), "K": bhsd(1, 1, 7, 8), "V": bhsd(1, 1, 7, 6)}, ("Y",),
                             dict(scale=0.3, softcap=2.0)),
    "causal-cross": ({"Q": bhsd(1, 2, 4, 8), "K": bhsd(1, 2, 6, 8), "V": bhsd(1, 2, 6, 8)}, ("Y",),
                     dict(is_causal=1)),
    "bool-mask-2d": ({"Q": bhsd(2, 2, 3, 8), "K": bhsd(2, 2, 5, 8), "V": bhsd(2, 2, 5, 8),
                      "attn_mask": (3, 5)}, ("Y",), dict(mask_dtype=np.bool_)),
    "float-mask-4d-broadcast-causal": ({"Q": bhsd(2, 2, 3, 8), "K": bhsd(2, 2, 3, 8), "V": bhsd(2, 2, 3, 8),
                                        "attn_mask": (2, 1, 3, 3)}, ("Y",), dict(is_causal=1)),
    "past-present-causal-mask": ({"Q": bhsd(1, 4, 2, 8), "K": bhsd(1, 2, 2, 8), "V": bhsd(1, 2, 2, 8),
                                  "attn_mask": (2, 6), "past_key": bhsd(1, 2, 4, 8),
                                  "past_value": bhsd(1, 2, 4, 8)}, OUTPUTS[:3], dict(is_causal=1)),
    "3d-past-present": ({"Q": (2, 1, 16), "K": (2, 1, 16), "V": (2, 1, 8), "past_key": bhsd(2, 2, 3, 8),
                         "past_value": bhsd(2, 2, 3, 4)}, OUTPUTS[:3], dict(q_num_heads=2, kv_num_heads=2)),
    "present-without-past-3d": ({"Q": (1, 3, 16), "K": (1, 3, 16), "V": (1, 3, 16)}, OUTPUTS[:3],
                                dict(q_num_heads=2, kv_num_heads=2)),
    # more keys than a workgroup (64) and a head wider than one (two columns per thread)
    "long-wide-head": ({"Q": bhsd(1, 2, 3, 80), "K": bhsd(1, 2, 150, 80), "V": bhsd(1, 2, 150, 72),
                        "attn_mask": (1, 1, 3, 150)}, ("Y",), {}),
}
QK_MODE_CASE = ({"Q": bhsd(1, 2, 3, 8), "K": bhsd(1, 2, 4, 8), "V": bhsd(1, 2, 4, 8), "attn_mask": (3, 6),
                 "past_key": bhsd(1, 2, 2, 8), "past_value": bhsd(1, 2, 2, 8)}, OUTPUTS)


@pytest.mark.parametrize("name", list(CASES))
def test_attention_matches_ort(runtime, name):
    shapes, outputs, attrs = CASES[name]
    model = attention_model(shapes, outputs, **attrs)
    assert_matches_ort(runtime, model, random_feeds(model), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_qk_matmul_output_modes(runtime, mode):
    shapes, outputs = QK_MODE_CASE
    model = attention_model(shapes, outputs, qk_matmul_output_mode=mode, softcap=3.0, is_causal=1)
    if mode == 2:  # masked scores are -inf per the spec; onnxruntime writes float's lowest instead
        assert_matches_reference(runtime, model, random_feeds(model))
    else:
        assert_matches_ort(runtime, model, random_feeds(model), rtol=1e-4, atol=1e-5)


def test_float16(runtime):
    model = attention_model({"Q": bhsd(1, 4, 3, 8), "K": bhsd(1, 2, 5, 8), "V": bhsd(1, 2, 5, 8)}, ("Y",),
                            dtype=np.float16, is_causal=1)
    f = random_feeds(model)
    ours = run_onyxia(runtime, model, f)[0]
    ref = run_ort(attention_model({"Q": bhsd(1, 4, 3, 8), "K": bhsd(1, 2, 5, 8), "V": bhsd(1, 2, 5, 8)}, ("Y",),
                                  is_causal=1), {k: v.astype(np.float32) for k, v in f.items()})[0]
    assert ours.dtype == np.float16
    np.testing.assert_allclose(ours.astype(np.float32), ref, rtol=2e-3, atol=2e-3)


def assert_matches_reference(runtime, model, feeds, rtol=1e-4, atol=1e-5):
    """onnx.reference is the oracle where onnxruntime rejects the case (opset-25 windows, masks
    shorter than the keys) or leaves it undefined (rows with no visible key)."""
    for name, ours, ref in zip(OUTPUTS, run_onyxia(runtime, model, feeds), ReferenceEvaluator(model).run(None, feeds)):
        assert ours.dtype == ref.dtype and ours.shape == ref.shape, name
        np.testing.assert_allclose(ours, ref, rtol=rtol, atol=atol, err_msg=name)


def test_mask_shorter_than_the_keys(runtime):
    # Keys past the mask's last dim are masked (the spec pads a bool mask with false, a float one with -inf).
    for mask_dtype in (np.bool_, np.float32):
        model = attention_model({"Q": bhsd(1, 2, 2, 8), "K": bhsd(1, 2, 2, 8), "V": bhsd(1, 2, 2, 8),
                                 "attn_mask": (1, 2, 1, 5), "past_key": bhsd(1, 2, 4, 8),
                                 "past_value": bhsd(1, 2, 4, 8)}, OUTPUTS[:3], mask_dtype=mask_dtype)
        assert_matches_reference(runtime, model, random_feeds(model))


def test_nonpad_kv_seqlen_and_fully_masked_rows(runtime):
    """Opset 24 external cache: per-batch valid lengths shift the causal frontier; rows with no
    visible key (negative offset, an all-false mask row) are zero, as onnx.reference defines."""
    shapes = {"Q": bhsd(2, 2, 4, 8), "K": bhsd(2, 2, 6, 8), "V": bhsd(2, 2, 6, 8), "nonpad_kv_seqlen": (2,)}
    model = attention_model(shapes, ("Y",), opset=24, is_causal=1)
    f = random_feeds(model, nonpad=[6, 2])  # batch 1: offset 2 - 4 < 0, rows 0 and 1 see nothing
    assert_matches_reference(runtime, model, f)
    ours = run_onyxia(runtime, model, f)[0]
    assert not ours[1, :, :2].any() and np.isfinite(ours).all()

    model = attention_model({"Q": bhsd(1, 2, 2, 8), "K": bhsd(1, 2, 3, 8), "V": bhsd(1, 2, 3, 8),
                             "attn_mask": (2, 3)}, ("Y", "qk_matmul_output"), mask_dtype=np.bool_,
                            qk_matmul_output_mode=3)
    f = random_feeds(model)
    f["attn_mask"] = np.array([[False, False, False], [True, False, True]])
    ours, ref = run_onyxia(runtime, model, f), ReferenceEvaluator(model).run(None, f)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert not ours[0][:, :, 0].any() and not ours[1][:, :, 0].any()


@pytest.mark.parametrize("left,right,causal", [(2, 0, 0), (1, 1, 0), (-1, 1, 0), (2, -1, 1)])
def test_sliding_windows(runtime, left, right, causal):
    shapes = {"Q": bhsd(1, 2, 5, 8), "K": bhsd(1, 2, 6, 8), "V": bhsd(1, 2, 6, 8)}
    model = attention_model(shapes, ("Y",), opset=25, left_window_size=left, right_window_size=right,
                            is_causal=causal)
    assert_matches_reference(runtime, model, random_feeds(model))


def test_decode_loop_changes_lengths_without_recompiling(runtime):
    """Prefill then decode with symbolic sequence and past lengths: present feeds back as past."""
    hq, hkv, d = 4, 2, 16
    shapes = {"Q": (1, hq, "S", d), "K": (1, hkv, "S", d), "V": (1, hkv, "S", d),
              "past_key": (1, hkv, "P", d), "past_value": (1, hkv, "P", d)}
    model = attention_model(shapes, OUTPUTS[:3], is_causal=1)
    exe = runtime.load_model(compile_model(model, {"S": 5, "P": 1}))
    past_k = RNG.standard_normal((1, hkv, 1, d)).astype(np.float32)
    past_v = RNG.standard_normal((1, hkv, 1, d)).astype(np.float32)
    for seq in (5, 1, 1, 1):
        exe.update_dimensions({"S": seq, "P": past_k.shape[2]})
        f = {"Q": RNG.standard_normal((1, hq, seq, d)).astype(np.float32),
             "K": RNG.standard_normal((1, hkv, seq, d)).astype(np.float32),
             "V": RNG.standard_normal((1, hkv, seq, d)).astype(np.float32), "past_key": past_k, "past_value": past_v}
        out = exe.run(f)
        for name, ref in zip(OUTPUTS, run_ort(model, f)):
            np.testing.assert_allclose(out[name], ref, rtol=1e-4, atol=1e-5, err_msg=f"{name} at S={seq}")
        past_k, past_v = out["present_key"], out["present_value"]
    assert past_k.shape[2] == 1 + 5 + 3
    assert exe.stats.recompiles == 0


