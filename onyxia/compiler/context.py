"""CompileContext: the typed state one compilation shares between its passes.

It replaces string keys in a graph-wide dict: each field says who writes it and who reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onyxia.ir.dim_env import DimEnv
from onyxia.operators.base import SubgraphServices
from onyxia.operators.registry import OperatorRegistry


@dataclass(kw_only=True)
class CompileContext(DimEnv):
    """Dims, static symbols and assumed equalities (DimEnv), plus:

    registry      the operators the graph's nodes resolve to;
    reports       what each pass wants to tell its caller, by pass name (a typed record, e.g.
                  SplitLargeTensorsPass's SplitReport);
    folded_nodes  nodes removed because every output was a constant (DCE counts them; planning
                  adds the folded nodes it skips), reported in the plan's metadata;
    containers    sequence/optional graph outputs and their element tensors;
    memory_order  planning orders the operations to lower peak activation memory
                  (lowering/ordering.py) and lets elementwise maps write into a dying input's
                  buffer (lowering/inplace.py); False keeps the graph's topological order and
                  gives every map its own output buffer.
    subgraphs     the SubgraphServices (operators/base.py) this compilation lends operators that
                  own subgraphs: CompilerPipeline passes in a CompilerSubgraphs
                  (compiler/subgraphs.py); inference hands it to each InferenceCtx, planning to
                  its PlanState (None: a node with subgraphs cannot be inferred or planned).
    """

    registry: OperatorRegistry
    reports: dict[str, object] = field(default_factory=dict)
    folded_nodes: int = 0
    # Graph outputs that are sequences/optionals (SequenceLoweringPass): {"outputs": the original
    # output names, "structure": {name: {"kind", "items"}}}; planning puts it in the plan's
    # metadata and InferenceSession reassembles them from their element tensors.
    containers: dict[str, object] = field(default_factory=dict)
    memory_order: bool = True
    subgraphs: SubgraphServices | None = None


__all__ = ["CompileContext"]
