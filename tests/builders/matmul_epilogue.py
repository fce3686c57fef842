"""Builders shared by tests/gpu/test_matmul_epilogue.py and tests/gpu/test_shader_validation.py's table."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model

F = np.float32


K, N = 64, 48


LONG_K = 16400  # past gemv.MAX_KCHUNK and gemm_variants.TILED_KCHUNK: every variant splits K


def _rand(rng, shape, dtype=F, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def after(pattern: str, rng, dtype=F) -> tuple[list, dict, list]:
    """(nodes reading the product `p` and writing `y`, their constants, their fed inputs)."""
    inits = {"bias": _rand(rng, (N,), dtype), "scale": _rand(rng, (1, N), dtype)}
    nodes = {
        "bias": [h.make_node("Add", ["p", "bias"], ["y"])],
        "relu": [h.make_node("Relu", ["p"], ["y"])],
        "sigmoid": [h.make_node("Sigmoid", ["p"], ["y"])],
        "tanh": [h.make_node("Tanh", ["p"], ["y"])],
        "gelu": [h.make_node("Gelu", ["p"], ["y"])],
        "leaky": [h.make_node("LeakyRelu", ["p"], ["y"], alpha=0.2)],
        "silu": [h.make_node("Sigmoid", ["p"], ["s"]), h.make_node("Mul", ["p", "s"], ["y"])],
        "bias_relu": [h.make_node("Add", ["p", "bias"], ["b"]), h.make_node("Relu", ["b"], ["y"])],
        "residual": [h.make_node("Add", ["r", "p"], ["y"])],
        "bias_gelu_residual": [h.make_node("Add", ["p", "bias"], ["b"]), h.make_node("Gelu", ["b"], ["g"]),
                               h.make_node("Add", ["g", "r"], ["y"])],
        # broadcast operands: a [1, N] row, an [M, 1] column (strided index) and the product twice
        "broadcast": [h.make_node("Mul", ["p", "scale"], ["s"]), h.make_node("Add", ["s", "col"], ["t"]),
                      h.make_node("Mul", ["t", "p"], ["y"])],
    }[pattern]
    fed = {"residual": ["r"], "bias_gelu_residual": ["r"], "broadcast": ["col"]}.get(pattern, [])
    return nodes, inits, fed


def weight_model(pattern: str, k: int = K, dtype=F, gemm: bool = False):
    """a [M, k] @ w [k, N] (MatMul, or Gemm with C, alpha and beta) followed by `pattern`."""
    rng = np.random.default_rng(len(pattern) + k)
    nodes, inits, fed = after(pattern, rng, dtype)
    inits["w"] = _rand(rng, (k, N), dtype, 1 / np.sqrt(k))
    if gemm:
        inits["c"] = _rand(rng, (N,), dtype)
        product = h.make_node("Gemm", ["a", "w", "c"], ["p"], alpha=0.5, beta=2.0)
    else:
        product = h.make_node("MatMul", ["a", "w"], ["p"])
    shapes = {"a": ["M", k], "r": ["M", N], "col": ["M", 1]}
    inputs = [(n, dtype, shapes[n]) for n in ["a", *fed]]
    return make_model([product, *nodes], inputs, ["y"], inits, opset=20)


def validation_models() -> list:
    """(model, dims) for tests/gpu/test_shader_validation.py: MatMulEpilogue and GemmEpilogue with
    every variant's kernels, split-K finishes, broadcast operands and float16 storage."""
    out = [(weight_model(p), {"M": m}) for p in ("bias_gelu_residual", "broadcast") for m in (1, 70)]
    out += [(weight_model("bias_relu", gemm=True), {"M": 70}), (weight_model("bias_relu", k=LONG_K), {"M": 70}),
            (weight_model("broadcast", dtype=np.float16), {"M": 5})]
    return out
