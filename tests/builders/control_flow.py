"""Builders shared by tests/gpu/test_control_flow.py and tests/gpu/test_shader_validation.py's table."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as h

from tests.control_models import scan_model, vi
from tests.helpers import make_model


def validation_models() -> list:
    """(model, dims) for tests/gpu/test_shader_validation.py, dims with the symbol `n`."""
    return [(make_model([h.make_node("If", ["c"], ["o"],
                                     then_branch=h.make_graph([h.make_node("Neg", ["x"], ["t"])], "t", [], [vi("t")]),
                                     else_branch=h.make_graph([h.make_node("Abs", ["x"], ["e"])], "e", [], [vi("e")]))],
                        [("x", np.float32, ["n"]), ("c", np.bool_, [])], ["o"]), {"n": 3}),
            (scan_model("n", in_axis=1, out_axis=1), {"n": 3}),
            (linear_attention_model(), {}),
            (make_model([h.make_node("Loop", ["M", "", "v0"], ["v", "sc"], body=h.make_graph(
                [h.make_node("Neg", ["v"], ["v2"]), h.make_node("Less", ["v2", "z"], ["c2"])], "b",
                [vi("i", TP.INT64, []), vi("c", TP.BOOL, []), vi("v", shape=["n"])],
                [vi("c2", TP.BOOL, []), vi("v2"), vi("v2")]))],
                [("v0", np.float32, ["n"]), ("M", np.int64, []), ("z", np.float32, [])], ["v", "sc"]), {"n": 3})]


def linear_attention_model(rule: str = "linear"):
    shapes = [("q", np.float32, [1, 3, 8]), ("k", np.float32, [1, 3, 8]), ("v", np.float32, [1, 3, 8])]
    node = h.make_node("LinearAttention", ["q", "k", "v"], ["y", "state"], q_num_heads=2, kv_num_heads=2,
                       update_rule=rule)
    return make_model([node], shapes, ["y", "state"], opset=27)
