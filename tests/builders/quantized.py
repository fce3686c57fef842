"""Builders shared by tests/gpu/test_quantized.py and tests/gpu/test_shader_validation.py's table."""

from __future__ import annotations

import numpy as np
from onnx import helper

from tests.helpers import make_model


# ---- MatMulBnb4 (transformers.js' "bnb4" files) --------------------------------------------------
def bnb4_model(rng, k: int, n: int, block: int, quant_type: int, dtype=np.float32):
    """A MatMul [S, k] x [k, n] quantized by onnxruntime's own MatMulBnb4Quantizer."""
    from onnxruntime.quantization.matmul_bnb4_quantizer import MatMulBnb4Quantizer

    node = helper.make_node("MatMul", ["A", "W"], ["Y"], name="proj")
    model = make_model([node], [("A", dtype, ["S", k])], ["Y"], {"W": rng.standard_normal((k, n)).astype(dtype)})
    quantizer = MatMulBnb4Quantizer(model, quant_type, block)
    quantizer.process()
    assert [n.op_type for n in quantizer.model.model.graph.node] == ["MatMulBnb4"]
    return quantizer.model.model


def validation_models() -> list:
    """MatMulBnb4 (both codebooks, float32 and float16) for tests/gpu/test_shader_validation.py."""
    rng = np.random.default_rng(1)
    return [(bnb4_model(rng, 64, 16, 64, kind, dtype), {"S": 3})
            for kind, dtype in ((1, np.float32), (0, np.float16))]
