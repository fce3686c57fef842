"""Select steps in replay: which alternative runs, decided when the dims change, never per run.

A SelectCommand holds its step's guard and shape values evaluated for the current dims
(patched by update_dimensions like any other symbolic value) and the adapter's facts (kind,
features, limits, fixed at load). Settling it evaluates the guards: the eligible alternatives
and the heuristic's choice (plan.select.Select.evaluate); a tuned Select then asks the Tuner
(runtime/tuner.py) for a measured choice of its shape class. A run encodes only the chosen
alternative's commands (`live_commands`), so the others cost nothing but their buffers (made
at load); their pipelines are built when first chosen (PlanReplay.build_programs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from onyxia.plan import REUSABLE_KINDS, AdapterFacts, Select, Step
from onyxia.runtime.commands import Command, DispatchCommand, replays, value
from onyxia.runtime.contract import Backend, Limits, Replay
from onyxia.runtime.tuner import kernels_digest, shape_class


def adapter_facts(limits: Limits) -> AdapterFacts:
    """The facts Select guards may name, from the device limits the backend reports."""
    features = {name for name, has in (("shader-f16", limits.native_f16), ("subgroups", limits.subgroups)) if has}
    traits = {name for name, has in (("wide-register-tiles", limits.wide_register_tiles),
                                     ("guarded-loads", limits.guarded_loads)) if has}
    return AdapterFacts("cpu" if limits.cpu_adapter else "gpu", frozenset(features),
                        (("maxComputeWorkgroupsPerDimension", limits.max_workgroups),
                         ("maxStorageBufferBindingSize", limits.max_binding_bytes)), frozenset(traits))


@replays(Select)
class SelectCommand(Command):
    """Replays the chosen alternative: the heuristic's, or for a tuned Select the Tuner's."""

    __slots__ = ("step", "key", "tuned", "interchangeable", "tuner", "alternatives", "values", "symbolic",
                 "eligible", "default", "shape_class", "chosen", "source", "timeable", "written", "facts", "evaluate",
                 "wanted")

    def __init__(self, step: Select, index: int, replay: Replay) -> None:
        super().__init__(step, index, replay)
        self.step = step
        self.tuned = step.tuned
        self.interchangeable = step.interchangeable  # any eligible alternative may stand in
        # The cache key: the step's, plus a digest of its alternatives' kernels (templates and
        # defs), so that a choice timed for other kernels (an older onyxia) is not replayed.
        self.key = f"{step.key}@{kernels_digest(step, replay.model)}" if step.tuned else step.key
        self.tuner = replay.tuner
        self.alternatives = [[replay.build(s) for s in alt.steps] for alt in step.alternatives]
        self.values = [0] * len(step.values())
        self.symbolic = tuple(not isinstance(v, int) for v in step.shape)
        self.eligible = [True] * len(step.alternatives)
        self.default = 0
        self.shape_class = ""
        self.chosen = 0
        # "guards" | "default" | "cache" | "timed" | "forced" (PlanReplay.choose) | "warm" (module doc)
        # | "quick" (a first run's quicker-to-compile stand-in: runtime/ahead.py)
        self.source = "guards"
        self.wanted: tuple[int, str] | None = None  # with source "warm"/"quick": the choice it stands in for
        # Host control flow inside an alternative cannot be timed in isolation.
        self.timeable = not any(c.device_sync for alt in self.alternatives for c in walk_commands(alt))
        tensors = replay.model.tensors
        self.facts: AdapterFacts | None = None  # the adapter `evaluate` was made for
        self.evaluate = None
        self.written = sorted({replay.root(t) for t, w in step.uses() if w
                               and tensors[replay.root(t)].kind not in REUSABLE_KINDS})

    def refresh(self, replay: Replay) -> None:
        self.values = [int(value(v, replay.dims)) for v in self.step.values()]
        self.settle(replay)

    def set(self, kind: str, index: int, value: int) -> None:
        self.values[index] = value

    def settle(self, replay: Replay) -> None:
        self.wanted = None
        if self.facts is not replay.adapter_facts:  # at load, and after assume_adapter
            self.facts, self.evaluate = replay.adapter_facts, self.step.evaluator(replay.adapter_facts)
        self.eligible, self.default = self.evaluate(self.values)
        if self.tuned:
            shape = self.values[len(self.values) - len(self.symbolic):]
            self.shape_class = shape_class(shape, self.symbolic)
            self.tuner.place(self)
        else:
            self.chosen, self.source = self.default, "guards"

    def encode(self, backend: Backend) -> None:
        for cmd in self.alternatives[self.chosen]:
            cmd.encode(backend)

    def active(self) -> list[Command]:
        """The chosen alternative's commands (what a run replays in this one's place)."""
        return self.alternatives[self.chosen]

    def replayed_by(self, k: int) -> list[Command]:
        """What a run encodes when alternative `k` is chosen (nested Selects' choices now)."""
        return walk_commands(live_commands(self.alternatives[k]))

    def commands_of(self, k: int) -> list[Command]:
        """Alternative `k`'s commands, nested ones included."""
        return walk_commands(self.alternatives[k])

    def idle(self) -> list[Command]:
        """Every command of the alternatives not chosen, nested ones included."""
        return [c for k, alt in enumerate(self.alternatives) if k != self.chosen for c in walk_commands(alt)]


def limit_guarded_tensors(steps: Sequence[Step], root: Callable[[str], str]) -> set[str]:
    """The buffers (roots) only Select alternatives guarded by the device's storage-binding limit
    use (a `["limit", "maxStorageBufferBindingSize", bytes]` clause: FusedAttention's products
    and their scores). Past the limit such a buffer is not made: its alternatives are not
    eligible there, and any other step using it would need it (the runtime then refuses)."""
    guarded: set[str] = set()
    other: set[str] = set()

    def visit(steps: Sequence[Step], inside: bool) -> None:
        for s in steps:
            if isinstance(s, Select):
                for alt in s.alternatives:
                    visit(alt.steps, inside or any(c.op == "limit" and c.args[0] == "maxStorageBufferBindingSize"
                                                   for c in alt.guard.clauses))
            else:  # a container (branch, loop) counts whole: what it nests is not looked into
                (guarded if inside else other).update(root(t) for t, _ in s.uses())

    visit(steps, False)
    return guarded - other


def walk_commands(commands: list[Command]) -> list[Command]:
    """`commands` and every command nested in them (branch arms, loop bodies, alternatives)."""
    out: list[Command] = []
    for c in commands:
        out.append(c)
        for attr in ("then", "orelse", "body"):
            out.extend(walk_commands(getattr(c, attr, None) or []))
        if isinstance(c, SelectCommand):
            out.extend(walk_commands([x for alt in c.alternatives for x in alt]))
    return out


def live_commands(cmds: list[Command]) -> list[Command]:
    """What a run encodes: a Select's chosen alternative in its place, no dispatch with an
    empty grid now (an empty tensor)."""
    return [x for c in cmds for x in (live_commands(c.active()) if isinstance(c, SelectCommand) else (c,))
            if not isinstance(x, DispatchCommand) or all(x.workgroups)]


def idle_commands(commands: list[Command]) -> set[int]:
    """ids of the commands of alternatives their Select does not replay now."""
    return {id(c) for t in commands if isinstance(t, SelectCommand) for c in t.idle()}


__all__ = ["SelectCommand", "adapter_facts", "idle_commands", "live_commands", "walk_commands"]
