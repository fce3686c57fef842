"""CompilerPipeline: runs passes stage by stage over a copy of the caller's graph."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from onyxia.compiler.pass_api import Pass, PassResult, Stage
from onyxia.compiler.passes import (
    ConstantFoldingPass,
    PlanningPass,
    ShapeInferencePass,
    SymbolicResolutionPass,
    default_optimization_passes,
)
from onyxia.ir.graph import IrGraph
from onyxia.operators import core_operator_registry
from onyxia.operators.registry import OperatorRegistry
from onyxia.plan import CompiledModel


@dataclass(frozen=True)
class PassRecord:
    name: str
    stage: Stage
    modified: bool
    seconds: float


class CompilerPipeline:
    def __init__(self, registry: OperatorRegistry, *, optimize: bool = True):
        self.registry = registry
        self._passes: list[Pass] = [
            SymbolicResolutionPass(),
            ShapeInferencePass(),
            ConstantFoldingPass(),
            PlanningPass(),
        ]
        if optimize:
            for p in default_optimization_passes():
                self.add_pass(p)
        self.history: list[PassRecord] = []

    @property
    def passes(self) -> list[Pass]:
        # sorted() is stable: within a stage, registration order is kept.
        return sorted(self._passes, key=lambda p: p.stage)

    def add_pass(self, p: Pass) -> CompilerPipeline:
        if not isinstance(p.stage, Stage):
            raise TypeError(f"{p!r}.stage must be a Stage")
        self._passes.append(p)
        return self

    def run_passes(self, graph: IrGraph, dims: Mapping[str, int], static: Iterable[str] = (),
                   until: Stage | None = None, progress: Callable[[PassRecord, int, int], None] | None = None
                   ) -> IrGraph:
        """Run the passes (up to and including `until`) on a copy of `graph`; return the copy.

        `progress(record, done, total)` is called after each pass (the CLI draws a bar with it).
        """
        work = graph.copy()
        work.meta["requested_dims"] = dict(dims)
        work.meta["requested_static"] = frozenset(static)
        self.history = []
        passes = self.passes
        for p in passes:
            if until is not None and p.stage > until:
                break
            start = time.perf_counter()
            result = p.run(work, self.registry)
            modified = result.modified if isinstance(result, PassResult) else bool(result)
            self.history.append(PassRecord(p.name or type(p).__name__, p.stage, modified,
                                           time.perf_counter() - start))
            if progress is not None:
                progress(self.history[-1], len(self.history), len(passes))
        return work

    def compile(self, graph: IrGraph, dims: Mapping[str, int] | None = None, static: Iterable[str] = (),
                progress: Callable[[PassRecord, int, int], None] | None = None) -> CompiledModel:
        """Compile `graph` for the symbol values `dims`; symbols in `static` become shader defs.

        The caller's graph is never modified.
        """
        work = self.run_passes(graph, dims or {}, static, progress=progress)
        model = work.meta.get("compiled_model")
        if model is None:
            raise RuntimeError("no Planning-stage pass produced a CompiledModel")
        return model


def compile(graph: IrGraph, dims: Mapping[str, int] | None = None, static: Iterable[str] = (),
            registry: OperatorRegistry | None = None) -> CompiledModel:
    """Compile with the core operators and the default passes."""
    if registry is None:
        registry = core_operator_registry()
    return CompilerPipeline(registry).compile(graph, dims, static)
