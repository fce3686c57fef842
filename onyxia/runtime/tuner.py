"""The autotuner: a tuned Select step's eligible alternatives timed on the adapter at hand, the
fastest kept.

A plan's tuned Select steps (plan/select.py) hold kernel variants of one computation. Replay
(runtime/select.py) asks the Tuner which alternative each replays for its current shape class
(its `shape` values for the current dims, symbolic ones rounded up to a power of two), among
the alternatives whose guards hold:
1. a choice in the disk cache, keyed by adapter (vendor, device, driver, backend), the step's
   key with a digest of its alternatives' kernels (a choice made for other kernels never
   replays) and the shape class;
2. otherwise the heuristic's choice (the guards' `prefer`), and, with tuning on, the step waits
   to be timed. Never on the way to a first result: not at load, not at the first run of a new
   shape class (the heuristic's choice serves it). Each later `run()` spends a slice of up to
   TuneSettings.slice_s timing the alternatives of waiting steps that have served a run (at
   least one alternative, then no new one past the slice; a step is chosen once all of its
   eligible alternatives are timed, over as many runs as that takes), as long as such work has
   taken at most TuneSettings.share of the time runs spent on their own (the first run at a
   class not counted); `PlanReplay.tune()` (`onyxia tune`, `onyxia bench`) times all of them
   at once. Timing a step: every eligible alternative, its kernels compiled first where the
   driver compiles at first dispatch (Backend.compile_now), a warm-up, then
   TuneSettings.repeats repetitions each (GPU timestamps where the adapter has them, wall time
   otherwise), the median decides; the default goes first, and an alternative whose first
   replay takes SLOWER_CUTOFF times the best one's is not timed further (its warm-up alone, at
   twice that; and where that cutoff is long, a probe over an eighth of its workgroups rules
   it out first: Whisper's GPU-style attention kernels on lavapipe, 4.1-4.4 s a replay against
   0.14 s for the best, took 8.5 and 9.5 s to time, and the whole step 23.6 s; now 7.1). A step whose timing passes
   TuneSettings.budget_s (summed over its slices) keeps the default, uncached, and is tried
   again at the next load (not at every run of this one). A step with one eligible alternative
   is not timed.

Measured on lavapipe (2 cores, mobilenet_v3_large at 1x3x224x224): timing at load cost 2.4 s of
a 5.5 s first result, and 3.6 s more at the first run of a new input shape; most of it is the
driver compiling kernels only the timing replays.

A choice never changes what is computed, only which kernels compute it: no recompiles and no
allocations (every alternative's buffers exist from load; its pipelines from its first replay). Timing runs kernels on
whatever the buffers hold; outputs the caller may still hold (graph outputs) are saved and
restored around it. The cache is one JSON file per adapter, written atomically (a temporary
file renamed over it) and read tolerantly: a missing, corrupt or foreign file costs a re-tune,
never an error. `ONYXIA_TUNE=0` turns tuning off (the heuristic everywhere, nothing timed),
`ONYXIA_CACHE_DIR` moves the cache (default `$XDG_CACHE_HOME/onyxia`, else `~/.cache/onyxia`).
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from onyxia.plan import Select, walk_steps
from onyxia.runtime.commands import Command, DispatchCommand

_OFF = ("0", "false", "no", "off")
CACHE_VERSION = 1
# Timing one step stops after this long (and so does one explicit tune() pass over a model's
# waiting steps): what is left keeps the heuristic until a later load.
DEFAULT_BUDGET_S = 3.0
# What a run after the first at a shape class may spend timing waiting steps (one alternative at least).
DEFAULT_SLICE_S = 0.25
# Work ahead of runs (timing, pipelines built ahead) starts only while it has taken at most this
# share of the time runs spent on their own work: a timed alternative's first replay makes
# lavapipe compile its kernel (0.3-1.5 s each), so one step can cost seconds, and a run that
# paid for one leaves the next runs alone until they have earned it back. Measured before this
# rule (mobilenet_v3_large, lavapipe): runs 2-13 took 0.8-5.0 s instead of ~0.3 s.
DEFAULT_SHARE = 0.1
DEFAULT_REPEATS = 5
# An alternative whose replay takes this many times the best one's is not timed further.
SLOWER_CUTOFF = 4.0
# Where the cutoff is at least PROBE_MIN_CUTOFF seconds, an alternative first runs on about a
# PROBE_SHARE-th of its workgroups; an estimate past twice the cutoff is its one sample: Whisper's
# GPU-style attention kernels on lavapipe (4.1-4.4 s a replay, the best 0.14 s) cost ~0.5 s each to
# rule out instead of a replay (the dispatch floor, ~60 us each, is noise at these times).
PROBE_SHARE = 8
PROBE_MIN_CUTOFF = 0.2


def probe_grid(workgroups: tuple[int, int, int], share: int) -> tuple[int, int, int]:
    """A probe's grid: the longest axis of `workgroups` cut to 1/`share`, rounded up."""
    grid = list(workgroups)
    axis = grid.index(max(grid))
    grid[axis] = -(-grid[axis] // share)
    return grid[0], grid[1], grid[2]


def default_cache_dir() -> Path:
    """ONYXIA_CACHE_DIR, else $XDG_CACHE_HOME/onyxia, else ~/.cache/onyxia."""
    explicit = os.environ.get("ONYXIA_CACHE_DIR", "").strip()
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "onyxia"


@dataclass(frozen=True)
class TuneSettings:
    enabled: bool = True
    cache_dir: Path | None = None  # None: no disk cache (choices last as long as the executor)
    budget_s: float = DEFAULT_BUDGET_S
    repeats: int = DEFAULT_REPEATS
    slice_s: float = DEFAULT_SLICE_S
    share: float | None = DEFAULT_SHARE  # None: a slice at every run after the first

    @staticmethod
    def from_env() -> TuneSettings:
        """The settings the environment asks for: ONYXIA_TUNE (on unless 0/false/no/off) and
        the cache directory (default_cache_dir)."""
        enabled = os.environ.get("ONYXIA_TUNE", "1").strip().lower() not in _OFF
        return TuneSettings(enabled=enabled, cache_dir=default_cache_dir())


@dataclass(frozen=True)
class TuneResult:
    """One timed step: seconds (median) per alternative label, and the label chosen."""

    key: str
    shape_class: str
    times: dict[str, float]
    choice: str


class TuneCache:
    """{(key, shape class): {"choice": label, "times": {label: seconds}}} of one adapter, in
    `<dir>/tuning-<hash of the adapter>.json`; beside them, the alternatives whose kernels a run
    or a helper device compiled on this adapter ({(key, shape class): [labels]}: where the
    driver keeps compiled kernels on disk, a later process's first run need not stand a quick
    variant in for those, runtime/ahead.py), and the times of steps that runs' slices have
    timed in part ({(key, shape class): {label: seconds}}): a later process goes on from there
    instead of timing the same alternatives again (a process of a few runs never finished one:
    whisper's conv step cost each process's second run ~0.5 s and was never chosen)."""

    def __init__(self, directory: Path, adapter: str):
        self.adapter = adapter
        digest = hashlib.sha256(adapter.encode()).hexdigest()[:16]
        self.path = directory / f"tuning-{digest}.json"
        self.entries, self.compiled, self.partial = self._read()

    @staticmethod
    def entry_key(key: str, shape_class: str) -> str:
        return f"{key}|{shape_class}"

    def _read(self) -> tuple[dict[str, dict], dict[str, list[str]], dict[str, dict[str, float]]]:
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            return {}, {}, {}
        if not isinstance(doc, dict) or doc.get("version") != CACHE_VERSION or doc.get("adapter") != self.adapter:
            return {}, {}, {}
        entries, compiled, partial = doc.get("entries"), doc.get("compiled"), doc.get("partial")
        entries = {k: e for k, e in entries.items() if isinstance(k, str) and isinstance(e, dict)
                   and isinstance(e.get("choice"), str)} if isinstance(entries, dict) else {}
        compiled = {k: [x for x in v if isinstance(x, str)] for k, v in compiled.items()
                    if isinstance(k, str) and isinstance(v, list)} if isinstance(compiled, dict) else {}
        partial = {k: {label: float(t) for label, t in v.items()
                       if isinstance(label, str) and isinstance(t, (int, float)) and t >= 0}
                   for k, v in (partial.items() if isinstance(partial, dict) else ())
                   if isinstance(k, str) and isinstance(v, dict) and k not in entries}
        return entries, compiled, partial

    def get(self, key: str, shape_class: str) -> str | None:
        entry = self.entries.get(self.entry_key(key, shape_class))
        return entry["choice"] if entry else None

    def has_compiled(self, key: str, shape_class: str, label: str) -> bool:
        return label in self.compiled.get(self.entry_key(key, shape_class), ())

    def partial_times(self, key: str, shape_class: str) -> dict[str, float]:
        """Seconds per alternative label of a step timed in part by an earlier process."""
        return dict(self.partial.get(self.entry_key(key, shape_class), {}))

    def put(self, results: Sequence[TuneResult], compiled: Sequence[tuple[str, str, str]] = (),
            partial: Sequence[tuple[str, str, dict[str, float]]] = ()) -> None:
        """Record `results`, the (key, shape class, label)s `compiled` and the (key, shape
        class, times) of steps timed in `partial`, and write the file (merged with what another
        process wrote since); a directory that cannot be written loses only the cache."""
        fresh, done, started = self._read()
        for r in results:
            ident = self.entry_key(r.key, r.shape_class)
            fresh[ident] = {"choice": r.choice, "times": r.times}
            started.pop(ident, None)
        for key, cls, label in compiled:
            labels = done.setdefault(self.entry_key(key, cls), [])
            if label not in labels:
                labels.append(label)
        for key, cls, times in partial:
            ident = self.entry_key(key, cls)
            if ident not in fresh:
                started[ident] = {**started.get(ident, {}), **times}
        self.entries, self.compiled, self.partial = fresh, done, started
        doc = {"version": CACHE_VERSION, "adapter": self.adapter, "entries": fresh, "compiled": done,
               "partial": started}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tuning-", suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w") as fh:
                    json.dump(doc, fh, indent=1, sort_keys=True)
                os.replace(tmp, self.path)  # atomic: readers see the old file or the new one
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError:
            pass


