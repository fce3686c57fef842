"""Builders shared by tests/gpu/test_onnx_attention.py, tests/gpu/test_shader_validation.py's table and
tests/unit/test_operator_errors.py."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model

INPUTS = ["Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen"]


OUTPUTS = ["Y", "present_key", "present_value", "qk_matmul_output"]


def attention_model(shapes: dict[str, tuple], outputs=("Y",), *, opset: int = 23, dtype=np.float32,
                    mask_dtype=None, **attrs):
    """One Attention node; `shapes` maps the inputs to give (by name) to their shapes."""
    names = [n if n in shapes else "" for n in INPUTS]
    while names and not names[-1]:
        names.pop()
    types = {"attn_mask": mask_dtype or dtype, "nonpad_kv_seqlen": np.int64}
    inputs = [(n, types.get(n, dtype), shapes[n]) for n in names if n]
    outs = [n if n in outputs else "" for n in OUTPUTS]
    while not outs[-1]:
        outs.pop()
    node = h.make_node("Attention", names, outs, **attrs)
    return make_model([node], inputs, [n for n in outs if n], opset=opset)


def validation_models() -> list[tuple[object, dict[str, int]]]:
    """Small models covering the Attention kernel variants (masks, windows, qk modes, caches)."""
    qkv = {"Q": (1, 2, "n", 8), "K": (1, 2, "n", 8), "V": (1, 2, "n", 8)}
    past = {"past_key": (1, 2, 2, 8), "past_value": (1, 2, 2, 8)}
    return [
        (attention_model(qkv, ("Y",)), {"n": 3}),
        (attention_model({**qkv, "attn_mask": ("n", "n")}, ("Y",), mask_dtype=np.bool_, is_causal=1), {"n": 3}),
        (attention_model({**qkv, "attn_mask": (1, 2, "n", 5), **past}, OUTPUTS, softcap=1.0,
                         qk_matmul_output_mode=3), {"n": 3}),
        (attention_model({**qkv, "nonpad_kv_seqlen": (1,)}, ("Y",), opset=25, is_causal=1, left_window_size=1,
                         right_window_size=0), {"n": 3}),
    ]


def bhsd(b, h_, s, d):
    return (b, h_, s, d)
