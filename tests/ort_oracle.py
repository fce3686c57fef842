"""onnxruntime as an exact oracle for integer products on every x86 CPU.

On x86 CPUs without VNNI (AVX2 only, e.g. the AMD EPYC some CI machines have), onnxruntime's
uint8 x int8 kernels add pairs of products in 16 bits with saturation (vpmaddubsw): there,
MatMulInteger([[255, 255]], [[127], [127]]) gives 32767, not 64770 (onnxruntime 1.32, measured
2026-11-23), and QLinearMatMul/QLinearConv/QGemm outputs and fused QDQ models are off by several
steps. The ONNX spec (and onyxia) accumulate exactly in int32; onnxruntime's uint8 x uint8
kernels do too. So the oracle runs an equivalent model: each int8 weight operand of an integer
product (and each int8 initializer a DequantizeLinear reads) re-encoded as uint8 w + 128 with
its zero point + 128, which denotes the same values, and the uint8 x uint8 kernels compute it.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

# (domain, op) -> (weight input index, its zero point's index, the other operand's index or None)
_WEIGHT_OPERANDS = {
    ("", "MatMulInteger"): (1, 3, 0),
    ("", "QLinearMatMul"): (3, 5, 0),
    ("", "QLinearConv"): (3, 5, 0),
    ("com.microsoft", "QGemm"): (3, 5, 0),
    ("com.microsoft", "MatMulIntegerToFloat"): (1, 5, 0),
    ("com.microsoft", "DynamicQuantizeMatMul"): (1, 3, None),  # A is float, quantized to uint8
    ("", "DequantizeLinear"): (0, 2, None),  # the same floats either way
}


def _domain(node: onnx.NodeProto) -> str:
    return "" if node.domain in ("", "ai.onnx") else node.domain


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {t.name: t.data_type for t in model.graph.initializer}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        types.setdefault(vi.name, vi.type.tensor_type.elem_type)
    return types


def _graphs(graph: onnx.GraphProto):
    """`graph` and every subgraph in it (If branches, Loop and Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs(g)


def exact_for_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]
                  ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """`model` and `feeds` with int8 weights of uint8 x int8 products as uint8 (see the module doc),
    in subgraphs too (a merged decoder's If branches read the model's initializers)."""
    types = _elem_types(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    feeds = dict(feeds)
    top = {t.name: t for t in out.graph.initializer}
    consumers: dict[str, int] = {}
    for graph in _graphs(out.graph):
        for node in graph.node:
            for name in node.input:
                consumers[name] = consumers.get(name, 0) + 1
    changed = False
    for graph in _graphs(out.graph):
        inits = {**top, **{t.name: t for t in graph.initializer}}
        for node in graph.node:
            spec = _WEIGHT_OPERANDS.get((_domain(node), node.op_type))
            if spec is None or len(node.input) <= spec[0]:
                continue
            w_at, zp_at, other_at = spec
            w = node.input[w_at]
            zp = node.input[zp_at] if len(node.input) > zp_at else ""
            w_type = inits[w].data_type if w in inits else types.get(w)
            if w_type != TensorProto.INT8 or (zp and zp not in inits):
                continue
            # Only uint8 x int8 saturates; an operand of unknown type (a contrib op's output) is uint8 here.
            other = types.get(node.input[other_at], TensorProto.UINT8) if other_at is not None else TensorProto.UINT8
            if other not in (0, TensorProto.UINT8):
                continue
            if not (w in inits or (graph is out.graph and w in feeds and consumers[w] == 1)):
                continue
            changed = True
            tag = f"__u8_{len(out.graph.initializer)}"  # unique: the top graph's initializers only grow
            if w in inits:  # a uint8 copy per consumer: other consumers may read it as int8
                node.input[w_at] = w + tag
                out.graph.initializer.append(numpy_helper.from_array(_shifted(numpy_helper.to_array(inits[w])),
                                                                     node.input[w_at]))
            else:
                feeds[w] = _shifted(np.asarray(feeds[w]))
                for vi in out.graph.input:
                    if vi.name == w:
                        vi.type.tensor_type.elem_type = TensorProto.UINT8
            values = _shifted(numpy_helper.to_array(inits[zp])) if zp else np.array(128, np.uint8)
            while len(node.input) <= zp_at:
                node.input.append("")
            node.input[zp_at] = f"{w}{tag}_zero_point"
            out.graph.initializer.append(numpy_helper.from_array(values, node.input[zp_at]))
    if not changed:
        return model, feeds
    used = {name for graph in _graphs(out.graph) for node in graph.node for name in node.input}
    used |= {vi.name for vi in out.graph.output}
    kept = [t for t in out.graph.initializer if t.name in used or t.name not in top]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept)
    return out, feeds


def _shifted(values: np.ndarray) -> np.ndarray:
    return (values.astype(np.int16) + 128).astype(np.uint8)


def exact_session(path, options=None):
    """An onnxruntime CPU session of the model file at `path`, exact for integer products on
    every x86 CPU (exact_for_ort)."""
    import onnxruntime as ort

    model, _ = exact_for_ort(onnx.load(str(path)), {})
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
