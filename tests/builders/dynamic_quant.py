"""Builders shared by tests/gpu/test_dynamic_quant_matmul.py, tests/unit/test_dynamic_quant_fusion.py
and tests/gpu/test_shader_validation.py's table: transformers.js' q8 chains."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tests.helpers import make_model


def q8_model(k: int, ns: list[int], wtype: str, zp: str, rows: tuple, seed: int = 0):
    """x [*rows, k] -> DynamicQuantizeLinear -> one MatMulInteger -> Cast -> Mul chain per N in `ns`
    (outputs y0, y1, ...), as onnxruntime's quantize_dynamic writes them; weights `wtype` with a
    zero point per tensor ("tensor"), per column ("column") or none ("none")."""
    rng = np.random.default_rng(seed)
    lo, hi = (-128, 128) if wtype == "int8" else (0, 256)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"])]
    inits = {}
    for i, n in enumerate(ns):
        inits[f"b{i}"] = rng.integers(lo, hi, (k, n)).astype(wtype)
        inits[f"bs{i}"] = (rng.random(n if zp == "column" else ()) * 0.02 + 0.001).astype(np.float32)
        mm_inputs = ["q", f"b{i}", "z"]
        if zp != "none":
            inits[f"bz{i}"] = rng.integers(lo, hi, n if zp == "column" else ()).astype(wtype)
            mm_inputs.append(f"bz{i}")
        nodes += [helper.make_node("MatMulInteger", mm_inputs, [f"acc{i}"]),
                  helper.make_node("Cast", [f"acc{i}"], [f"f{i}"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", ["s", f"bs{i}"], [f"sm{i}"]),
                  helper.make_node("Mul", [f"f{i}", f"sm{i}"], [f"y{i}"])]
    return make_model(nodes, [("x", np.float32, [*rows, k])], [f"y{i}" for i in range(len(ns))], inits, opset=21)


def validation_models() -> list:
    """(model, dims): DynamicQuantMatMul (int8 / uint8 weights, zero points per tensor / column)
    and DynamicRange, one row and several."""
    return [(q8_model(64, [16, 8], wtype, zp, ("m",)), {"m": m})
            for wtype, zp in (("int8", "tensor"), ("uint8", "column"), ("int8", "none")) for m in (1, 5)]
