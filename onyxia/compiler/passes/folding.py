"""ConstantFoldingPass: compute on the host every node whose inputs are all known."""

from __future__ import annotations

from onyxia.compiler.pass_api import CompileContext, Pass, Stage
from onyxia.compiler.passes.inference import fold_node
from onyxia.ir.graph import IrGraph
from onyxia.operators.registry import resolve_operator

# Folding a huge constant (say, a broadcast to 1 GB) would bloat the plan; let the GPU do it.
FOLD_MAX_ELEMENTS = 1 << 24


class ConstantFoldingPass(Pass):
    """1. In topological order, calls `fold` for each node whose present inputs all have values.
    2. Stores the numpy results in the outputs' `TensorDef.value`; planning then skips the node.
    """

    name = "constant-folding"
    stage = Stage.FOLDING

    def run(self, graph: IrGraph, ctx: CompileContext) -> bool:
        modified = False
        for nid in graph.topological_order():
            node = graph.node(nid)
            op = resolve_operator(graph, ctx.registry, node)
            assert op is not None, "ShapeInferencePass checked support"
            modified |= fold_node(graph, ctx, op, node, FOLD_MAX_ELEMENTS)
        return modified
