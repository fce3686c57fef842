"""AttentionFusionPass: attention spelled out by torch's exporters becomes one FusedAttention node.

transformers' encoders (BERT, ViT, Whisper, CLIP) export attention as MatMul(Q, K^T), a scale
(Div or Mul after the MatMul, or sqrt(scale) on Q and K each: torch's sdpa decomposition), an
Add of a mask (BERT; absent in ViT and Whisper), Softmax over the keys, sometimes a NaN guard
(Where(IsNaN(p), 0, p), sdpa) or a no-op Cast, and MatMul(., V). Run as written that is five or
more dispatches, the [B, H, S, T] scores written and read three times, plus a Transpose each for
Q, K, V and the output. FusedAttention (operators/attention/fused.py) does it in one kernel and
reads Q, K, V and writes Y through their head-splitting Reshape/Transpose views.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onyxia.compiler.pass_api import CompileContext, Pass, Stage
from onyxia.compiler.passes.head_views import SWAP, constant, head_view, scalar_factor
from onyxia.ir.graph import IrGraph, Node
from onyxia.operators.attention.fused import FLASH_MAX_KEYS, View
from onyxia.operators.elementwise.fused import FUSED_DOMAIN


@dataclass
class AttentionReport:
    """ctx.reports["attention-fusion"]: the Softmax nodes fused, and why the others were not."""

    fused: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


class AttentionFusionPass(Pass):
    """Optimization stage, before elementwise and epilogue fusion. For each Softmax over the last
    axis of a 4-D float tensor:

    1. the scores: Softmax(x) where x = [Add(s, mask) |] s and s = MatMul(Q, KT) under any scalar
       constant Mul/Div; each link read only by the next;
    2. the probabilities: Softmax -> [Cast to the same type] -> [Where(IsNaN(p), 0, p)] ->
       MatMul(p, V);
    3. Q, KT and V read through views: scalar constant Mul/Div (folded into the scale),
       Transposes, a Reshape splitting [B, S, H * D] into heads, and the Reshape-Transpose-Reshape
       round trip the dynamo exporter writes for K^T, as long as the head axis stays contiguous;
    4. the output: MatMul -> [Transpose(0, 2, 1, 3) -> [Reshape to [B, S, H * D]]] is written in
       the layout of the last node absorbed, which becomes the FusedAttention node.

    The mask must be float, of rank <= 4, broadcast over batch/heads/rows only (its last axis is
    the keys'); a literal key count must not pass max_static_keys. What it leaves alone is in
    the report with the reason.
    """

    name = "attention-fusion"
    stage = Stage.OPTIMIZATION
    after = ("div-mul-fusion",)
    # Attention over more keys than this, known at compile time, stays spelled out: the fused
    # kernels that split long key rows (all but the flash kernel, which walks up to this many)
    # lost to the matmul kernels on lavapipe (Whisper's encoder, 1500 keys: 0.85x fused), the
    # flash kernel wins (1472 -> 1201 ms). A symbolic key count is fused.
    max_static_keys = FLASH_MAX_KEYS

    def run(self, graph: IrGraph, ctx: CompileContext) -> bool:
        report = AttentionReport()
        for nid in graph.topological_order():
            if not graph.has_node(nid):
                continue
            node = graph.node(nid)
            if (node.domain, node.op_type) != ("", "Softmax"):
                continue
            reason = self._fuse(graph, node)
            if reason is None:
                report.fused.append(node.name)
            else:
                report.skipped[node.name] = reason
        ctx.reports[self.name] = report
        return bool(report.fused)

    def _fuse(self, graph: IrGraph, softmax: Node) -> str | None:
        """Rewrite the attention around `softmax`; the reason when it is not one."""
        x = graph.tensor(softmax.inputs[0])
        if x.shape is None or len(x.shape) != 4 or x.dtype is None or not x.dtype.is_float:
            return "the scores are not a 4-D float tensor"
        if softmax.attributes.get("axis", -1 if graph.opset_of(softmax) >= 13 else 1) % 4 != 3:
            return "Softmax is not over the last axis"
        if isinstance(x.shape[3], int) and x.shape[3] > self.max_static_keys:
            return f"{x.shape[3]} keys, over max_static_keys ({self.max_static_keys})"
        # 1. backwards: mask Add, scales, the Q K^T MatMul
        scale, mask = 1.0, None
        tid = softmax.inputs[0]
        while True:
            node = _sole_producer(graph, tid)
            if node is None:
                return "the scores do not come from a MatMul read only by the softmax chain"
            factor = scalar_factor(graph, node)
            if factor is not None:
                scale, tid = scale * factor[1], factor[0]
            elif node.op_type == "Add" and mask is None and len(node.inputs) == 2:
                tid, mask = _split_mask(graph, node, x.shape)
                if tid is None:
                    return mask or "the Add before Softmax is not a mask"
            elif node.op_type == "MatMul":
                break
            else:
                return f"{node.op_type} between the scores MatMul and Softmax"
        scores = node
        # 2. forwards: Cast, NaN guard, the MatMul by V
        tail = _probabilities(graph, softmax)
        if isinstance(tail, str):
            return tail
        pv = tail
        # 3. operands
        q = head_view(graph, scores.inputs[0], (0, 1, 2, 3))
        k = head_view(graph, scores.inputs[1], SWAP)
        v = head_view(graph, pv.inputs[1], (0, 1, 2, 3), scaled=False)
        for name, op in (("Q", q), ("K", k), ("V", v)):
            if op is None:
                return f"{name} is not a 4-D tensor whose head axis is contiguous"
        # 4. the output layout
        last, y_view = _output(graph, pv)
        graph.replace_node(last.id, "FusedAttention", [q.tensor, k.tensor, v.tensor, *([mask] if mask else [])],
                           {"scale": scale * q.scale * k.scale, "q_view": q.view.encode(),
                            "k_view": k.view.encode(), "v_view": v.view.encode(), "y_view": y_view.encode()},
                           domain=FUSED_DOMAIN)
        return None


def _sole_producer(graph: IrGraph, tid: str) -> Node | None:
    """The ONNX-domain node producing `tid` when `tid` is read by one node only."""
    nid = graph.producer(tid)
    if nid is None or tid in graph.outputs or len(graph.consumers(tid)) != 1:
        return None
    node = graph.node(nid)
    return node if node.domain == "" else None


def _split_mask(graph: IrGraph, add: Node, scores: tuple) -> tuple[str | None, str | None]:
    """(the scores operand, the mask) of the Add before Softmax; (None, reason) if it is no mask."""
    for s, m in (add.inputs, add.inputs[::-1]):
        if graph.tensor(s).shape != scores:
            continue
        mask = graph.tensor(m)
        shape = mask.shape
        if mask.dtype != graph.tensor(s).dtype or shape is None or not 1 <= len(shape) <= 4:
            return None, "the mask is not a float tensor of rank <= 4"
        if shape[-1] != scores[-1]:
            return None, "the mask broadcasts over the keys"
        for d, full in zip(shape[::-1], scores[::-1]):
            if d != full and d != 1:
                return None, f"the mask's shape {shape} does not broadcast to the scores' {scores}"
        return s, m
    return None, None


def _probabilities(graph: IrGraph, softmax: Node) -> Node | str:
    """The MatMul(p, V) that reads the softmax, through a no-op Cast and the NaN guard."""
    p = softmax.outputs[0]
    dtype = graph.tensor(p).dtype
    for _ in range(3):
        if p in graph.outputs:
            return "the probabilities are a graph output"
        users = [graph.node(n) for n in graph.consumers(p)]
        ops = sorted(u.op_type for u in users)
        if ops == ["MatMul"] and users[0].inputs[0] == p and users[0].domain == "":
            return users[0]
        if ops == ["Cast"] and graph.tensor(users[0].outputs[0]).dtype == dtype:
            p = users[0].outputs[0]
        elif ops == ["IsNaN", "Where"]:
            isnan, where = sorted(users, key=lambda u: u.op_type)
            guard = isnan.outputs[0]
            if (where.inputs[0] != guard or where.inputs[2] != p or constant(graph, where.inputs[1]) != 0.0
                    or graph.consumers(guard) != [where.id] or guard in graph.outputs):
                return "the softmax is read by IsNaN/Where other than as the NaN guard"
            p = where.outputs[0]
        else:
            return f"the probabilities are read by {', '.join(ops) or 'nothing'}, not one MatMul"
    return "the softmax does not reach a MatMul"


def _output(graph: IrGraph, pv: Node) -> tuple[Node, View]:
    """The last node of MatMul -> [Transpose(0, 2, 1, 3) -> [Reshape to 3-D]] and its layout."""
    node, view = pv, View(0, (0, 1, 2, 3))
    shape = graph.tensor(pv.outputs[0]).shape
    nxt = _sole_consumer(graph, pv.outputs[0])
    if nxt is None or nxt.op_type != "Transpose" or list(nxt.attributes.get("perm", ())) != [0, 2, 1, 3]:
        return node, view
    node, view = nxt, View(0, (0, 2, 1, 3))
    after = _sole_consumer(graph, nxt.outputs[0])
    out = graph.tensor(after.outputs[0]).shape if after is not None and after.op_type == "Reshape" else None
    if out is not None and len(out) == 3 and isinstance(shape[3], int) and out[0] == shape[0] \
            and out[1] == shape[2] and out[2] == shape[1] * shape[3]:
        return after, View(shape[3], (0, 2, 1, 3))
    return node, view


def _sole_consumer(graph: IrGraph, tid: str) -> Node | None:
    users = graph.consumers(tid)
    if tid in graph.outputs or len(users) != 1:
        return None
    node = graph.node(users[0])
    return node if node.domain == "" else None


__all__ = ["AttentionFusionPass", "AttentionReport"]
