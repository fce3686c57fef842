"""ElementwiseFusionPass: merge trees of float elementwise ops into one dispatch."""

from __future__ import annotations

import re
from dataclasses import dataclass

from onyxia.compiler.pass_api import CompileContext, Pass, PassResult, Stage
from onyxia.ir.graph import IrGraph, NodeId
from onyxia.operators.base import InferenceCtx
from onyxia.operators.elementwise.elementwise import FLOAT, MAX_MAP_INPUTS, BinaryElementwise, UnaryElementwise, kind
from onyxia.operators.elementwise.fused import FUSED_DOMAIN
from onyxia.operators.registry import resolve_operator

_OPERAND = re.compile(r"\bx(\d+)\b")


@dataclass(frozen=True)
class FusionReport:
    """{fused node: the nodes it absorbed}, {"member <- producer": why the producer stayed apart}."""

    fused: dict[str, list[str]]
    declined: dict[str, str]


class ElementwiseFusionPass(Pass):
    """1. Finds fusible nodes: table elementwise ops (BinaryElementwise / UnaryElementwise) over
       float tensors whose output has the input's dtype (no comparisons, no Pow's mixed types,
       no legacy broadcast attributes).
    2. From each fusible root (reverse topological order) absorbs producers whose output feeds
       only that group and is not a graph output, while the group reads at most
       MAX_MAP_INPUTS distinct tensors.
    3. Every producer of a group member it does not absorb, it reports why (a FusionReport in
       ctx.reports["elementwise-fusion"], keyed by the member).
    4. Rewrites the root into an onyxia::FusedElementwise node whose `exprs` program evaluates
       the group (attribute params renamed per member, e.g. ALPHA() → ALPHA_2()), and removes
       the absorbed nodes.
    The generated kernel is specialized per chain (codegen, not an interpreter), so it keeps
    the per-op kernels' tight loop while saving the intermediate round trips.

    Broadcasting never stops a group: elementwise ops commute with it, so each external input
    is read through its own broadcast strides (x[b, s, h] * w[h] + y[b, 1, h] is one kernel), and
    a member whose output is smaller than the group's (Exp of y[b, 1, h]) is evaluated per output
    element, recomputing a cheap value instead of writing and reading it back.

    A group computes in f32 and rounds once, to its output's dtype. A Cast that widens a float
    (float16 / bfloat16 → float32) joins a group as the identity, so `Mul(f16) → Cast(f32)`
    keeps the product unrounded: what onnxruntime's CPU provider computes (it has no float16
    Mul, runs it in float32 and removes the Cast pair around it), and what float16 LLM folders
    (Gemma's embedding scale) need to reproduce its tokens.
    """

    name = "elementwise-fusion"
    stage = Stage.OPTIMIZATION

    def run(self, graph: IrGraph, ctx: CompileContext) -> PassResult:
        absorbed: set[NodeId] = set()
        fused: dict[str, list[str]] = {}
        self.declined: dict[str, str] = {}
        order = graph.topological_order()
        # Members' order in a group from this one order (groups hold nodes of the graph as it
        # was; _rewrite recomputes it for one that does not): recomputing the whole graph's
        # order for each group was 0.3 s of efficientnet_b0's compile.
        self._rank = {n: i for i, n in enumerate(order)}
        for root in reversed(order):
            if root in absorbed or self._expression(graph, ctx, root) is None:
                continue
            group = self._grow(graph, ctx, root, absorbed)
            if len(group) < 2:
                continue
            fused[graph.node(root).name] = [graph.node(n).name for n in group[1:]]
            self._rewrite(graph, ctx, root, group)
            absorbed.update(group)
        ctx.reports[self.name] = FusionReport(fused, self.declined)
        return PassResult(bool(fused), f"{len(fused)} fused groups; {len(self.declined)} producers kept apart")

    def _why_not(self, graph: IrGraph, ctx: CompileContext, tid: str, producer: NodeId | None,
                 members: set[NodeId], absorbed: set[NodeId]) -> str | None:
        """Why `producer` of `tid` cannot join the group `members` (None: it can, shapes allowing)."""
        if producer is None or producer in members:
            return None if producer is not None else "no producer"
        if producer in absorbed:
            return "already in another fused group"
        if tid in graph.outputs:
            return f"'{tid}' is a graph output"
        if any(c not in members for c in graph.consumers(tid)):
            return f"'{tid}' is also read outside the group"
        if self._expression(graph, ctx, producer) is None:
            return f"{graph.node(producer).op_type} is not a float elementwise table op"
        if len(self._external(graph, members | {producer})) > MAX_MAP_INPUTS:
            return f"the group would read more than {MAX_MAP_INPUTS} tensors"
        return None

    def _expression(self, graph: IrGraph, ctx: CompileContext, nid: NodeId):
        """(op, ctx, wgsl, params) if `nid` can join a fused group, else None."""
        node = graph.node(nid)
        if self._widening_cast(graph, nid):
            return None, "x0", {}
        op = resolve_operator(graph, ctx.registry, node)
        if not isinstance(op, (BinaryElementwise, UnaryElementwise)) or op.row.exponent or op.row.result != "same":
            return None
        if len(node.outputs) != 1 or "broadcast" in node.attributes or "axis" in node.attributes:
            return None
        out = graph.tensor(node.outputs[0])
        if out.value is not None or out.dtype is None or kind(out.dtype) != FLOAT:
            return None
        if any(t is None or graph.tensor(t).dtype != out.dtype for t in node.inputs):
            return None
        node_ctx = InferenceCtx(graph, node, ctx)
        attrs = op.attrs(node_ctx)
        wgsl = op.expr(node_ctx, attrs, out.dtype)
        return op, wgsl, op.params(attrs, wgsl)

    @staticmethod
    def _widening_cast(graph: IrGraph, nid: NodeId) -> bool:
        """A Cast from a narrower float to float32 (exact: f32 holds every f16 / bf16 value)."""
        node = graph.node(nid)
        if node.op_type != "Cast" or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
            return False
        source, out = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
        return (out.value is None and out.dtype is not None and out.dtype.name == "float32"
                and source.dtype is not None and source.dtype.name in ("float16", "bfloat16"))

    def _grow(self, graph: IrGraph, ctx: CompileContext, root: NodeId, absorbed: set[NodeId]) -> list[NodeId]:
        group = [root]
        members = {root}
        frontier = [root]
        while frontier:
            nid = frontier.pop()
            for tid in graph.node(nid).inputs:
                producer = graph.producer(tid) if tid is not None else None
                if producer is None or producer in members or graph.tensor(tid).value is not None:
                    continue
                if reason := self._why_not(graph, ctx, tid, producer, members, absorbed):
                    self.declined[f"{graph.node(nid).name} <- {graph.node(producer).name}"] = reason
                    continue
                members.add(producer)
                group.append(producer)
                frontier.append(producer)
        return group

    @staticmethod
    def _external(graph: IrGraph, members: set[NodeId]) -> list[str]:
        produced = {o for m in members for o in graph.node(m).outputs}
        seen: dict[str, None] = {}
        for m in sorted(members):
            for t in graph.node(m).inputs:
                if t is not None and t not in produced:
                    seen[t] = None
        return list(seen)

    def _rewrite(self, graph: IrGraph, ctx: CompileContext, root: NodeId, group: list[NodeId]) -> None:
        if all(n in self._rank for n in group):
            order = sorted(group, key=self._rank.__getitem__)
        else:  # a node this pass made (none of the groups seen so far): the graph's order now
            order = [n for n in graph.topological_order() if n in set(group)]
        inputs = self._external(graph, set(group))
        slot = {t: f"x{k}" for k, t in enumerate(inputs)}
        exprs, param_names, param_values, ops = [], [], [], []
        for j, nid in enumerate(order):
            node = graph.node(nid)
            _op, wgsl, params = self._expression(graph, ctx, nid)  # type: ignore[misc]
            operands = [slot[t] for t in node.inputs]  # type: ignore[index]
            text = _OPERAND.sub(lambda m: operands[int(m.group(1))], wgsl)
            for name, value in params.items():  # each member's attribute params get their own name
                text = re.sub(rf"\b{name}\(\)", f"{name}_{j}()", text)
                param_names.append(f"{name}_{j}")
                param_values.append(value)
            exprs.append(text)
            slot[node.outputs[0]] = f"v{j}"
            ops.append(node.op_type)
        graph.replace_node(root, "FusedElementwise", inputs,
                           {"exprs": exprs, "param_names": param_names, "param_values": param_values,
                            "signature": "_".join(ops), "fused": [graph.node(n).name for n in order],
                            "dtype": graph.tensor(graph.node(root).outputs[0]).dtype.name},
                           domain=FUSED_DOMAIN)
        for nid in group:
            if nid != root:
                graph.remove_node(nid)
