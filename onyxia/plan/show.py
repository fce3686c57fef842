"""Plans as text for people: the Select steps of a plan, their alternatives and which one runs.

`onyxia compile` prints `select_lines`: for every Select (nested ones indented under their
alternative) the guards and preferences of each alternative, and which runs at the given dims
on a CPU-type adapter (`cpu`; `cpu-wide` where it has the wide-register-tiles trait, lavapipe
before Mesa 25; `cpu-guarded` where it has guarded-loads, lavapipe from Mesa 25) and on a
GPU-type one with tuning off (a tuned Select may replay another eligible alternative, measured
faster on the adapter at hand).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from onyxia.ir.shapes import dim_symbols
from onyxia.plan.cost import replayed_steps
from onyxia.plan.model import CompiledModel
from onyxia.plan.select import AdapterFacts, Select
from onyxia.plan.steps import Step, walk_steps

KINDS = (AdapterFacts("cpu"), AdapterFacts("gpu"))
# The adapters a Select's listing names ("runs on"): the kinds, and a CPU-type one with each trait.
LISTED = {"cpu": KINDS[0], "cpu-wide": AdapterFacts("cpu", traits=frozenset({"wide-register-tiles"})),
          "cpu-guarded": AdapterFacts("cpu", traits=frozenset({"guarded-loads"})), "gpu": KINDS[1]}


def _lines(step: Select, dims: Mapping[str, int], depth: int) -> list[str]:
    pad = "  " * depth
    runs = {name: step.choose(dims, facts) for name, facts in LISTED.items()}
    tuned = (f", tuned per shape class of ({', '.join(map(str, step.shape))})" if step.tuned
             else ", interchangeable" if step.interchangeable else "")
    out = [f"{pad}select {step.key}{tuned}"]
    width = max(len(a.label) for a in step.alternatives)
    for k, alt in enumerate(step.alternatives):
        where = "+".join(kind for kind, chosen in runs.items() if chosen == k) or "-"
        conditions = [f"guard {alt.guard}"] if alt.guard.clauses else []
        conditions += [f"prefer {alt.prefer}"] if alt.prefer.clauses else []
        kernels = sum(len(s.dispatches()) for s in walk_steps(alt.steps))
        out.append(f"{pad}  {alt.label:<{width}}  runs on: {where:<12}  {kernels} dispatch"
                   f"{'es' if kernels != 1 else ''}{'; ' + '; '.join(conditions) if conditions else ''}")
        out += _nested(alt.steps, dims, depth + 2)
    return out


def _nested(steps: tuple[Step, ...] | list[Step], dims: Mapping[str, int], depth: int) -> list[str]:
    out: list[str] = []
    for s in steps:
        if isinstance(s, Select):
            out += _lines(s, dims, depth)
        else:
            out += _nested(s.children(), dims, depth)
    return out


def select_lines(model: CompiledModel, dims: Mapping[str, int] | None = None) -> list[str]:
    """The plan's Selects per operation, as described in the module doc."""
    env = {**model.dims, **(dims or {})}
    out: list[str] = []
    for op in model.operations:
        lines = _nested(op.steps, env, 2)
        if lines:
            out += [f"  {op.name} [{op.op_type}]", *lines]
    count = sum(1 for s in model.steps if isinstance(s, Select))
    if not count:
        return ["kernel choices:   none (every operation has one way to run)"]
    return [f"kernel choices:   {count} Select steps; 'runs on' is the choice at the dims given with tuning off",
            *out]


def run_count(model: CompiledModel, dims: Mapping[str, int] | None = None) -> dict[str, int]:
    """Dispatches a run encodes at `dims` per adapter kind (tuning off; empty grids count)."""
    env = {**model.dims, **(dims or {})}
    steps = [s for op in model.operations for s in op.steps]
    return {facts.kind: sum(len(s.dispatches()) for s in replayed_steps(steps, env, adapter=facts))
            for facts in KINDS}


@dataclass(frozen=True)
class LiteralUse:
    """A symbol the plan took as a literal: `expr` (over `symbols`) was `value` when `node`
    needed a concrete number (`reason`: what for). Another value needs another plan."""

    expr: str
    value: int
    node: str
    reason: str
    symbols: tuple[str, ...]


def literal_uses(model: CompiledModel) -> list[LiteralUse]:
    """The plan's constraints `dim = integer` (a rule needed a literal, or compared a symbol
    with a literal dim), with the rule's words from the plan's metadata where it gave them."""
    reasons = {(a, b): why for a, b, why in model.metadata.get("literal_reasons", ()) or ()}
    out = []
    for a, b, node in model.constraints:
        if isinstance(a, int) == isinstance(b, int):
            continue  # two symbolic dims: an equality, no literal
        expr, value = (b, a) if isinstance(a, int) else (a, b)
        why = reasons.get((str(expr), str(value))) or f"compared with the literal dim {value}"
        out.append(LiteralUse(str(expr), int(value), node, why, tuple(sorted(dim_symbols(expr)))))
    return out


def literal_lines(model: CompiledModel) -> list[str]:
    """`onyxia inspect`'s lines: each literal-bound symbol with the node that needs it."""
    uses = literal_uses(model)
    if not uses:
        return ["literal-bound symbols: none (any value updates the plan in place)"]
    return ["literal-bound symbols (another value compiles another plan):",
            *(f"  {u.expr} = {u.value}: node '{u.node}' needs a concrete value ({u.reason})" for u in uses)]


__all__ = ["LiteralUse", "literal_lines", "literal_uses", "run_count", "select_lines"]
