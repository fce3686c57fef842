"""Planning: the lowering from the optimized graph to a CompiledModel (CompilerPipeline.compile
runs it after every pass). Not a Pass: a pass rewrites the graph in place, this returns the plan."""

from __future__ import annotations

from onyxia.compiler.context import CompileContext
from onyxia.compiler.lowering.inplace import drop_unused_shaders, write_in_place
from onyxia.compiler.lowering.memory import plan_memory
from onyxia.compiler.lowering.ordering import order_for_memory
from onyxia.errors import OnyxiaError, PlanError
from onyxia.ir.graph import IrGraph, TensorKind
from onyxia.ir.shapes import SymDim
from onyxia.operators.base import PlanCtx, PlanState, symbolic_write
from onyxia.operators.registry import resolve_operator
from onyxia.plan import (
    STATUS_TENSOR,
    CompiledModel,
    PlannedOp,
    ShaderSpec,
    Step,
    SymbolicBinding,
    TensorInfo,
    walk_steps,
)


def plan_model(graph: IrGraph, ctx: CompileContext) -> CompiledModel:
    """1. Skips dead nodes and folded nodes (every output has a value): they emit nothing.
    2. Calls `plan` of each remaining node in topological order, collecting its steps.
    3. Materializes the values the steps read: numeric ones as weight data, symbolic ones
       (shape tensors over dynamic dims) as WriteBuffer steps patched on dimension changes.
    4. Orders the operations to lower the peak of live activations (lowering/ordering.py), lets
       elementwise maps write into a dying input's buffer (lowering/inplace.py) and
       intermediates with disjoint lifetimes share buffers (lowering/memory.py).
    5. Records a SymbolicBinding for every expression over dynamic dimensions.
    """
    state = PlanState(graph, ctx, subgraphs=ctx.subgraphs)  # If arms, loop bodies: plan_subgraph below
    operations, planned_nodes, folded = _plan_nodes(graph, ctx, state)
    folded += ctx.folded_nodes

    tensors, prelude = _tensor_table(graph, state, operations)
    order = None
    if ctx.memory_order:
        operations, order = order_for_memory(operations, tensors, dict(ctx.dims))
    if prelude:
        operations.insert(0, PlannedOp("<materialize>", "WriteBuffer", tuple(prelude)))
    in_place = None
    if ctx.memory_order:
        operations, tensors, in_place = write_in_place(operations, tensors, state.shaders, state.add_shader)
        operations, state.shaders[:] = drop_unused_shaders(operations, state.shaders)
    tensors, memory = plan_memory(operations, tensors)
    steps = walk_steps([s for op in operations for s in op.steps])
    bindings = _symbolic_bindings(steps, tensors, state.shaders, ctx.static)
    weight_bytes = sum(int(t.nbytes) for t in tensors.values() if t.data is not None)
    return CompiledModel(
        shaders=tuple(state.shaders),
        templates={key: state.templates[key] for key in dict.fromkeys(s.template for s in state.shaders)},
        operations=tuple(operations),
        tensors=tensors,
        inputs=tuple(graph.inputs),
        outputs=tuple(graph.outputs),
        symbolic_bindings=tuple(bindings),
        dims=dict(ctx.dims),
        static_symbols=ctx.static,
        constraints=tuple(ctx.constraints.values()),
        data_symbols=dict(ctx.data_symbols),
        sites=tuple(state.sites),
        metadata={
            "name": graph.name,
            "opsets": dict(graph.opsets),
            "nodes": planned_nodes + folded,
            "planned_nodes": planned_nodes,
            "folded_nodes": folded,
            "weight_bytes": weight_bytes,
            "memory": {**memory, **(in_place or {})},
            **({"order": {"memory_aware": order.applied, "peak_before": order.peak_before,
                          "peak_after": order.peak_after}} if order is not None else {}),
            **({"containers": ctx.containers} if ctx.containers else {}),
            # Why a constraint `dim = value` exists (plan/show.py literal_uses reads it).
            **({"literal_reasons": [[a, b, why] for (a, b), why in ctx.reasons.items()]} if ctx.reasons else {}),
            **{k: v for k, v in graph.metadata.items() if isinstance(v, str)},
        },
    )


