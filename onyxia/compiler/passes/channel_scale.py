"""ChannelScalePass: a convolution reads a squeeze-excite gate where it loads its input.

A squeeze-excite block (MobileNetV3, EfficientNet, RegNetY; torchvision's
SqueezeExcitation) ends with Mul(x, gate), gate = activation(fc2(...)) of shape [N, C, 1, 1],
and the block's projection Conv reads the product: one dispatch reading and writing the whole
activation between two convolutions (lavapipe, per-dispatch medians: efficientnet_b0's 16 such
Muls 10.7 % of its run, mobilenet_v3_small's 9 9.5 %). The Conv this pass writes takes the gate
as an input instead (operators/conv/scale.py CHANNEL_SCALE_ATTR): its kernels multiply each
input channel by its scale as they load it. The gate's activation is then the only reader of
fc2's output, which EpilogueFusionPass fuses into it.
"""

from __future__ import annotations

from dataclasses import dataclass

from onyxia.compiler.pass_api import CompileContext, Pass, PassResult, Stage, nodes_of
from onyxia.ir.graph import IrGraph, Node
from onyxia.operators.conv.scale import CHANNEL_SCALE_ATTR

BIAS = 2  # the Conv input before the gate's (absent biases padded)


@dataclass(frozen=True)
class ChannelScaleReport:
    """{Conv node: the gate it reads}."""

    fused: dict[str, str]


class ChannelScalePass(Pass):
    """Optimization stage, after BatchNorm folding and before the fusion passes: for each Mul
    (default domain) of a float tensor x [N, C, *spatial] (spatial not all 1) by a gate [N or 1,
    C, 1, ...] (either order) whose product only input 0 of one Conv reads (neither a graph
    output), that Conv reads x and the gate (CHANNEL_SCALE_ATTR: the gate's input index, after
    the bias) and the Mul goes."""

    name = "channel-scale"
    stage = Stage.OPTIMIZATION
    after = ("conv-batchnorm",)

    def run(self, graph: IrGraph, ctx: CompileContext) -> PassResult:
        fused: dict[str, str] = {}
        for node in nodes_of(graph, (("", "Mul"), ("ai.onnx", "Mul"))):
            found = _match(graph, node)
            if found is None:
                continue
            conv, x, gate = found
            inputs = list(conv.inputs[:BIAS + 1]) + [None] * (BIAS + 1 - len(conv.inputs))
            inputs[0] = x
            graph.remove_node(node.id)
            graph.replace_node(conv.id, conv.op_type, [*inputs, gate],
                               {**conv.attributes, CHANNEL_SCALE_ATTR: BIAS + 1}, domain=conv.domain)
            fused[conv.name] = gate
        ctx.reports[self.name] = ChannelScaleReport(fused)
        return PassResult(bool(fused), f"{len(fused)} convolutions read their input's channel scale")


def _match(graph: IrGraph, mul: Node) -> tuple[Node, str, str] | None:
    """(the Conv reading `mul`, x, the gate) where `mul` scales x's channels for that Conv alone."""
    if len(mul.inputs) != 2 or not all(mul.inputs):
        return None
    y = mul.outputs[0]
    readers = graph.consumers(y)
    if y in graph.outputs or len(readers) != 1:
        return None
    conv = graph.node(readers[0])
    if ((conv.domain, conv.op_type) not in (("", "Conv"), ("ai.onnx", "Conv")) or len(conv.inputs) > BIAS + 1
            or conv.inputs[0] != y or conv.inputs.count(y) != 1 or conv.attributes.get(CHANNEL_SCALE_ATTR)):
        return None
    for x, gate in (mul.inputs, mul.inputs[::-1]):
        xt, gt = graph.tensor(x), graph.tensor(gate)
        if _gates(xt.shape, gt.shape) and xt.dtype is not None and xt.dtype.is_float and gt.dtype == xt.dtype:
            return conv, x, gate  # type: ignore[return-value]
    return None


def _gates(x: tuple | None, gate: tuple | None) -> bool:
    """Whether `gate` scales the channels of `x` [N, C, *spatial]: [N or 1, C, 1, ...], and x is
    not a 1x1 map itself (EfficientNet's SiLU inside the block, fc1 * Sigmoid(fc1), stays the
    epilogue of fc1)."""
    if x is None or gate is None or len(x) < 3 or len(gate) != len(x) or all(d == 1 for d in x[2:]):
        return False
    return (gate[0] == 1 or gate[0] == x[0]) and gate[1] == x[1] and all(d == 1 for d in gate[2:])


__all__ = ["ChannelScalePass", "ChannelScaleReport"]
