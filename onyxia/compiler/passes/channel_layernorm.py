"""ChannelLayerNormPass: a LayerNorm over the channels of an NCHW tensor, spelled as two
Transposes around it, becomes one node that reads the tensor where it lies.

timm's LayerNorm2d (ConvNeXt, ConvNeXt-V2, their stems and downsamples) and the channel norms of
other vision models export as Transpose(0, 2, 3, 1) -> LayerNormalization(axis -1) ->
Transpose(0, 3, 1, 2): each norm three dispatches, two of them full copies of the activation
(ConvNeXt-atto at 224x224 on lavapipe: 38 strided copies, 18.6 ms of a 95 ms run, and 17
row norms 5.1 ms more). The statistics of one position over C channels are the same read in
place, C elements HW apart: operators/normalization LayerNorm plans the node this pass writes
(LayerNormalization carrying CHANNELS_ATTR) as one strided statistics pass
(normalization/moments.wgsl, as InstanceNormalization's).
"""

from __future__ import annotations

from dataclasses import dataclass

from onyxia.compiler.pass_api import CompileContext, Pass, PassResult, Stage, nodes_of
from onyxia.ir.graph import IrGraph, Node, NodeId
from onyxia.operators.normalization.normalization import CHANNELS_ATTR


@dataclass(frozen=True)
class ChannelLayerNormReport:
    """{LayerNormalization node: its input, read in place}."""

    fused: dict[str, str]


class ChannelLayerNormPass(Pass):
    """Optimization stage, before dead-code elimination: for each LayerNormalization (default
    domain, stash_type 1, its one output Y) over the last axis of a rank r >= 3 float tensor that
    a Transpose with perm [0, 2, .., r - 1, 1] alone produced for it, whose Y only a Transpose
    with perm [0, r - 1, 1, .., r - 2] reads (neither intermediate a graph output): one
    LayerNormalization node named as the norm, reading the first Transpose's input and writing
    the second's output, with CHANNELS_ATTR set (it normalizes axis 1). The Transposes and the
    old norm are left for dead-code elimination."""

    name = "channel-layernorm"
    stage = Stage.OPTIMIZATION

    def run(self, graph: IrGraph, ctx: CompileContext) -> PassResult:
        fused: dict[str, str] = {}
        for node in nodes_of(graph, (("", "LayerNormalization"),)):
            if node.attributes.get(CHANNELS_ATTR):
                continue
            found = _chain(graph, node)
            if found is None:
                continue
            before, after = found
            x, out = before.inputs[0], after.outputs[0]
            attrs = {"axis": 1, "epsilon": node.attributes.get("epsilon", 1e-5), CHANNELS_ATTR: 1}
            inputs = [x, *node.inputs[1:]]
            name = node.name
            for dead in (after.id, node.id, before.id):
                graph.remove_node(dead)
            graph.add_node("LayerNormalization", inputs, [out], attrs, name=name)
            fused[name] = x
        ctx.reports[self.name] = ChannelLayerNormReport(fused)
        return PassResult(bool(fused), f"{len(fused)} channel LayerNorms read their NCHW input in place")


def _chain(graph: IrGraph, norm: Node) -> tuple[Node, Node] | None:
    """(the Transpose before `norm`, the one after) where they spell a norm over axis 1."""
    if len(norm.inputs) < 2 or not norm.inputs[0] or not norm.inputs[1] or norm.attributes.get("stash_type", 1) != 1:
        return None
    if len(norm.outputs) != 1 and any(norm.outputs[1:]):
        return None  # the statistics outputs are the row norm's
    x = graph.tensor(norm.inputs[0])
    rank = len(x.shape) if x.shape is not None else 0
    if rank < 3 or x.dtype is None or not x.dtype.is_float:
        return None
    if int(norm.attributes.get("axis", -1)) % rank != rank - 1:
        return None
    before = _transpose(graph, graph.producer(norm.inputs[0]), [0, *range(2, rank), 1])
    if before is None or norm.inputs[0] in graph.outputs or graph.consumers(norm.inputs[0]) != [norm.id]:
        return None
    y = norm.outputs[0]
    readers = graph.consumers(y)
    if y in graph.outputs or len(readers) != 1:
        return None
    after = _transpose(graph, readers[0], [0, rank - 1, *range(1, rank - 1)])
    return None if after is None else (before, after)


def _transpose(graph: IrGraph, nid: NodeId | None, perm: list[int]) -> Node | None:
    """The node `nid` if it is a Transpose with this `perm`, else None."""
    if nid is None:
        return None
    node = graph.node(nid)
    if (node.domain, node.op_type) != ("", "Transpose") or [int(p) for p in node.attributes.get("perm", [])] != perm:
        return None
    return node


__all__ = ["ChannelLayerNormPass", "ChannelLayerNormReport"]
