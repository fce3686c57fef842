"""Builders shared by tests/gpu/test_dynamic_quant_matmul.py, tests/unit/test_dynamic_quant_fusion.py
and tests/gpu/test_shader_validation.py's table: transformers.js' q8 chains."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tests.helpers import make_model


def q8_model(k: int, ns: list[int], wtype: str, zp: str, rows: tuple, seed: int = 0, tail: bool = False):
    """x [*rows, k] -> DynamicQuantizeLinear -> one MatMulInteger -> Cast -> Mul chain per N in `ns`
    (outputs y0, y1, ...), as onnxruntime's quantize_dynamic writes them; weights `wtype` with a
    zero point per tensor ("tensor"), per column ("column") or none ("none"). `tail`: y0 goes on
    through SiLU (y0 * Sigmoid(y0)) and a residual Add of input r [*rows, N0] (the output t),
    elementwise ops the product's kernel takes in its epilogue."""
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
    inputs, outputs = [("x", np.float32, [*rows, k])], [f"y{i}" for i in range(len(ns))]
    if tail:
        nodes += [helper.make_node("Sigmoid", ["y0"], ["g"]), helper.make_node("Mul", ["y0", "g"], ["h"]),
                  helper.make_node("Add", ["h", "r"], ["t"])]
        inputs.append(("r", np.float32, [*rows, ns[0]]))
        outputs[0] = "t"
    return make_model(nodes, inputs, outputs, inits, opset=21)


def validation_models() -> list:
    """(model, dims): DynamicQuantMatMul (int8 / uint8 weights, zero points per tensor / column)
    and DynamicRange, one row and several, with and without an epilogue."""
    return [(q8_model(64, [16, 8], wtype, zp, ("m",), tail=tail), {"m": m})
            for wtype, zp, tail in (("int8", "tensor", False), ("uint8", "column", True), ("int8", "none", False))
            for m in (1, 5)]
