"""Builders shared by tests/gpu/test_quantize_sharing.py and tests/gpu/test_shader_validation.py's table."""

from __future__ import annotations

import numpy as np
from onnx import helper

from tests.helpers import make_model

MS = {"com.microsoft": 1}


K = 128


def _nbits(rng, name: str, a: str, n: int, block: int, accuracy: int, inits: dict):
    blocks = K // block
    inits[f"{name}_w"] = rng.integers(0, 256, (n, blocks, block // 2), dtype=np.uint8)
    inits[f"{name}_s"] = rng.random(n * blocks).astype(np.float32) * 0.1 + 0.01
    inits[f"{name}_z"] = rng.integers(0, 256, (n * ((blocks + 1) // 2),), dtype=np.uint8)
    return helper.make_node("MatMulNBits", [a, f"{name}_w", f"{name}_s", f"{name}_z"], [name], name=name,
                            domain="com.microsoft", K=K, N=n, bits=4, block_size=block, accuracy_level=accuracy)


def shared_model():
    """q, k, v read `a` (one group); gate reads it with another block size, f32 reads it at
    accuracy_level 0; up and down read `h` = Relu(a), a group of two."""
    rng = np.random.default_rng(0)
    inits: dict = {}
    nodes = [_nbits(rng, "q", "a", 64, 32, 4, inits), _nbits(rng, "k", "a", 40, 32, 4, inits),
             _nbits(rng, "v", "a", 40, 32, 4, inits), _nbits(rng, "gate", "a", 24, 64, 4, inits),
             _nbits(rng, "f32", "a", 24, 32, 0, inits),
             helper.make_node("Relu", ["a"], ["h"]),
             _nbits(rng, "up", "h", 48, 32, 4, inits), _nbits(rng, "down", "h", 32, 32, 4, inits)]
    outs = ["q", "k", "v", "gate", "f32", "up", "down"]
    return make_model(nodes, [("a", np.float32, ["M", K])], outs, inits, extra_opsets=MS), outs


def norm_model(bias: bool):
    """SkipSimplifiedLayerNormalization -> q, k (a group); its sum (a graph output) ->
    SimplifiedLayerNormalization -> lm (a lone reader): both norms quantize for their readers."""
    rng = np.random.default_rng(1)
    inits: dict = {"g1": rng.standard_normal(K).astype(np.float32), "g2": rng.standard_normal(K).astype(np.float32)}
    skip_inputs = ["x", "skip", "g1"]
    if bias:
        inits["b1"] = rng.standard_normal(K).astype(np.float32)
        skip_inputs.append("b1")
    nodes = [helper.make_node("SkipSimplifiedLayerNormalization", skip_inputs, ["y", "", "", "sum"],
                              domain="com.microsoft", epsilon=1e-6),
             _nbits(rng, "q", "y", 64, 32, 4, inits), _nbits(rng, "k", "y", 40, 32, 4, inits),
             helper.make_node("SimplifiedLayerNormalization", ["sum", "g2"], ["z"], epsilon=1e-5, axis=-1),
             _nbits(rng, "lm", "z", 48, 32, 4, inits)]
    outs = ["q", "k", "lm", "sum"]
    inputs = [("x", np.float32, [1, "M", K]), ("skip", np.float32, [1, "M", K])]
    return make_model(nodes, inputs, outs, inits, extra_opsets=MS), outs


def validation_models() -> list:
    """(model, dims) for tests/gpu/test_shader_validation.py: QuantizeQ8, MatMulNBitsShared and
    RmsNormQ8 (with and without a skip's bias), decode and prefill rows."""
    return [(model, {"M": m}) for model in (shared_model()[0], norm_model(False)[0], norm_model(True)[0])
            for m in (1, 9)]
