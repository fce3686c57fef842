"""Builders shared by tests/gpu/test_attention.py and tests/gpu/test_loop_cap.py:
GroupQueryAttention models."""

from __future__ import annotations

import numpy as np
from onnx import helper

from tests.helpers import make_model

MS = {"com.microsoft": 1}


Q_HEADS, KV_HEADS, HEAD = 4, 2, 16


MAX_POS = 96


def gqa_model(*, packed: bool, batch: int, cache: int | str, rotary: bool = False, head: int = HEAD,
              heads: tuple[int, int] = (Q_HEADS, KV_HEADS), **attrs) -> object:
    """A one-node GQA model; sequence length "S" is symbolic, the cache length is `cache`;
    `heads`: query and KV heads."""
    q_heads, kv_heads = heads
    hidden = (q_heads + 2 * kv_heads) * head if packed else q_heads * head
    inputs = [("q", np.float32, [batch, "S", hidden])]
    names = ["q", "", ""] if packed else ["q", "k", "v"]
    if not packed:
        inputs += [("k", np.float32, [batch, "S", kv_heads * head]), ("v", np.float32, [batch, "S", kv_heads * head])]
    inputs += [("pk", np.float32, [batch, kv_heads, cache, head]), ("pv", np.float32, [batch, kv_heads, cache, head]),
               ("sl", np.int32, [batch]), ("tl", np.int32, [])]
    names += ["pk", "pv", "sl", "tl"]
    inits = {}
    if rotary:
        rng = np.random.default_rng(7)
        angles = rng.random((MAX_POS, head // 2)).astype(np.float32) * 3
        inits = {"cos": np.cos(angles), "sin": np.sin(angles)}
        names += ["cos", "sin"]
        attrs["do_rotary"] = 1
    node = helper.make_node("GroupQueryAttention", names, ["o", "prk", "prv"], domain="com.microsoft",
                            num_heads=q_heads, kv_num_heads=kv_heads, **attrs)
    return make_model([node], inputs, ["o", "prk", "prv"], inits, extra_opsets=MS)
