"""The pass contract: `Stage`, `Pass` and `PassResult`.

Kept apart from the pipeline so that a pass module imports only this (and the layers below
the compiler), never the pipeline that runs it.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterator
from dataclasses import dataclass

from onyxia.compiler.context import CompileContext
from onyxia.ir.graph import IrGraph, Node


class Stage(enum.IntEnum):
    RESOLUTION = 0  # bind symbols to the dims given
    INFERENCE = 1  # dtype and shape of every tensor
    FOLDING = 2  # constant values (numpy)
    OPTIMIZATION = 3  # fusion, aliasing, DCE, ...
    PLANNING = 4  # last rewrites before the graph is lowered to a CompiledModel


@dataclass(frozen=True)
class PassResult:
    """What a pass reports: whether it changed the graph (a plain bool is accepted too)."""

    modified: bool
    note: str = ""


class Pass:
    """A graph pass. Subclasses set `name` and `stage` and implement `run`.

    Ordering needs beyond the stages are declared here and checked by the pipeline before it
    runs anything (a PipelineError names the pass and what it needs):
    `requires`: names of passes that must be in the pipeline and run before this one;
    `after`: names of passes that, when in the pipeline, must run before this one.
    """

    name: str = ""
    stage: Stage = Stage.OPTIMIZATION
    requires: tuple[str, ...] = ()
    after: tuple[str, ...] = ()

    def run(self, graph: IrGraph, ctx: CompileContext) -> bool | PassResult:
        raise NotImplementedError

    def __repr__(self) -> str:
        # getattr: add_pass reports a pass whose stage is not a Stage through this repr.
        return f"{type(self).__name__}(stage={getattr(self.stage, 'name', repr(self.stage))})"


__all__ = ["CompileContext", "Pass", "PassResult", "Stage"]


def nodes_of(graph: IrGraph, op_types: Collection[tuple[str, str]]) -> Iterator[Node]:
    """The nodes whose (domain, op type) is one of `op_types`, in topological order as of the
    call, each still in the graph when reached (a pass may remove nodes as it goes)."""
    for nid in graph.topological_order():
        if graph.has_node(nid) and ((node := graph.node(nid)).domain, node.op_type) in op_types:
            yield node