def _plan_nodes(graph: IrGraph, ctx: CompileContext, state: PlanState) -> tuple[list[PlannedOp], int, int]:
    """(operations, planned nodes, folded nodes) of `graph`'s live nodes in topological order."""
    live = graph.live_nodes()
    operations: list[PlannedOp] = []
    folded = planned_nodes = 0
    for nid in graph.topological_order():
        node = graph.node(nid)
        if nid not in live:
            continue
        if all(graph.tensor(o).value is not None for o in node.outputs):
            folded += 1
            continue
        op = resolve_operator(graph, ctx.registry, node)
        assert op is not None
        scratch_before = set(state.scratch)
        try:
            steps = op.plan(PlanCtx(graph, node, state))
        except OnyxiaError:
            raise
        except Exception as exc:
            raise PlanError(f"{node.describe()}: planning failed: {type(exc).__name__}: {exc}") from exc
        planned_nodes += 1
        scratch = tuple(n for n in state.scratch if n not in scratch_before)
        operations.append(PlannedOp(node.name, node.op_type, tuple(steps), scratch))
    return operations, planned_nodes, folded


def plan_subgraph(graph: IrGraph, ctx: CompileContext, state: PlanState) -> list[Step]:
    """The steps of a subgraph (an If branch, a loop body), for the op that owns it; its tensors
    join the plan's tensor table."""
    for sub in (graph, *graph.all_subgraphs()):
        state.subgraph_tensors.update(sub.tensors)
    operations, _, _ = _plan_nodes(graph, ctx, state)
    return [s for op in operations for s in op.steps]


def _referenced(operations: list[PlannedOp]) -> list[str]:
    names: dict[str, None] = {}
    for op in operations:
        for s in op.steps:
            names.update((tensor, None) for tensor, _ in s.uses())
    return list(names)


def _tensor_table(graph: IrGraph, state: PlanState,
                  operations: list[PlannedOp]) -> tuple[dict[str, TensorInfo], list[Step]]:
    """Every tensor a step or the caller touches, with its device buffer description."""
    needed = dict.fromkeys([*graph.inputs, *graph.outputs, *_referenced(operations)])
    for alias, target in state.aliases.items():
        needed.setdefault(target, None)
    tensors: dict[str, TensorInfo] = {}
    prelude: list[Step] = []
    for name in needed:
        if name == STATUS_TENSOR:  # one word: the highest report site hit in a run (0: none)
            tensors[name] = TensorInfo(name, "uint32", (1,), "status")
            continue
        if name in state.scratch:
            dtype, shape = state.scratch[name]
            tensors[name] = TensorInfo(name, dtype, shape, "scratch")
            continue
        t = state.subgraph_tensors.get(name) or graph.tensor(name)
        if t.dtype is None or t.shape is None:
            raise PlanError(f"tensor '{name}' has no inferred dtype/shape")
        t.dtype.require_device(f"tensor '{name}'")
        kind = "output" if name in graph.outputs else t.kind.value
        if name in state.subgraph_tensors and kind in ("input", "output"):
            kind = "intermediate"  # a subgraph's parameters and results: buffers the copies fill
        alias = state.aliases.get(name)
        while alias in state.aliases:  # collapse chains: Reshape of a Reshape
            alias = state.aliases[alias]
        if t.value is not None and t.value.dtype == object:
            prelude.append(symbolic_write(name, t.value, t.dtype))
            tensors[name] = TensorInfo(name, t.dtype.name, t.shape, "output" if kind == "output" else "intermediate")
        elif t.value is not None:
            tensors[name] = TensorInfo(name, t.dtype.name, t.shape, "output" if kind == "output" else "weight",
                                       data=t.value)
        else:
            if t.kind is TensorKind.WEIGHT:
                kind = "weight"
            tensors[name] = TensorInfo(name, t.dtype.name, t.shape, kind, alias_of=alias)
    return tensors, prelude


def _symbolic_bindings(steps: list[Step], tensors: dict[str, TensorInfo], shaders: list[ShaderSpec],
                       static: frozenset[str]) -> list[SymbolicBinding]:
    out: list[SymbolicBinding] = []

    def add(kind: str, target: int | str, index: int, value: object) -> None:
        if isinstance(value, SymDim):
            out.append(SymbolicBinding(kind, target, index, value))

    for i, s in enumerate(steps):
        for kind, j, v in s.expressions():
            add(kind, i, j, v)
    for name, t in tensors.items():
        if t.alias_of is None:
            add("buffer", name, 0, t.nbytes)
    for index, spec in enumerate(shaders):
        values = [v for _, v in spec.defs] + [v for _, v in spec.constants]
        for j, v in enumerate(values):
            add("shader", index, j, v)
    return out
