"""PooledConvWeightsPass: a 1x1 Conv over a 1x1 map keeps its weights transposed, [C, M].

Squeeze-excite blocks (MobileNetV3, EfficientNet) run two 1x1 convolutions over the pooled
[N, C, 1, 1] map: matrix-vector products Y[N, M] = X[N, C] @ W^T with W [M, C]. Read as it is
stored, W is a transposed B, which the chunked decode kernel a CPU-type adapter prefers
(operators/matmul/gemv.py) does not take: the coalesced gemv ran instead (lavapipe,
mobilenet_v3_large: 0.1 - 0.9 ms per convolution). Stored once as W^T [C, M, 1, ...], it is the
row-major B every few-rows kernel reads, as a decode step's weights are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onyxia.compiler.pass_api import CompileContext, Pass, PassResult, Stage
from onyxia.ir.graph import IrGraph, Node, TensorDef, TensorKind
from onyxia.ir.shapes import numel
from onyxia.operators.conv.conv import WEIGHTS_KC_ATTR
from onyxia.operators.elementwise.fused import FUSED_DOMAIN

CONVS = {("", "Conv"), ("ai.onnx", "Conv"), (FUSED_DOMAIN, "ConvEpilogue")}
FLOATS = ("float32", "float16")


@dataclass(frozen=True)
class PooledConvReport:
    """{conv node: its transposed weight}, {conv node over a 1x1 map: why it stays}."""

    transposed: dict[str, str]
    skipped: dict[str, str]


class PooledConvWeightsPass(Pass):
    """Optimization stage, after EpilogueFusionPass (whose ConvEpilogue nodes it rewrites alike).

    1. For each Conv or onyxia::ConvEpilogue whose input's spatial axes are all static 1 and
       whose kernel is 1x1 (group 1, stride 1, no pads; so its output is 1x1 too), with a
       constant float32 / float16 weight [M, C, 1, ...]:
    2. the node reads a new weight `<name>/kc` = W^T [C, M, 1, ...] and carries WEIGHTS_KC_ATTR
       (operators/conv/conv.py plans it as X[N, C] @ W^T). The original stays only if something
       else still reads it.
    3. Every 1x1-map convolution left alone gets its reason (ctx.reports["pooled-conv-weights"]).
    """

    name = "pooled-conv-weights"
    stage = Stage.OPTIMIZATION
    after = ("epilogue-fusion",)

    def run(self, graph: IrGraph, ctx: CompileContext) -> PassResult:
        transposed: dict[str, str] = {}
        skipped: dict[str, str] = {}
        for nid in graph.topological_order():
            node = graph.node(nid)
            if (node.domain, node.op_type) not in CONVS or node.attributes.get(WEIGHTS_KC_ATTR):
                continue
            x = graph.tensor(node.inputs[0]).shape
            if x is None or len(x) < 3 or not all(isinstance(d, int) and d == 1 for d in x[2:]):
                continue  # not over a 1x1 map: the convolution kernels' business
            if reason := _declines(graph, node):
                skipped[node.name] = reason
                continue
            w = graph.tensor(node.inputs[1])
            name = graph.fresh_name(f"{w.name}/kc")
            value = np.ascontiguousarray(w.value.swapaxes(0, 1))
            graph.add_tensor(TensorDef(name, w.dtype, tuple(value.shape), TensorKind.WEIGHT, value))
            graph.replace_node(nid, node.op_type, [name if i == 1 else t for i, t in enumerate(node.inputs)],
                               {**node.attributes, WEIGHTS_KC_ATTR: 1}, domain=node.domain)
            transposed[node.name] = name
        ctx.reports[self.name] = PooledConvReport(transposed, skipped)
        return PassResult(bool(transposed), f"{len(transposed)} pooled-map convolutions read W^T; "
                                            f"{len(skipped)} left alone")


def _declines(graph: IrGraph, node: Node) -> str | None:
    """Why a convolution over a 1x1 map keeps its weights as they are (None: it need not)."""
    w = graph.tensor(node.inputs[1])
    if node.inputs[1] in graph.inputs or w.value is None or w.value.dtype == object:
        return "its weights are not a constant"
    if w.dtype is None or w.dtype.name not in FLOATS:
        return f"its weights are {w.dtype}, not {' or '.join(FLOATS)}"
    attrs = node.attributes
    spatial = w.value.ndim - 2
    if (int(attrs.get("group", 1)) != 1 or numel(w.value.shape[2:]) != 1
            or any(int(s) != 1 for s in attrs.get("strides", [1] * spatial))
            or any(int(p) != 0 for p in attrs.get("pads", [0] * 2 * spatial))
            or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID", b"NOTSET", b"VALID")):
        return "not a 1x1 kernel with group 1, stride 1 and no pads"
    return None


__all__ = ["PooledConvReport", "PooledConvWeightsPass"]
