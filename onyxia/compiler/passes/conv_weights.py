"""ConvWeightsPass: constant Conv weights stored k-major, the order the register-tiled conv
kernels read as vec4s (operators/conv/cpu.py says why, with the measurement).

Every kernel of a Conv reads the layout (def W_KMAJOR; a pointwise conv's matrix product reads
W as a transposed A), so one plan serves every adapter.
"""

from __future__ import annotations

from dataclasses import dataclass

from onyxia.compiler.pass_api import CompileContext, Pass, PassResult, Stage
from onyxia.ir.graph import IrGraph, TensorDef, TensorKind
from onyxia.ir.shapes import numel
from onyxia.operators.conv.conv import WEIGHTS_KC_ATTR
from onyxia.operators.conv.cpu import KMAJOR_ATTR, STRIP_ATTR, kmajor_strip, to_kmajor
from onyxia.operators.conv.pointwise import patch_attrs
from onyxia.operators.elementwise.fused import FUSED_DOMAIN

CONVS = {("", "Conv"), ("ai.onnx", "Conv"), (FUSED_DOMAIN, "ConvEpilogue")}
FLOATS = ("float32", "float16", "bfloat16")
SMALL_OUTPUT = 16  # a static output map of fewer positions (squeeze-excite 1x1 convs): left as is


@dataclass(frozen=True)
class ConvWeightsReport:
    """{weight: the Conv nodes now reading it k-major}, {weight: why it stays as it is}."""

    kmajor: dict[str, list[str]]
    skipped: dict[str, str]


class ConvWeightsPass(Pass):
    """Optimization stage, after epilogue fusion.

    1. Finds each constant float weight (input 1) of a Conv, read by no other node.
    2. Requires M / group to be a multiple of 4 (vec4 loads of one patch row's channels) and
       an output map that is not a static handful of positions (a pointwise conv over a pooled
       1x1 map runs as a matrix-vector product, which reads W row-major best).
    3. Stores the weight k-major as `<name>/kmajor` (same shape), in strips of STRIP_ATTR
       output channels where the kernel has more than one tap (cpu.kmajor_strip), and sets
       KMAJOR_ATTR and STRIP_ATTR on its Conv; the reason for every weight left alone goes to
       ctx.reports["conv-weights"].
    """

    name = "conv-weights"
    stage = Stage.OPTIMIZATION
    after = ("split-large-tensors", "epilogue-fusion", "pooled-conv-weights")

    def run(self, graph: IrGraph, ctx: CompileContext) -> PassResult:
        done: dict[str, list[str]] = {}
        skipped: dict[str, str] = {}
        for nid in graph.topological_order():
            node = graph.node(nid)
            if ((node.domain, node.op_type) not in CONVS or len(node.inputs) < 2 or KMAJOR_ATTR in node.attributes
                    or node.attributes.get(WEIGHTS_KC_ATTR)):  # a pooled map's W^T (passes/pooled_conv.py)
                continue
            weight = node.inputs[1]
            reason = _declines(graph, nid, weight)
            if reason:
                skipped[weight] = reason
                continue
            t = graph.tensor(weight)
            group = int(node.attributes.get("group", 1))
            strip = kmajor_strip(t.value.shape[0] // group, numel(t.value.shape[2:]))
            if patch_attrs(tuple(t.value.shape[2:]), node.attributes):
                strip = t.value.shape[0]  # plainly k-major: the patches' matrix product reads W^T
            name = graph.fresh_name(f"{weight}/kmajor")
            graph.add_tensor(TensorDef(name, t.dtype, tuple(t.value.shape), TensorKind.WEIGHT,
                                       to_kmajor(t.value, group, strip)))
            graph.replace_node(nid, node.op_type, [name if i == 1 else x for i, x in enumerate(node.inputs)],
                               {**node.attributes, KMAJOR_ATTR: 1, STRIP_ATTR: strip}, domain=node.domain)
            done[weight] = [node.name]
        ctx.reports[self.name] = ConvWeightsReport(done, skipped)
        return PassResult(bool(done), f"{len(done)} conv weights k-major; {len(skipped)} left as they are")


def _declines(graph: IrGraph, nid, weight: str) -> str | None:
    """Why `weight` of Conv `nid` stays as it is, or None."""
    t = graph.tensor(weight)
    if t.value is None:
        return "it is computed on the device"
    if weight in graph.inputs or weight in graph.outputs:
        return "it is a graph input or output"
    if t.dtype is None or t.dtype.name not in FLOATS or t.value.dtype == object:
        return f"it is {t.dtype}: only float convolutions read it k-major"
    if len(graph.consumers(weight)) != 1:
        return "other nodes read it too"
    node = graph.node(nid)
    group = int(node.attributes.get("group", 1))
    if t.value.ndim < 3 or t.value.shape[0] % group or (t.value.shape[0] // group) % 4:
        return f"M / group = {t.value.shape[0]} / {group} is not a multiple of 4"
    out = graph.tensor(node.outputs[0]).shape
    if out is None:
        return "its output shape is unknown"
    spatial = numel(out[2:])
    if isinstance(spatial, int) and spatial < SMALL_OUTPUT:
        return f"its output map has {spatial} positions: a matrix-vector product reads W row-major best"
    return None


__all__ = ["ConvWeightsPass", "ConvWeightsReport"]
