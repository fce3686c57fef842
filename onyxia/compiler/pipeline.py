"""CompilerPipeline: runs passes stage by stage over a copy of the caller's graph, then lowers
the result to a CompiledModel."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from onyxia.compiler.context import CompileContext
from onyxia.compiler.lowering import plan_model
from onyxia.compiler.pass_api import Pass, PassResult, Stage
from onyxia.compiler.passes import (
    ConstantFoldingPass,
    FunctionExpansionPass,
    IfInliningPass,
    SequenceLoweringPass,
    ShapeInferencePass,
    SymbolicResolutionPass,
    default_optimization_passes,
)
from onyxia.compiler.subgraphs import CompilerSubgraphs
from onyxia.errors import PipelineError
from onyxia.ir.graph import IrGraph
from onyxia.operators import core_operator_registry
from onyxia.operators.registry import OperatorRegistry
from onyxia.plan import CompiledModel

PLANNING = "planning"  # the lowering's name in `history` and progress reports


@dataclass(frozen=True)
class PassRecord:
    name: str
    stage: Stage
    modified: bool
    seconds: float


Progress = Callable[[PassRecord, int, int], None]


class CompilerPipeline:
    """Passes ordered by stage, then by registration. `compile` runs them all and lowers the
    graph (compiler/lowering/planning.py); `run_passes` stops at a stage and returns the graph.

    `history` (a PassRecord per pass) and `context` (the CompileContext, with every pass's
    report) describe the most recent run.
    """

    def __init__(self, registry: OperatorRegistry, *, optimize: bool = True, memory_order: bool = True):
        """`memory_order=False` plans the operations in the graph's topological order instead
        of the memory-aware one (compiler/lowering/ordering.py), without in-place elementwise
        writes (compiler/lowering/inplace.py)."""
        self.registry = registry
        self.memory_order = memory_order
        # Also expands the function ops of subgraphs, when their node's inference infers them.
        self._expansion = FunctionExpansionPass()
        self._passes: list[Pass] = [SymbolicResolutionPass(), IfInliningPass(), self._expansion, SequenceLoweringPass(),
                                    ShapeInferencePass(),
                                    ConstantFoldingPass()]
        if optimize:
            for p in default_optimization_passes():
                self.add_pass(p)
        self.history: list[PassRecord] = []
        self.context: CompileContext | None = None
        self._total = 0  # steps of the current run, for progress reports

    @property
    def passes(self) -> list[Pass]:
        # sorted() is stable: within a stage, registration order is kept.
        return sorted(self._passes, key=lambda p: p.stage)

    def add_pass(self, p: Pass) -> CompilerPipeline:
        if not isinstance(p.stage, Stage):
            raise TypeError(f"{p!r}.stage must be a Stage")
        self._passes.append(p)
        return self

    def check_order(self, passes: list[Pass]) -> None:
        """Raise a PipelineError when a pass's `requires` / `after` are not met by `passes`."""
        position = {_name(p): i for i, p in enumerate(passes)}
        for i, p in enumerate(passes):
            for need in p.requires:
                if need not in position:
                    raise PipelineError(f"pass '{_name(p)}' requires pass '{need}', which is not in the pipeline")
            for need in (*p.requires, *p.after):
                if position.get(need, -1) > i:
                    raise PipelineError(f"pass '{_name(p)}' must run after pass '{need}', but the pipeline runs it "
                                        f"first (order: {', '.join(_name(q) for q in passes)})")

    def run_passes(self, graph: IrGraph, dims: Mapping[str, int], static: Iterable[str] = (),
                   until: Stage | None = None, progress: Progress | None = None, *,
                   placeholders: Iterable[str] = ()) -> IrGraph:
        """Run the passes (up to and including `until`) on a copy of `graph`; return the copy.

        `progress(record, done, total)` is called after each pass (the CLI draws a bar with it).
        `placeholders` names symbols whose values in `dims` are stand-ins (DimEnv.placeholders).
        """
        return self._run(graph, dims, static, until, progress, lowering=False, placeholders=placeholders)

    def compile(self, graph: IrGraph, dims: Mapping[str, int] | None = None, static: Iterable[str] = (),
                progress: Progress | None = None) -> CompiledModel:
        """Compile `graph` for the symbol values `dims`; symbols in `static` become shader defs.

        The caller's graph is never modified.
        """
        work = self._run(graph, dims or {}, static, None, progress, lowering=True)
        assert self.context is not None
        start = time.perf_counter()
        model = plan_model(work, self.context)
        self._record(PassRecord(PLANNING, Stage.PLANNING, True, time.perf_counter() - start), progress)
        return model

    def _run(self, graph: IrGraph, dims: Mapping[str, int], static: Iterable[str], until: Stage | None,
             progress: Progress | None, lowering: bool, placeholders: Iterable[str] = ()) -> IrGraph:
        passes = [p for p in self.passes if until is None or p.stage <= until]
        self.check_order(passes)
        work = graph.copy()
        self.context = ctx = CompileContext(dims=dict(dims), static=frozenset(static),
                                            placeholders=frozenset(placeholders), registry=self.registry,
                                            memory_order=self.memory_order)
        ctx.subgraphs = CompilerSubgraphs(ctx, self._expansion if self._expansion in passes else None)
        self.history = []
        self._total = len(passes) + int(lowering)
        for p in passes:
            start = time.perf_counter()
            result = p.run(work, ctx)
            modified = result.modified if isinstance(result, PassResult) else bool(result)
            self._record(PassRecord(_name(p), p.stage, modified, time.perf_counter() - start), progress)
        return work

    def _record(self, record: PassRecord, progress: Progress | None) -> None:
        self.history.append(record)
        if progress is not None:
            progress(record, len(self.history), self._total)


def _name(p: Pass) -> str:
    return p.name or type(p).__name__


def compile_graph(graph: IrGraph, dims: Mapping[str, int] | None = None, static: Iterable[str] = (),
                  registry: OperatorRegistry | None = None) -> CompiledModel:
    """Compile with the core operators (unless `registry` is given) and the default passes."""
    return CompilerPipeline(core_operator_registry() if registry is None else registry).compile(graph, dims, static)
