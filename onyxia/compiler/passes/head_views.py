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


def _one_value(graph: IrGraph, tid: str | None, floating: bool) -> object | None:
    """The value of a constant of one element, float or integer as asked, else None."""
    t = graph.tensor(tid) if tid else None
    if t is None or t.value is None or t.value.dtype == object or t.value.size != 1 or t.dtype.is_float != floating:
        return None
    return t.value.reshape(())


def constant(graph: IrGraph, tid: str | None) -> float | None:
    """The value of a float constant of one element."""
    value = _one_value(graph, tid, True)
    return None if value is None else float(value)


def constant_int(graph: IrGraph, tid: str | None) -> int | None:
    """The value of an integer constant of one element."""
    value = _one_value(graph, tid, False)
    return None if value is None else int(value)


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
        elif node.op_type in ("Squeeze", "Gather") and perm[3] == 3:
            part = _projection_part(graph, node, tid, perm)
            if part is not None:
                base, view = part
                while scaled and (producer := graph.producer(base)) is not None \
                        and (factor := scalar_factor(graph, graph.node(producer))) is not None:
                    base, scale = factor[0], scale * factor[1]
                return Operand(base, view, scale)
            return best
        else:
            return best


def _projection_part(graph: IrGraph, node: Node, tid: str, perm: list[int]) -> tuple[str, View] | None:
    """`tid` (4-D, logical axis i at its axis perm[i]) as part p of a fused projection's output
    X [B, S, parts * H * D], where timm's Attention (and torch's unbind of a packed QKV) takes
    it: Reshape(X, [B, S, parts, H, D]) -> Transpose with the parts axis first (perm[0] = 2, D
    kept last) -> Split(axis 0) into ones -> Squeeze(axis 0) output p, or Gather(axis 0, index p).
    Then X's last axis splits into D-wide heads, parts x H of them, this operand's H from p x H
    on (View.part / parts)."""
    if node.op_type == "Squeeze":
        axes = node.attributes.get("axes")
        if axes is None and len(node.inputs) > 1 and node.inputs[1]:
            value = graph.tensor(node.inputs[1]).value
            axes = None if value is None or value.dtype == object else value.reshape(-1).tolist()
        if axes is None or [int(a) for a in axes] != [0]:
            return None
        split_id = graph.producer(node.inputs[0])
        split = graph.node(split_id) if split_id is not None else None
        if split is None or (split.domain, split.op_type) != ("", "Split") or int(split.attributes.get("axis", 0)) != 0:
            return None
        if any(graph.tensor(o).shape is None or graph.tensor(o).shape[0] != 1 for o in split.outputs if o):
            return None  # parts of one each
        part = split.outputs.index(node.inputs[0])
        transposed = split.inputs[0]
    else:  # Gather(T, p) along axis 0
        index = constant_int(graph, node.inputs[1])
        if int(node.attributes.get("axis", 0)) != 0 or index is None or index < 0:
            return None
        part, transposed = index, node.inputs[0]
    t_id = graph.producer(transposed)
    t = graph.node(t_id) if t_id is not None else None
    if t is None or (t.domain, t.op_type) != ("", "Transpose"):
        return None
    t_perm = [int(p) for p in t.attributes.get("perm", ())]
    if len(t_perm) != 5 or t_perm[0] != 2 or t_perm[4] != 4:
        return None
    r_id = graph.producer(t.inputs[0])
    r = graph.node(r_id) if r_id is not None else None
    if r is None or (r.domain, r.op_type) != ("", "Reshape"):
        return None
    x, shaped = graph.tensor(r.inputs[0]).shape, graph.tensor(r.outputs[0]).shape
    if x is None or shaped is None or len(x) != 3 or len(shaped) != 5:
        return None
    b, s, parts, heads, d = shaped
    if (x[0] != b or x[1] != s or not all(isinstance(v, int) for v in (parts, heads, d))
            or x[2] != parts * heads * d or not 0 <= part < parts):
        return None
    # operand axis j is the Transpose's axis j + 1, the Reshape's axis t_perm[j + 1]; those are,
    # seen as X split into D-wide heads [B, S, parts * H, D]: 0 -> 0, 1 -> 1, 3 -> 2, 4 -> 3
    as_x = {0: 0, 1: 1, 3: 2, 4: 3}
    shaped_axis = [t_perm[perm[i] + 1] for i in range(4)]
    if any(a not in as_x for a in shaped_axis):
        return None
    view = View(d, tuple(as_x[a] for a in shaped_axis), part, parts)  # type: ignore[arg-type]
    return (r.inputs[0], view) if view.perm[1] == 2 else None  # the heads are the head axis


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
