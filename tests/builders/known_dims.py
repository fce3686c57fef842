"""Builders shared by tests/unit/test_known_dims.py and tests/gpu/test_known_dims.py."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model


def gqa_model(head_dim: int | str, *, heads: int = 4, kv_heads: int = 2, head: int = 16):
    """GroupQueryAttention whose past key/value have head dim `head_dim` (a dim_param, as
    onnxruntime-genai's builder writes `kv_cache_dim`)."""
    names = ["q", "k", "v", "pk", "pv", "sl", "tl"]
    inputs = [("q", np.float32, [1, "S", heads * head]), ("k", np.float32, [1, "S", kv_heads * head]),
              ("v", np.float32, [1, "S", kv_heads * head]),
              ("pk", np.float32, [1, kv_heads, "P", head_dim]), ("pv", np.float32, [1, kv_heads, "P", head_dim]),
              ("sl", np.int32, [1]), ("tl", np.int32, [])]
    node = h.make_node("GroupQueryAttention", names, ["o", "prk", "prv"], domain="com.microsoft", name="gqa",
                       num_heads=heads, kv_num_heads=kv_heads)
    return make_model([node], inputs, ["o", "prk", "prv"], extra_opsets={"com.microsoft": 1})
