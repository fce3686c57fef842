"""Select: which of several alternatives computing the same tensors runs, said by the plan.

A kernel family offers variants (a CPU-type adapter's register-tiled kernel, a GPU's
shared-memory one, a few-rows kernel for decode); a kernel may need a pass only for long axes.
The plan holds them as one Select step whose alternatives carry Guards: conditions over the
dims and the adapter's facts (kind, WebGPU features, limits, traits). The runtime evaluates them when
the dims change, never per run, and encodes only the chosen alternative (runtime/select.py); a
tuned Select lets the autotuner pick among the eligible alternatives by measurement.
docs/plan-format.md gives the file form and the evaluation rules a second replayer follows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from onyxia.plan.steps import Expr, Step, _dec, _enc, _nested_uses, _steps

ADAPTER_KINDS = ("cpu", "gpu")
# Adapter facts a guard may name: WebGPU's feature names, and limits by their WebGPU names.
FEATURES = ("shader-f16", "subgroups")
LIMITS = ("maxStorageBufferBindingSize", "maxComputeWorkgroupsPerDimension")
# Adapter traits: what a runtime knows of the adapter's compiler beyond WebGPU's facts, each
# measured where it is set (runtime/device.py). "wide-register-tiles": register-tiled kernels run
# fastest with 32-row tiles (128 accumulators an invocation) rather than 16 (lavapipe before Mesa
# 25). "guarded-loads": the compiler branches around every storage access, per lane (robust
# access lowered as control flow: lavapipe from Mesa 25), so a kernel's compile time follows its
# load sites (and, measured for attention over heads under 16, its speed: the flash kernel is
# preferred to the register one there). A runtime that does not know a trait reports it absent: only speed differs.
TRAITS = ("wide-register-tiles", "guarded-loads")
CLAUSE_OPS = ("le", "adapter", "feature", "limit", "trait")


@dataclass(frozen=True)
class Clause:
    """One condition of a Guard, in its plan-file form `[op, *args]`:

    - `["le", a, b]`: a <= b, two expressions over the dims (`m <= 64`; `m > 64` is `65 <= m`);
    - `["adapter", "cpu" | "gpu"]`: the adapter's kind (CPU-type: lavapipe, SwiftShader);
    - `["feature", name]`: the device has the WebGPU feature (FEATURES);
    - `["limit", name, v]`: the device's WebGPU limit `name` (LIMITS) is at least v (an expression);
    - `["trait", name]`: the runtime knows the adapter to have the trait (TRAITS).
    """

    op: str
    args: tuple

    def values(self) -> tuple[Expr, ...]:
        """The expressions the runtime evaluates for this clause (the dims' part of it)."""
        if self.op == "le":
            return self.args
        return self.args[1:] if self.op == "limit" else ()

    def static(self) -> bool | None:
        """True or False when no dim is involved ("le" of two literals), else None."""
        if self.op == "le" and all(isinstance(v, int) for v in self.args):
            return self.args[0] <= self.args[1]
        return None

    def __str__(self) -> str:
        if self.op == "le":
            return f"{self.args[0]} <= {self.args[1]}"
        if self.op == "adapter":
            return f"{self.args[0]} adapter"
        if self.op in ("feature", "trait"):
            return f"has {self.args[0]}"
        return f"{self.args[0]} >= {self.args[1]}"

    def to_json(self) -> list:
        return [self.op, *(_enc(v) if self.op in ("le", "limit") else v for v in self.args)]

    @classmethod
    def from_json(cls, row: list) -> Clause:
        op, *args = row
        if op not in CLAUSE_OPS:
            raise ValueError(f"unknown guard condition {op!r} (known: {', '.join(CLAUSE_OPS)})")
        if op == "le":
            return cls(op, (_dec(args[0]), _dec(args[1])))
        if op == "limit":
            return cls(op, (args[0], _dec(args[1])))
        return cls(op, tuple(args))


@dataclass(frozen=True)
class Guard:
    """A conjunction of clauses; empty: always. `&` joins guards, dropping clauses that hold for
    every dim; a statically false guard is `NEVER` (PlanCtx.select drops its alternative)."""

    clauses: tuple[Clause, ...] = ()

    def __and__(self, other: Guard) -> Guard:
        if self.never or other.never:
            return NEVER
        return Guard(tuple(dict.fromkeys((*self.clauses, *other.clauses))))

    @property
    def never(self) -> bool:
        return any(c.static() is False for c in self.clauses)

    def values(self) -> tuple[Expr, ...]:
        return tuple(v for c in self.clauses for v in c.values())

    def __str__(self) -> str:
        return " and ".join(map(str, self.clauses)) or "always"

    def to_json(self) -> list:
        return [c.to_json() for c in self.clauses]

    @classmethod
    def from_json(cls, rows: list) -> Guard:
        return cls(tuple(Clause.from_json(r) for r in rows))


ALWAYS = Guard()
NEVER = Guard((Clause("le", (1, 0)),))


def at_most(value: Expr, bound: Expr) -> Guard:
    """value <= bound (ALWAYS / NEVER when both are literals)."""
    clause = Clause("le", (value, bound))
    return {True: ALWAYS, False: NEVER}.get(clause.static(), Guard((clause,)))  # type: ignore[arg-type]


def at_least(value: Expr, bound: Expr) -> Guard:
    """value >= bound."""
    return at_most(bound, value)


def adapter(kind: str) -> Guard:
    """The adapter is of `kind` ("cpu" or "gpu")."""
    assert kind in ADAPTER_KINDS, kind
    return Guard((Clause("adapter", (kind,)),))


def has_feature(name: str) -> Guard:
    assert name in FEATURES, name
    return Guard((Clause("feature", (name,)),))


def has_trait(name: str) -> Guard:
    assert name in TRAITS, name
    return Guard((Clause("trait", (name,)),))


def limit_at_least(name: str, value: Expr) -> Guard:
    assert name in LIMITS, name
    return Guard((Clause("limit", (name, value)),))


@dataclass(frozen=True)
class AdapterFacts:
    """What a guard may ask of the adapter: its kind ("cpu": lavapipe, SwiftShader; "gpu"), the
    WebGPU features the device has, its limits by WebGPU name and the traits (TRAITS) the
    runtime knows it to have."""

    kind: str = "gpu"
    features: frozenset[str] = frozenset()
    limits: tuple[tuple[str, int], ...] = ()
    traits: frozenset[str] = frozenset()


# A guard against the adapter's facts: whether its adapter/feature clauses hold, and its
# comparisons as (i, j, bound) over the Select's value indices: values[i] <= values[j], or
# values[i] <= bound where j is None (a limit clause: the needed value against the limit).
Checks = tuple[bool, tuple[tuple[int, int | None, int], ...]]


def guard_checks(guard: Guard, start: int, facts: AdapterFacts) -> tuple[Checks, int]:
    """`guard` as Checks on an adapter with `facts`, its values numbered from `start`; and the
    index after its last value (where the next guard's begin)."""
    holds, compares, k = True, [], start
    limits = dict(facts.limits)
    for c in guard.clauses:
        if c.op == "le":
            compares.append((k, k + 1, 0))
            k += 2
        elif c.op == "limit":
            compares.append((k, None, limits.get(c.args[0], 0)))
            k += 1
        elif c.op == "adapter":
            holds = holds and facts.kind == c.args[0]
        elif c.op == "trait":
            holds = holds and c.args[0] in facts.traits
        else:  # feature
            holds = holds and c.args[0] in facts.features
    return (holds, tuple(compares)), k


def checks_hold(checks: Checks, values: Sequence[int]) -> bool:
    holds, compares = checks
    return holds and all(values[i] <= (bound if j is None else values[j]) for i, j, bound in compares)


@dataclass(frozen=True)
class Alternative:
    """One way a Select can compute its outputs.

    `guard`: where it may run at all (it computes the right result there and fits the device);
    `prefer`: where the deterministic heuristic runs it. Both are Guards over the dims and the
    adapter's facts.
    """

    label: str
    steps: tuple[Step, ...]
    guard: Guard = ALWAYS
    prefer: Guard = ALWAYS

    def to_json(self) -> dict:
        return {"label": self.label, "guard": self.guard.to_json(), "prefer": self.prefer.to_json(),
                "steps": [s.to_json() for s in self.steps]}

    @classmethod
    def from_json(cls, d: dict) -> Alternative:
        return cls(d["label"], _steps(d["steps"]), Guard.from_json(d["guard"]), Guard.from_json(d["prefer"]))


@dataclass(frozen=True)
class Select(Step, tag="select"):
    """Which of several alternatives computing the same tensors runs: kernel variants of one
    family, row classes of one kernel, a pass that only a long axis needs.

    The runtime chooses whenever the dims change (never per run) and replays only the chosen
    alternative's steps:
    - eligible: the alternatives whose `guard` holds for the dims and the adapter;
    - untuned (`tuned` false), or no measurement yet: the first eligible alternative whose
      `prefer` holds, else the first eligible one;
    - tuned: the alternative the autotuner (runtime/tuner.py) measured fastest among the
      eligible ones, for `key` and the shape class of `shape` (its values at the current dims,
      symbolic ones rounded up to a power of two), so decode and prefill may choose differently
      while nothing recompiles.
    `interchangeable` (always so where `tuned`): every eligible alternative computes the same
    tensors, so a runtime may replay any of them in place of the choice for a while (one whose
    kernels are compiled already, at new dims). Where it is false the guards and prefers decide
    what is computed (an FFT level's always-eligible "skip" after the "run" a length needs).
    The last alternative's guard is empty, so one is always eligible. Memory planning sees every
    alternative's tensors live at this step, so alternatives never share a buffer.
    """

    key: str
    alternatives: tuple[Alternative, ...]
    tuned: bool = False
    shape: tuple[Expr, ...] = ()
    interchangeable: bool = False

    def __post_init__(self) -> None:
        if self.tuned and not self.interchangeable:  # the tuner may pick any eligible one
            object.__setattr__(self, "interchangeable", True)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(a.label for a in self.alternatives)

    def values(self) -> tuple[Expr, ...]:
        """The expressions the runtime evaluates: each alternative's guard then prefer values,
        then `shape`; SymbolicBindings of kind "select" index this tuple."""
        return (*(v for a in self.alternatives for v in (*a.guard.values(), *a.prefer.values())), *self.shape)

    def evaluator(self, facts: AdapterFacts) -> Callable[[Sequence[int]], tuple[list[bool], int]]:
        """evaluate() for one adapter, its adapter clauses decided once (the runtime's form)."""
        rows, k = [], 0
        for a in self.alternatives:
            guard, k = guard_checks(a.guard, k, facts)
            prefer, k = guard_checks(a.prefer, k, facts)
            rows.append((guard, prefer))
        last = len(rows) - 1

        def evaluate(values: Sequence[int]) -> tuple[list[bool], int]:
            eligible = [checks_hold(guard, values) for guard, _ in rows]
            choice = next((n for n, (guard, prefer) in enumerate(rows) if eligible[n] and checks_hold(prefer, values)),
                          None)
            return eligible, choice if choice is not None else next((n for n, e in enumerate(eligible) if e), last)
        return evaluate

    def evaluate(self, values: Sequence[int], facts: AdapterFacts) -> tuple[list[bool], int]:
        """(eligible?, per alternative; the heuristic's choice) for `values`, the evaluated
        `values()` at the current dims, on an adapter with `facts`: the first eligible
        alternative whose prefer holds, else the first eligible one."""
        return self.evaluator(facts)(values)

    def choose(self, dims: Mapping[str, int], facts: AdapterFacts) -> int:
        """The heuristic's choice at `dims` (plan_cost, inspect; the runtime keeps its values)."""
        return self.evaluate([v if isinstance(v, int) else v.evaluate(dims) for v in self.values()], facts)[1]

    def uses(self) -> tuple[tuple[str, bool], ...]:
        return tuple(u for a in self.alternatives for u in _nested_uses(a.steps))

    def expressions(self) -> tuple[tuple[str, int, object], ...]:
        return tuple(("select", j, v) for j, v in enumerate(self.values()))

    def children(self) -> tuple[Step, ...]:
        return tuple(s for a in self.alternatives for s in a.steps)

    def to_json(self) -> dict:
        return {"t": self.tag, "key": self.key, "tuned": self.tuned, "interchangeable": self.interchangeable,
                "shape": _enc(self.shape), "alternatives": [a.to_json() for a in self.alternatives]}

    @classmethod
    def from_json(cls, d: dict) -> Select:
        return cls(d["key"], tuple(Alternative.from_json(a) for a in d["alternatives"]), bool(d["tuned"]),
                   _dec(d["shape"]), bool(d["interchangeable"]))


__all__ = ["ADAPTER_KINDS", "ALWAYS", "AdapterFacts", "Alternative", "CLAUSE_OPS", "Clause", "FEATURES", "Guard",
           "LIMITS", "NEVER", "Select", "TRAITS", "adapter", "at_least", "at_most", "checks_hold", "guard_checks",
           "has_feature", "has_trait", "limit_at_least"]
