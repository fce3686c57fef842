"""IfInliningPass: an If whose condition is a constant becomes its taken branch, in the graph.

An If planned as an If (operators/control) keeps its branch in a subgraph that the optimization
passes (fusion, DCE, aliasing) never see. When the condition is an initializer — a constant of
the model, or a graph input whose fed value InferenceSession baked into the plan, as it does for
a merged decoder's `use_cache_branch` — the branch is known before inference and joins the
main graph instead, so every pass sees it.
"""

from __future__ import annotations

import numpy as np

from onyxia.compiler.pass_api import CompileContext, Pass, Stage
from onyxia.ir.graph import IrGraph, Node


def _constant_condition(graph: IrGraph, node: Node) -> bool | None:
    """The If's condition when the graph holds it as a constant (an initializer, a Constant
    node's value); None when only inference or the run can tell."""
    cond = node.inputs[0] if node.inputs else None
    if cond is None or cond not in graph.tensors:
        return None
    value = graph.tensor(cond).value
    producer = graph.producer(cond)
    if value is None and producer is not None:
        src = graph.node(producer)
        if src.op_type == "Constant" and src.domain == "" and "value" in src.attributes:
            value = src.attributes["value"]
    if not isinstance(value, np.ndarray) or value.dtype == object or value.size != 1:
        return None
    return bool(value.reshape(-1)[0])


def inline_constant_ifs(graph: IrGraph) -> bool:
    """Rewrites (top-level graph; nested Ifs of an inlined branch too):

    1. If(cond) with a constant cond: the taken branch's nodes are copied into the graph (the
       loader names them "<If>/then_branch/<node>", its tensors get that prefix here), its
       outputs reach the If's outputs through Identity (a view: no copy), and the If is removed.
    Returns whether the graph changed."""
    changed = False
    pending = [n.id for n in graph.nodes if n.op_type == "If" and n.domain == ""]
    while pending:
        nid = pending.pop()
        if not graph.has_node(nid):
            continue
        node = graph.node(nid)
        cond = _constant_condition(graph, node)
        arm = None if cond is None else ("then_branch" if cond else "else_branch")
        branch = node.attributes.get(arm) if arm else None
        if not isinstance(branch, IrGraph) or len(branch.outputs) != len(node.outputs):
            continue  # an If inference will refuse with its own error, or a run-time one
        before = graph.next_node_id
        outs = graph.inline(branch, {}, f"{node.name}/{arm}", node_prefix="")  # names carry their path
        results, name = list(node.outputs), node.name
        graph.remove_node(nid)
        for result, src in zip(results, branch.outputs):
            graph.add_node("Identity", [outs[src]], [result], name=graph.fresh_name(f"{result}/{name}"))
        pending += [n for n in range(before, graph.next_node_id)
                    if graph.has_node(n) and graph.node(n).op_type == "If" and graph.node(n).domain == ""]
        changed = True
    return changed


class IfInliningPass(Pass):
    """Resolution stage, before inference: `inline_constant_ifs` on the graph."""

    name = "if-inlining"
    stage = Stage.RESOLUTION

    def run(self, graph: IrGraph, ctx: CompileContext) -> bool:
        return inline_constant_ifs(graph)


__all__ = ["IfInliningPass", "inline_constant_ifs"]
