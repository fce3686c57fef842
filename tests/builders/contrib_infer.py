"""Builders shared by tests/unit/test_contrib_infer.py and tests/unit/test_plan_cost.py."""

from __future__ import annotations

import numpy as np
from onnx import helper

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.operators import core_operator_registry
from onyxia.operators.attention.gqa import SHARE_BUFFER_ATTR
from tests.helpers import make_model

MS = {"com.microsoft": 1}


def compile_graph(model, dims, *, share: bool = False):
    graph = onyxia.load_model(model)
    if share:
        for node in graph.nodes:
            node.attributes[SHARE_BUFFER_ATTR] = 1
    return CompilerPipeline(core_operator_registry()).compile(graph, dims)


def gqa(*, packed=False, cache="P", total=None, extra_inputs=(), **attrs):
    heads, kv, d = 4, 2, 16
    hidden = (heads + 2 * kv) * d if packed else heads * d
    inputs = [("q", np.float32, [1, "S", hidden])]
    if not packed:
        inputs += [("k", np.float32, [1, "S", kv * d]), ("v", np.float32, [1, "S", kv * d])]
    inputs += [("pk", np.float32, [1, kv, cache, d]), ("pv", np.float32, [1, kv, cache, d]), ("sl", np.int32, [1])]
    inits = {}
    if total is None:
        inputs.append(("tl", np.int32, []))
    else:
        inits["tl"] = np.array(total, np.int32)
    names = (["q", "", ""] if packed else ["q", "k", "v"]) + ["pk", "pv", "sl", "tl", *extra_inputs]
    for name in extra_inputs:
        if name:
            inits[name] = np.zeros((8, 8), np.float32)
    node = helper.make_node("GroupQueryAttention", names, ["o", "prk", "prv"], domain="com.microsoft", name="gqa",
                            num_heads=heads, kv_num_heads=kv, **attrs)
    return make_model([node], inputs, ["o", "prk", "prv"], inits, extra_opsets=MS)
