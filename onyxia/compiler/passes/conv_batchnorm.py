"""ConvBatchNormPass: an inference BatchNormalization after a Conv folds into the Conv's weights.

Exporters usually fold it themselves (torch.onnx at its defaults), but not always: TorchScript
with `do_constant_folding=False`, or a graph written by hand, keeps Conv -> BatchNormalization.
Left as it is, the BatchNormalization is a dispatch of its own over the whole feature map, and it
stands between the Conv and the activation that EpilogueFusionPass would move into the Conv.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onyxia.compiler.pass_api import CompileContext, Pass, PassResult, Stage
from onyxia.ir.graph import IrGraph, Node, NodeId, TensorDef, TensorKind

FLOATS = ("float32", "float16")  # numpy floats: the fold computes in float64


@dataclass(frozen=True)
class ConvBatchNormReport:
    """{BatchNormalization node: the Conv it folded into}, {BatchNormalization node: why not}."""

    folded: dict[str, str]
    skipped: dict[str, str]


class ConvBatchNormPass(Pass):
    """Optimization stage, before the fusion passes.

    1. For each BatchNormalization in inference mode (training_mode 0, one output; `spatial` 1
       before opset 9) with constant scale, B, mean and var, whose input is the output of a
       Conv read by it alone (not a graph output), whose weights and bias (if any) are
       constants of the same float dtype:
       s = scale / sqrt(var + epsilon), W' = W * s per output channel, B' = (B - mean) * s + B_bn
       (computed in float64, stored in W's dtype).
    2. The Conv takes W' and B' (new weights: the old ones may have other readers) and writes
       the BatchNormalization's output; the BatchNormalization goes.
    3. Every BatchNormalization left alone gets its reason (ctx.reports["conv-batchnorm"]).
    """

    name = "conv-batchnorm"
    stage = Stage.OPTIMIZATION

    def run(self, graph: IrGraph, ctx: CompileContext) -> PassResult:
        folded: dict[str, str] = {}
        skipped: dict[str, str] = {}
        for nid in graph.topological_order():
            if not graph.has_node(nid):
                continue
            node = graph.node(nid)
            if node.domain not in ("", "ai.onnx") or node.op_type != "BatchNormalization":
                continue
            found = _match(graph, ctx, node)
            if isinstance(found, str):
                skipped[node.name] = found
                continue
            folded[node.name] = graph.node(found).name
            _fold(graph, found, nid)
        ctx.reports[self.name] = ConvBatchNormReport(folded, skipped)
        return PassResult(bool(folded), f"{len(folded)} BatchNormalizations folded into Convs; "
                                        f"{len(skipped)} left alone")


def _constant(graph: IrGraph, t: str | None) -> np.ndarray | None:
    if t is None or t in graph.inputs:
        return None
    value = graph.tensor(t).value
    return None if value is None or value.dtype == object else value


def _match(graph: IrGraph, ctx: CompileContext, bn: Node) -> NodeId | str:
    """The Conv node the BatchNormalization folds into, or why it does not."""
    if int(bn.attributes.get("training_mode", 0)) or len([o for o in bn.outputs if o]) != 1:
        return "it computes training-mode statistics"
    if not int(bn.attributes.get("spatial", 1)):
        return "spatial=0: statistics per element, not per channel"
    if len(bn.inputs) != 5 or any(_constant(graph, t) is None for t in bn.inputs[1:]):
        return "its scale, B, mean or var is not a constant"
    x = bn.inputs[0]
    producer = graph.producer(x)
    conv = graph.node(producer) if producer is not None else None
    if conv is None or conv.domain not in ("", "ai.onnx") or conv.op_type != "Conv":
        return f"its input is not a Conv's output (it is {conv.op_type if conv else 'a graph input'}'s)"
    if x in graph.outputs or len(graph.consumers(x)) != 1:
        return f"the Conv's output is read by {len(graph.consumers(x))} nodes or is a graph output"
    dtype = graph.tensor(x).dtype
    if dtype is None or dtype.name not in FLOATS or graph.tensor(bn.outputs[0]).dtype != dtype:
        return f"the Conv's output is {dtype}, not a float of the BatchNormalization's dtype"
    params = [t for t in conv.inputs[1:3] if t is not None]
    if any(_constant(graph, t) is None or graph.tensor(t).dtype != dtype for t in params):
        return "the Conv's weights or bias are not constants of its dtype"
    maps = _constant(graph, conv.inputs[1]).shape[0]
    if any(_constant(graph, t).size != maps for t in bn.inputs[1:]):
        return f"its parameters do not have the Conv's {maps} output channels"
    return producer


def _fold(graph: IrGraph, cid: NodeId, bid: NodeId) -> None:
    conv, bn = graph.node(cid), graph.node(bid)
    scale, shift, mean, var = (_constant(graph, t).astype(np.float64).reshape(-1) for t in bn.inputs[1:])
    s = scale / np.sqrt(var + float(bn.attributes.get("epsilon", 1e-5)))
    w = graph.tensor(conv.inputs[1])
    bias = conv.inputs[2] if len(conv.inputs) > 2 else None
    b = _constant(graph, bias).astype(np.float64) if bias is not None else np.zeros_like(s)
    new_w = (w.value.astype(np.float64) * s.reshape((-1,) + (1,) * (w.value.ndim - 1))).astype(w.value.dtype)
    new_b = ((b - mean) * s + shift).astype(w.value.dtype)
    names = []
    for hint, value in ((f"{conv.inputs[1]}/bn", new_w), (f"{bias or conv.name + '.bias'}/bn", new_b)):
        names.append(graph.fresh_name(hint))
        graph.add_tensor(TensorDef(names[-1], w.dtype, tuple(value.shape), TensorKind.WEIGHT, value))
    out = graph.tensor(bn.outputs[0])
    x, attrs, name = conv.inputs[0], dict(conv.attributes), conv.name
    graph.remove_node(bid)
    graph.remove_node(cid)
    if out.name not in graph.tensors:
        graph.add_tensor(out)
    graph.add_node("Conv", [x, *names], [out.name], attrs, name=name)


__all__ = ["ConvBatchNormPass", "ConvBatchNormReport"]
