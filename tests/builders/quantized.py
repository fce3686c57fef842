"""Builders shared by tests/gpu/test_quantized.py, tests/gpu/test_shader_validation.py's table and
tests/unit/test_quantized.py, tests/unit/test_split_large.py, tests/gpu/test_split_large.py."""

from __future__ import annotations

import numpy as np
from onnx import helper

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.compiler.passes import DeadCodeEliminationPass, NBitsTilesPass
from onyxia.operators import core_operator_registry
from tests.helpers import make_model


# ---- MatMulBnb4 (transformers.js' "bnb4" files) --------------------------------------------------
def bnb4_model(rng, k: int, n: int, block: int, quant_type: int, dtype=np.float32, tail: bool = False):
    """A MatMul [S, k] x [k, n] quantized by onnxruntime's own MatMulBnb4Quantizer; with `tail`,
    Y = SiLU(product) + R (R [S, n]), elementwise ops the packed kernel takes in its epilogue."""
    from onnxruntime.quantization.matmul_bnb4_quantizer import MatMulBnb4Quantizer

    nodes = [helper.make_node("MatMul", ["A", "W"], ["P" if tail else "Y"], name="proj")]
    inputs = [("A", dtype, ["S", k])]
    if tail:
        nodes += [helper.make_node("Sigmoid", ["P"], ["G"]), helper.make_node("Mul", ["P", "G"], ["H"]),
                  helper.make_node("Add", ["H", "R"], ["Y"])]
        inputs.append(("R", dtype, ["S", n]))
    model = make_model(nodes, inputs, ["Y"], {"W": rng.standard_normal((k, n)).astype(dtype)})
    quantizer = MatMulBnb4Quantizer(model, quant_type, block)
    quantizer.process()
    assert [n.op_type for n in quantizer.model.model.graph.node][0] == "MatMulBnb4"
    return quantizer.model.model


def validation_models() -> list:
    """MatMulBnb4 (both codebooks, float32 and float16, with an epilogue: onyxia::MatMulBnb4)
    for tests/gpu/test_shader_validation.py."""
    rng = np.random.default_rng(1)
    return [(bnb4_model(rng, 64, 16, 64, kind, dtype, tail), {"S": 3})
            for kind, dtype, tail in ((1, np.float32, False), (0, np.float16, False), (1, np.float32, True))]


MS = {"com.microsoft": 1}


def compile_with(model, dims):
    """The kernels as planned, with B and scales in tiles where they apply (NBitsTilesPass)."""
    pipeline = CompilerPipeline(core_operator_registry(), optimize=False)
    pipeline.add_pass(DeadCodeEliminationPass())
    pipeline.add_pass(NBitsTilesPass())
    return pipeline.compile(onyxia.load_model(model), dims)


def pack_nibbles(q: np.ndarray) -> np.ndarray:
    """4-bit values [..., 2k] -> bytes [..., k], low nibble first (odd lengths zero-padded)."""
    if q.shape[-1] % 2:
        q = np.concatenate([q, np.zeros(q.shape[:-1] + (1,), np.uint8)], axis=-1)
    return (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)


def nbits_model(rng, *, k: int, n: int, block: int, zero_points: str | None, bias: bool,
                dtype=np.float32, batch_dims=("M",)):
    nblk = -(-k // block)
    q = rng.integers(0, 16, (n, nblk * block), dtype=np.uint8)
    inits = {"B": pack_nibbles(q).reshape(n, nblk, block // 2),
             "scales": (rng.random(n * nblk) * 0.1).astype(dtype)}
    names = ["A", "B", "scales"]
    if zero_points == "uint8":
        inits["zp"] = pack_nibbles(rng.integers(0, 16, (n, nblk), dtype=np.uint8)).reshape(-1)
    elif zero_points == "float":
        inits["zp"] = (rng.random(n * nblk) * 15).astype(dtype)
    names.append("zp" if zero_points else "")
    if bias:
        inits["bias"] = rng.standard_normal(n).astype(dtype)
        names += ["", "bias"]
    while not names[-1]:
        names.pop()
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft",
                            K=k, N=n, bits=4, block_size=block)
    return make_model([node], [("A", dtype, [*batch_dims, k])], ["Y"], inits, extra_opsets=MS)
