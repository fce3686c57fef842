"""CompilerSubgraphs: the compiler's SubgraphServices (operators/base.py), what operators that own
subgraphs (If arms, Loop and Scan bodies) get back from the compiler without importing it.

CompilerPipeline makes one per compilation and puts it in CompileContext.subgraphs; shape
inference passes it to each InferenceCtx, planning to its PlanState.
"""

from __future__ import annotations

from typing import Sequence

from onyxia.compiler.context import CompileContext
from onyxia.compiler.lowering.planning import plan_subgraph
from onyxia.compiler.pass_api import Pass
from onyxia.compiler.passes.inference import infer_node
from onyxia.errors import ShapeInferenceError
from onyxia.ir.dtypes import DType
from onyxia.ir.graph import IrGraph
from onyxia.ir.shapes import Shape
from onyxia.operators.base import PlanState
from onyxia.operators.registry import check_supported
from onyxia.plan import Step


class CompilerSubgraphs:
    """Subgraph inference and planning for the compilation `ctx`. `expansion` is the pipeline's
    FunctionExpansionPass, run on each subgraph before it is inferred (None: no expansion)."""

    def __init__(self, ctx: CompileContext, expansion: Pass | None = None):
        self.ctx = ctx
        self.expansion = expansion

    def expand_subgraph(self, graph: IrGraph) -> object:
        return None if self.expansion is None else self.expansion.run(graph, self.ctx)

    def infer_subgraph(self, graph: IrGraph, inputs: Sequence[tuple[DType, Shape]]) -> list[tuple[DType, Shape]]:
        """Its inputs take the types the op gives, its nodes are inferred and folded like the graph's."""
        for tid, (dtype, shape) in zip(graph.inputs, inputs):
            t = graph.tensors[tid]
            if t.dtype is not None and dtype is not None and t.dtype != dtype:
                raise ShapeInferenceError(f"subgraph '{graph.name}' input '{tid}' is declared {t.dtype}, "
                                          f"the node gives it {dtype}")
            t.dtype, t.shape = dtype, tuple(shape)
        check_supported(graph, self.ctx.registry)
        # Ops that run as a body of other ops (DynamicQuantizeLinear in a merged decoder's If
        # branch) are expanded as the main graph's are; a second inference finds none.
        self.expand_subgraph(graph)
        for nid in graph.topological_order():
            infer_node(graph, self.ctx, graph.node(nid))
        results = []
        for tid in graph.outputs:
            t = graph.tensor(tid)
            if t.dtype is None or t.shape is None:
                raise ShapeInferenceError(f"subgraph '{graph.name}' output '{tid}' has no type")
            results.append((t.dtype, t.shape))
        return results

    def plan_subgraph(self, graph: IrGraph, state: PlanState) -> list[Step]:
        return plan_subgraph(graph, self.ctx, state)


__all__ = ["CompilerSubgraphs"]
