"""DeadCodeEliminationPass: drop nodes that neither produce an output nor feed one."""

from __future__ import annotations

from onyxia.compiler.pass_api import CompileContext, Pass, Stage
from onyxia.ir.graph import IrGraph


class DeadCodeEliminationPass(Pass):
    """1. Removes every node from which no graph output is reachable (networkx ancestors).
    2. Removes folded nodes (all outputs valued): their values stay in the tensor table.
    """

    name = "dead-code-elimination"
    stage = Stage.OPTIMIZATION

    def run(self, graph: IrGraph, ctx: CompileContext) -> bool:
        live = graph.live_nodes()
        dead = [n.id for n in graph.nodes
                if n.id not in live or all(graph.tensor(o).value is not None for o in n.outputs)]
        ctx.folded_nodes += sum(1 for n in dead if n in live)
        for nid in dead:
            graph.remove_node(nid)
        return bool(dead)
