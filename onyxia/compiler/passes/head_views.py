"""Where the Q, K and V of a spelled-out attention really live (AttentionFusionPass): a 4-D
operand traced back through scalar Mul/Div (into a scale), Identity, no-op Casts, Transposes, the
Reshape splitting [B, S, H * D] into heads and the dynamo exporter's Reshape-Transpose-Reshape
round trip, to the tensor a FusedAttention reads in place (operators/attention/fused.py View)."""

from __future__ import annotations

from dataclasses import dataclass

from onyxia.ir.graph import IrGraph, Node
from onyxia.operators.attention.fused import View

SWAP = (0, 1, 3, 2)  # K^T <-> K


@dataclass(frozen=True)
class Operand:
    tensor: str
    view: View
    scale: float


def constant(graph: IrGraph, tid: str | None) -> float | None:
    """The value of a float constant of one element."""
    t = graph.tensor(tid) if tid else None
    if t is None or t.value is None or t.value.dtype == object or t.value.size != 1 or not t.dtype.is_float:
        return None
    return float(t.value.reshape(()))


def scalar_factor(graph: IrGraph, node: Node) -> tuple[str, float] | None:
    """(x, f) when `node` computes x * f with a scalar constant f (Mul either way, Div by it)."""
    if node.domain != "" or len(node.inputs) != 2 or None in node.inputs:
        return None
    a, b = node.inputs
    if node.op_type == "Mul":
        for x, c in ((a, b), (b, a)):
            f = constant(graph, c)
            if f is not None and graph.tensor(x).shape == graph.tensor(node.outputs[0]).shape:
                return x, f
    if node.op_type == "Div":
        f = constant(graph, b)
        if f and graph.tensor(a).shape == graph.tensor(node.outputs[0]).shape:
            return a, 1.0 / f
    return None


def head_view(graph: IrGraph, tid: str, perm: tuple[int, ...], scaled: bool = True) -> Operand | None:
    """`tid` (a 4-D tensor, logical axis i at its axis perm[i]) as a view of the tensor it is
    reshaped/transposed/scaled from (docstring rewrite 3); None when its head axis is not
    contiguous anywhere along the chain. `scaled`: look through scalar multiplications too (Q and
    K, whose factors join the scores' scale; V's would scale the output, not the scores)."""
    scale, best = 1.0, None
    perm = list(perm)
    while True:
        t = graph.tensor(tid)
        if t.shape is not None and len(t.shape) == 4 and perm[3] == 3:
            best = Operand(tid, View(0, tuple(perm)), scale)
        nid = graph.producer(tid)
        node = graph.node(nid) if nid is not None else None
        if node is None or node.domain != "":
            return best
        factor = scalar_factor(graph, node) if scaled else None
        if factor is not None:
            tid, scale = factor[0], scale * factor[1]
        elif node.op_type == "Identity" or (node.op_type == "Cast" and graph.tensor(node.inputs[0]).dtype == t.dtype):
            tid = node.inputs[0]
        elif node.op_type == "Transpose" and len(node.attributes.get("perm", ())) == 4:
            inner = node.attributes["perm"]
            perm, tid = [int(inner[p]) for p in perm], node.inputs[0]
        elif node.op_type == "Reshape":
            source = graph.tensor(node.inputs[0]).shape
            out = t.shape
            if source is None or out is None or len(out) != 4:
                return best
            if len(source) == 3 and source[0] == out[0] and source[1] == out[1] and isinstance(out[3], int) \
                    and out[2] * out[3] == source[2] and perm[3] == 3:
                base = node.inputs[0]
                while scaled and (producer := graph.producer(base)) is not None \
                        and (factor := scalar_factor(graph, graph.node(producer))) is not None:
                    base, scale = factor[0], scale * factor[1]
                return Operand(base, View(out[3], tuple(perm)), scale)
            inner = _transposed_round_trip(graph, node)
            if inner is None:
                return best
            perm, tid = [SWAP[p] for p in perm], inner
        else:
            return best


def _transposed_round_trip(graph: IrGraph, reshape: Node) -> str | None:
    """Y when `reshape` is Reshape(Transpose(Reshape(Y, [a * b, c, d]), (0, 2, 1)), [a, b, d, c])
    for a 4-D Y of shape [a, b, c, d]: Transpose(Y, (0, 1, 3, 2)) in three nodes."""
    t3 = graph.producer(reshape.inputs[0])
    t3 = graph.node(t3) if t3 is not None else None
    if t3 is None or (t3.domain, t3.op_type) != ("", "Transpose") or list(t3.attributes.get("perm", ())) != [0, 2, 1]:
        return None
    r3 = graph.producer(t3.inputs[0])
    r3 = graph.node(r3) if r3 is not None else None
    if r3 is None or (r3.domain, r3.op_type) != ("", "Reshape"):
        return None
    y = graph.tensor(r3.inputs[0]).shape
    out = graph.tensor(reshape.outputs[0]).shape
    if y is None or len(y) != 4 or tuple(out) != (y[0], y[1], y[3], y[2]):
        return None
    return r3.inputs[0]


__all__ = ["SWAP", "Operand", "constant", "head_view", "scalar_factor"]
