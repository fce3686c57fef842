"""Builders shared by tests/gpu/test_conv.py, tests/gpu/test_shader_validation.py's table and
tests/unit/test_operator_errors.py."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model

RNG = np.random.default_rng(0)


def randn(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def conv_model(op: str, x_shape, w_shape, *, bias: bool = True, opset: int = 18, **attrs):
    group = attrs.get("group", 1)
    maps = w_shape[0] if op == "Conv" else w_shape[1] * group
    inits = {"w": randn(*w_shape)}
    if bias:
        inits["b"] = randn(maps)
    node = h.make_node(op, ["x", "w", "b"] if bias else ["x", "w"], ["y"], **attrs)
    return make_model([node], [("x", np.float32, x_shape)], ["y"], inits, opset=opset)


def causal_model(k: int, *, bias: bool, past: bool, activation: str = "none", outputs=("y", "state")):
    inits = {"w": randn(4, 1, k)}
    if bias:
        inits["b"] = randn(4)
    inputs = [("x", np.float32, ["n", 4, "L"])] + ([("past", np.float32, ["n", 4, k - 1])] if past else [])
    # The schema requires both node outputs; `outputs` picks which ones the graph exposes.
    node = h.make_node("CausalConvWithState", ["x", "w", "b" if bias else "", "past" if past else ""],
                       ["y", "state"], activation=activation)
    return make_model([node], inputs, [o for o in outputs if o], inits, opset=27)


def validation_models() -> list[tuple[object, dict[str, int]]]:
    """Small models covering every (shader, defs) variant of Conv and ConvTranspose."""
    out = []
    variants = [("Conv", [16, 3, 3, 3], dict(pads=[1, 1, 1, 1]), True),
                ("Conv", [64, 3, 3, 3], dict(strides=[2, 2]), False),
                ("Conv", [3, 1, 3, 3], dict(group=3), True),
                ("Conv", [3, 1, 3, 3], dict(group=3, auto_pad="SAME_UPPER", strides=[2, 2]), False),
                ("ConvTranspose", [3, 16, 3, 3], dict(strides=[2, 2]), True),
                ("ConvTranspose", [3, 2, 3, 3], dict(strides=[2, 2], group=3), False)]
    for op, w_shape, attrs, bias in variants:
        out.append((conv_model(op, ["n", 3, 8, 8], w_shape, bias=bias, **attrs), {"n": 2}))
    out.append((conv_model("Conv", ["n", 3, 8], [16, 3, 3]), {"n": 2}))  # 1-D
    out += [(causal_model(4, bias=True, past=True, activation="silu"), {"n": 2, "L": 3}),
            (causal_model(3, bias=False, past=False, outputs=("y",)), {"n": 2, "L": 3}),
            (causal_model(3, bias=False, past=True, outputs=("", "state")), {"n": 2, "L": 3})]
    return out
