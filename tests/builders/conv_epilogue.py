"""Builders shared by tests/gpu/test_conv_epilogue.py and tests/gpu/test_shader_validation.py's table:
a Conv / ConvTranspose on each of plan_conv's kernel paths followed by the elementwise ops
EpilogueFusionPass moves into its epilogue."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model

F = np.float32

# path -> (op, input channels, output channels, kernel, spatial size, attributes): the kernel
# plan_conv picks for it (operators/conv/conv.py)
PATHS = {
    "direct": ("Conv", 8, 8, 3, 10, dict(group=8, pads=[1, 1, 1, 1])),  # depthwise: conv_direct
    "gemm": ("Conv", 8, 16, 3, 9, dict(pads=[1, 1, 1, 1], strides=[2, 2])),  # conv_gemm
    "splitk": ("Conv", 1024, 8, 3, 4, dict(pads=[1, 1, 1, 1])),  # K = 9216: conv_gemm + splitk
    "pointwise": ("Conv", 16, 24, 1, 6, {}),  # 1x1: the matrix product's kernels
    "pooled": ("Conv", 32, 16, 1, 1, {}),  # squeeze-excite over a pooled map: few-rows kernels
    "transpose": ("ConvTranspose", 8, 8, 3, 5, dict(strides=[2, 2])),  # conv_gemm, gather form
}
PATTERNS = ("relu", "hardswish", "hardsigmoid", "silu", "gelu", "clip", "leaky", "residual", "channel_relu")


def out_size(path: str) -> int:
    op, _, _, k, size, attrs = PATHS[path]
    stride = attrs.get("strides", [1])[0]
    pads = attrs.get("pads", [0, 0])[0] * 2
    return (size - 1) * stride + k - pads if op == "ConvTranspose" else (size + pads - k) // stride + 1


def after(pattern: str, maps: int, rng) -> tuple[list, dict, list]:
    """(nodes reading the convolution's output `c` and writing `y`, their constants, fed inputs)."""
    inits = {"lo": np.array(-0.5, F), "hi": np.array(1.5, F),
             "chan": rng.standard_normal((1, maps, 1, 1)).astype(F)}
    nodes = {
        "relu": [h.make_node("Relu", ["c"], ["y"])],
        "hardswish": [h.make_node("HardSwish", ["c"], ["y"])],
        "hardsigmoid": [h.make_node("HardSigmoid", ["c"], ["y"], alpha=0.2, beta=0.4)],
        "silu": [h.make_node("Sigmoid", ["c"], ["s"]), h.make_node("Mul", ["c", "s"], ["y"])],
        "gelu": [h.make_node("Gelu", ["c"], ["y"])],
        "clip": [h.make_node("Clip", ["c", "lo", "hi"], ["y"])],
        "leaky": [h.make_node("LeakyRelu", ["c"], ["y"], alpha=0.1)],
        "residual": [h.make_node("Add", ["r", "c"], ["y"])],
        # a per-channel operand [1, M, 1, 1]: read through broadcast strides
        "channel_relu": [h.make_node("Mul", ["c", "chan"], ["m"]), h.make_node("Relu", ["m"], ["y"])],
    }[pattern]
    used = {t for n in nodes for t in n.input}
    return nodes, {k: v for k, v in inits.items() if k in used}, ["r"] if pattern == "residual" else []


def conv_pattern_model(path: str, pattern: str, bias: bool = True):
    """x [n, C, S, S] -> Conv/ConvTranspose on `path` -> `pattern` -> y (opset 20: Gelu)."""
    op, channels, maps, k, size, attrs = PATHS[path]
    rng = np.random.default_rng(len(path) * 31 + len(pattern))
    nodes, inits, fed = after(pattern, maps, rng)
    group = attrs.get("group", 1)
    w_shape = (maps, channels // group, k, k) if op == "Conv" else (channels, maps // group, k, k)
    inits["w"] = (rng.standard_normal(w_shape) / np.sqrt(channels // group * k * k)).astype(F)
    if bias:
        inits["b"] = rng.standard_normal(maps).astype(F)
    conv = h.make_node(op, ["x", "w", "b"] if bias else ["x", "w"], ["c"], name="conv", **attrs)
    o = out_size(path)
    inputs = [("x", F, ["n", channels, size, size])] + [(t, F, ["n", maps, o, o]) for t in fed]
    return make_model([conv, *nodes], inputs, ["y"], inits, opset=20)


def validation_models() -> list:
    """(model, dims) for tests/gpu/test_shader_validation.py: ConvEpilogue on every kernel path
    (strided and full-shape operands), ConvTransposeEpilogue."""
    return [(conv_pattern_model(path, pattern), {"n": 2})
            for path, pattern in (("direct", "channel_relu"), ("gemm", "residual"), ("splitk", "silu"),
                                  ("pointwise", "channel_relu"), ("pooled", "hardswish"),
                                  ("transpose", "residual"))]