def shape_class(values: list[int], symbolic: tuple[bool, ...]) -> str:
    """Static values as they are, symbolic ones rounded up to a power of two."""
    return "x".join(str(1 << max(v - 1, 0).bit_length() if sym and v > 0 else v)
                    for v, sym in zip(values, symbolic))


def kernels_digest(step: Select, model: Any) -> str:
    """A short digest of the kernels a Select's alternatives dispatch: label, defs, template."""
    h = hashlib.sha256()
    for alt in step.alternatives:
        h.update(alt.label.encode())
        for s in walk_steps(alt.steps):
            for d in s.dispatches():
                spec = model.shaders[d.shader]
                h.update(repr((spec.label, spec.defs)).encode())
                h.update(model.templates[spec.template].encode())
    return h.hexdigest()[:12]


@dataclass
class Tuner:
    """The choices of one executor: from the cache, the default, or timing (see module doc)."""

    settings: TuneSettings
    adapter: str
    stats: Any  # the executor's ExecutorStats (tuning_timings, tuned)
    cache: TuneCache | None = None
    # SelectCommands waiting to be timed -> (their shape class, the executor's run count then)
    pending: dict[Any, tuple[str, int]] = field(default_factory=dict)
    chosen: dict[tuple[str, str], str] = field(default_factory=dict)  # this executor's timed choices
    # (key, shape class) the budget did not reach: the default until the next load (or a
    # forced tune), not timed again at every run that meets the class.
    deferred: set[tuple[str, str]] = field(default_factory=set)
    # (key, shape class) -> seconds per alternative label timed so far by runs' slices, and the
    # seconds those timings took (the step's budget)
    partial: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    spent: dict[tuple[str, str], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cache is None and self.settings.cache_dir is not None:
            self.cache = TuneCache(self.settings.cache_dir, self.adapter)

    def was_compiled(self, cmd: Any, k: int) -> bool:
        """Whether alternative `k` of the SelectCommand `cmd` ran or was compiled on this adapter
        at its shape class (in this or an earlier process, by the cache)."""
        return self.cache is not None and self.cache.has_compiled(cmd.key, cmd.shape_class, cmd.step.labels[k])

    def note_compiled(self, cmds: list[tuple[Any, int]]) -> None:
        """The alternatives (SelectCommand, index) whose kernels the driver now has."""
        if self.cache is not None and cmds:
            self.cache.put([], [(cmd.key, cmd.shape_class, cmd.step.labels[k]) for cmd, k in cmds])

    def known(self, key: str, cls: str) -> str | None:
        if not self.settings.enabled:  # off: the heuristic everywhere, not another process's timing
            return None
        label = self.chosen.get((key, cls))
        if label is None and self.cache is not None:
            label = self.cache.get(key, cls)
        return label

    def place(self, cmd: Any) -> None:
        """Set a tuned SelectCommand's `chosen` for its current shape class: the cached or timed
        choice where it is eligible now, else the heuristic's (and it waits for timing, unless
        one alternative alone is eligible: nothing to compare)."""
        labels = cmd.step.labels
        label = self.known(cmd.key, cmd.shape_class)
        if label in labels and cmd.eligible[labels.index(label)]:
            cmd.chosen, cmd.source = labels.index(label), "cache"
            self.pending.pop(cmd, None)
            return
        cmd.chosen, cmd.source = cmd.default, "default"
        if (self.settings.enabled and cmd.timeable and sum(cmd.eligible) > 1
                and (cmd.key, cmd.shape_class) not in self.deferred):
            waiting = self.pending.get(cmd)
            if waiting is None or waiting[0] != cmd.shape_class:  # since this run: it serves one first
                self.pending[cmd] = (cmd.shape_class, self.stats.runs)
        else:
            self.pending.pop(cmd, None)

    def ready(self) -> list[Any]:
        """The waiting steps that have served a run at their shape class (the first run at a
        class replays the heuristic's choice untimed: a first result never waits for timing)."""
        runs = self.stats.runs
        return [cmd for cmd, (_, since) in self.pending.items() if since < runs]

    def tune(self, replay: Any, commands: list[Command], budget_s: float | None = None,
             slice_s: float | None = None) -> list[TuneResult]:
        """Time every eligible alternative of the tuned SelectCommands in `commands` (one per key
        and shape class) and choose; the others keep their choice. Without `slice_s` (an explicit
        tune) `budget_s` bounds the whole pass. With `slice_s` (a run's slice) the unit of work is
        one alternative: the slice times one at least, then starts none past `slice_s`; a step's
        times so far wait in `partial` for later slices, and the step is chosen once every
        eligible alternative has one (`budget_s` then bounds each step's timing, summed over the
        slices). A run thus waits for one alternative's first replays, not a whole step's:
        Whisper's first conv at batch 2 (five alternatives, 0.25-0.9 s each on lavapipe with
        their compiles) held one run for 2.7 s."""
        commands = [c for c in commands if getattr(c, "tuned", False)]
        budget = self.settings.budget_s if budget_s is None else budget_s
        start = time.perf_counter()
        deadline = start + budget
        results: list[TuneResult] = []
        done: dict[tuple[str, str], TuneResult] = {}
        backend = replay.backend
        started = False
        for cmd in commands:
            ident = (cmd.key, cmd.shape_class)
            # A step like one timed already, in this pass or (a run's slice) an earlier one.
            known = done[ident].choice if ident in done else self.chosen.get(ident) if slice_s is not None else None
            if known is not None:
                self.pending.pop(cmd, None)
                self._choose(cmd, known)
                continue
            labels = cmd.step.labels
            eligible = [k for k, ok in enumerate(cmd.eligible) if ok]
            if slice_s is None:
                self.partial.pop(ident, None)  # an explicit tune times every alternative afresh
                self.spent.pop(ident, None)
            if ident not in self.partial and slice_s is not None and self.cache is not None:
                self.partial[ident] = self.cache.partial_times(*ident)  # where an earlier process stopped
            times = self.partial.setdefault(ident, {})
            # The default first: an alternative far slower than the best so far stops after one
            # replay (on lavapipe a GPU-style kernel can take 50x the chunked one's time).
            untimed = [k for k in eligible if labels[k] not in times]
            order = sorted(untimed, key=lambda k: k != cmd.chosen)
            over = not cmd.timeable
            paused = False
            saved = None
            try:
                for k in [] if over else order:
                    now = time.perf_counter()
                    if slice_s is not None:
                        if started and now > start + slice_s:
                            paused = True  # the rest waits for a later run's slice
                            break
                        deadline = now + budget - self.spent.get(ident, 0.0)
                    if time.perf_counter() > deadline:
                        over = True
                        break
                    if saved is None:  # outputs the caller may hold, restored after the timing
                        saved = [(replay.buffers[t], backend.copyout(replay.buffers[t], replay.capacity[t]))
                                 for t in cmd.written]
                    started = True
                    cutoff = SLOWER_CUTOFF * min(times.values()) if times else float("inf")
                    replay.build_programs(cmd.commands_of(k))  # pipelines are built at first need
                    # Compiled first where the driver compiles at first dispatch: the warm-up is
                    # then a replay, and one far over the cutoff is the only one (a GPU-style
                    # attention kernel at 20x the best took a compile and two replays).
                    if replay.limits.compiles_at_dispatch:
                        cold = replay.cold_dispatches(cmd.replayed_by(k))
                        backend.compile_now(cold)
                        replay.mark_warm(cold)
                    samples = self._probe(backend, cmd, k, cutoff) or backend.time_commands(
                        cmd.alternatives[k], self.settings.repeats, deadline, cutoff, warm=True)
                    replay.mark_warm(cmd.replayed_by(k))
                    times[labels[k]] = statistics.median(samples)
                    self.spent[ident] = self.spent.get(ident, 0.0) + time.perf_counter() - now
                    self.stats.tuning_timings += 1
            finally:
                for buf, raw in saved or ():
                    backend.copyin(buf, np.frombuffer(bytes(raw), dtype=np.uint8))
            if paused:
                if self.cache is not None and times:
                    self.cache.put([], partial=[(cmd.key, cmd.shape_class, times)])
                break
            self.pending.pop(cmd, None)
            self.partial.pop(ident, None)
            self.spent.pop(ident, None)
            if over:
                self.deferred.add(ident)  # over budget: the default, uncached
                continue
            # every eligible alternative timed (times from earlier slices of labels no longer
            # eligible left out), in timing order
            wanted = {labels[k] for k in eligible}
            mine = {label: t for label, t in times.items() if label in wanted}
            choice = min(mine, key=lambda label: mine[label])
            result = done[ident] = TuneResult(cmd.key, cmd.shape_class, mine, choice)
            results.append(result)
            self.chosen[ident] = choice
            self._choose(cmd, choice)
            self.stats.tuned += 1
        if results and self.cache is not None:
            self.cache.put(results)
        return results

    @staticmethod
    def _probe(backend: Any, cmd: Any, k: int, cutoff: float) -> list[float]:
        """Where the best alternative so far takes long enough that a replay far slower costs
        seconds: alternative `k` on a PROBE_SHARE-th of its workgroups first, and its estimate
        (the probe's time over that share) as its one sample if it is over twice the cutoff.
        [] otherwise: time it in full."""
        if not PROBE_MIN_CUTOFF <= cutoff < float("inf"):  # the first alternative: nothing to beat
            return []
        dispatches = [c for c in cmd.replayed_by(k) if isinstance(c, DispatchCommand) and all(c.workgroups)]
        if not dispatches:
            return []
        seconds, share = backend.probe_commands(dispatches, PROBE_SHARE)
        return [seconds / share] if share < 1 and seconds / share > 2 * cutoff else []

    @staticmethod
    def _choose(cmd: Any, label: str) -> None:
        cmd.chosen, cmd.source, cmd.wanted = cmd.step.labels.index(label), "timed", None


__all__ = ["TuneCache", "TuneResult", "TuneSettings", "Tuner", "default_cache_dir", "kernels_digest", "probe_grid",
           "shape_class"]
