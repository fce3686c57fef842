"""Builders shared by tests/gpu/test_storage.py and tests/gpu/test_shader_validation.py's table."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from onyxia.ir import dtypes
from tests.helpers import make_model


def _quant_inputs(rng, layout: str, shape=(3, 10, 5), axis=1, block=4):
    """(scale shape, attributes) for a per-tensor / per-axis / blocked quantization of `shape`."""
    if layout == "tensor":
        return (), {}
    if layout == "axis":
        return (shape[axis],), {"axis": axis}
    return tuple(-(-d // block) if a == axis else d for a, d in enumerate(shape)), {"axis": axis, "block_size": block}


def validation_models() -> list[tuple[object, dict[str, int]]]:
    """QuantizeLinear / DequantizeLinear variants for tests/gpu/test_shader_validation.py: per
    tensor, per axis and blocked; integer, float8 (non-saturating too) and float4 outputs; both
    domains."""
    out = []
    for domain, opset in (("", 25), ("com.microsoft", 25)):
        for qtype, layout in (("uint8", "tensor"), ("int4", "axis"), ("float8e4m3fn", "block"), ("float4e2m1", "axis"),
                              ("int16", "block")):
            q = dtypes.from_name(qtype)
            sshape, attrs = _quant_inputs(None, layout, (3, 8, 4))
            nodes = [h.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], domain=domain, **attrs),
                     h.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], domain=domain, **attrs)]
            if q.name == "float8e4m3fn":
                nodes.append(h.make_node("QuantizeLinear", ["x", "s"], ["q2"], domain=domain, saturate=0,
                                         output_dtype=q.onnx, **attrs))
            model = make_model(nodes, [("x", np.float16 if layout == "block" else np.float32, ["n", 8, 4]),
                                       ("s", np.float16 if layout == "block" else np.float32, list(sshape)),
                                       ("zp", q.numpy, list(sshape))],
                               ["q", "y"] + (["q2"] if len(nodes) > 2 else []), opset=opset,
                               extra_opsets={"com.microsoft": 1} if domain else None)
            out.append((model, {"n": 3}))
    return out
