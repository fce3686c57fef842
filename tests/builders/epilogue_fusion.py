"""Builders shared by tests/gpu/test_epilogue_fusion.py and tests/gpu/test_shader_validation.py's table."""

from __future__ import annotations

import numpy as np
from onnx import helper

from tests.helpers import make_model

MS = {"com.microsoft": 1}


K, N = 64, 48


def _nbits(rng, name: str, a: str, accuracy: int, inits: dict):
    blocks = K // 32
    inits[f"{name}_w"] = rng.integers(0, 256, (N, blocks, 16), dtype=np.uint8)
    inits[f"{name}_s"] = rng.random(N * blocks).astype(np.float32) * 0.1 + 0.01
    inits[f"{name}_z"] = rng.integers(0, 256, (N * ((blocks + 1) // 2),), dtype=np.uint8)
    return helper.make_node("MatMulNBits", [a, f"{name}_w", f"{name}_s", f"{name}_z"], [name], name=name,
                            domain="com.microsoft", K=K, N=N, bits=4, block_size=32, accuracy_level=accuracy)


def _after(pattern: str, rng, inits: dict) -> list:
    """Nodes reading the product `p` and writing `y`."""
    inits["bias"] = rng.standard_normal(N).astype(np.float32)
    return {
        "bias": [helper.make_node("Add", ["p", "bias"], ["y"])],
        "relu": [helper.make_node("Relu", ["p"], ["y"])],
        "sigmoid": [helper.make_node("Sigmoid", ["p"], ["y"])],
        "tanh": [helper.make_node("Tanh", ["p"], ["y"])],
        "gelu": [helper.make_node("Gelu", ["p"], ["y"])],
        "leaky": [helper.make_node("LeakyRelu", ["p"], ["y"], alpha=0.2)],
        "silu": [helper.make_node("Sigmoid", ["p"], ["s"]), helper.make_node("Mul", ["p", "s"], ["y"])],
        "bias_relu": [helper.make_node("Add", ["p", "bias"], ["b"]), helper.make_node("Relu", ["b"], ["y"])],
        "residual": [helper.make_node("Add", ["r", "p"], ["y"])],
    }[pattern]


def pattern_model(pattern: str, accuracy: int):
    rng = np.random.default_rng(len(pattern))
    inits: dict = {}
    nodes = [_nbits(rng, "p", "a", accuracy, inits), *_after(pattern, rng, inits)]
    inputs = [("a", np.float32, ["M", K]), ("r", np.float32, ["M", N])]
    used = {t for nd in nodes for t in nd.input}
    return make_model(nodes, [i for i in inputs if i[0] in used], ["y"], inits, opset=20, extra_opsets=MS)


def swiglu_model(accuracy: int):
    """onnxruntime-genai's MLP: down(silu(gate(a)) * up(a))."""
    rng = np.random.default_rng(9)
    inits: dict = {}
    nodes = [_nbits(rng, "gate", "a", accuracy, inits), _nbits(rng, "up", "a", accuracy, inits),
             helper.make_node("Sigmoid", ["gate"], ["s"]), helper.make_node("Mul", ["gate", "s"], ["silu"]),
             helper.make_node("Mul", ["silu", "up"], ["y"])]
    return make_model(nodes, [("a", np.float32, ["M", K])], ["y"], inits, opset=20, extra_opsets=MS)


def validation_models() -> list:
    """(model, dims) for tests/gpu/test_shader_validation.py: MatMulNBitsShared with an epilogue,
    from f32 and int8 activations, decode and prefill rows."""
    return [(model, {"M": m}) for model in (swiglu_model(0), swiglu_model(4), pattern_model("residual", 4))
            for m in (1, 5)]
