"""Work ahead, the part of PlanReplay (runtime/replay.py) that runs do beyond their own work:
before a run after the first at its dims, a slice (TuneSettings.slice_s, within
TuneSettings.share of the runs' own time) that switches Selects back from warm stand-ins, times
the tuned Selects waiting (runtime/tuner.py) or builds pipelines ahead.

Warm first (runtime/select.py's module doc) keeps a new shape's first result from waiting for
the driver.
lavapipe compiles a kernel at its first dispatch (Limits.compiles_at_dispatch), so a program is
"warm" once a finished run (or the tuner's timing) dispatched it; elsewhere once it is built.
At new dims an interchangeable Select (plan.Select) whose choice is cold replays an eligible
warm alternative (`_prefer_warm`, from DimensionUpdates._commit), and a later run's work ahead
switches it back (`_upgrade`, from PlanReplay._ahead_slice), compiling a few kernels at a time.

Quick first does the same for the first run of a load, where helper devices compile ahead
(Backend.compiles_ahead: lavapipe with Mesa's disk cache on) and tuning is on: a tuned Select
replaying the heuristic's choice (no timed choice cached), whose kernels the tuning cache does
not know compiled on this adapter (Tuner.was_compiled), replays instead the variant of the same
kernel family (labels `family/variant`) whose kernels specialize the least text, where that is
at most QUICK_SHARE of the choice's: register tiles are generated bodies, and the driver's
compile time follows their size (lavapipe on Mesa 25, a 3x3 conv: 32x8 0.76 s, 16x8 0.41, 8x8
0.26; the 8x8 runs ~20 % slower). After that run the helpers compile the choices in the
background (`_hand_over`) and a later run switches each Select whose choice they have compiled
(`_switch_quick`: the driver's disk cache has it, the switch compiles nothing), noting it in the
tuning cache: a later process's first run replays it from the start. A process that ends before
then leaves the next one standing the quick variants in again (compiled already: its first run
stays fast). Measured (Mesa 25, 2 cores, fresh caches, each model alone, base and this
alternating): first runs mobilenet_v3_large 5.5-5.8 -> 4.1 s, efficientnet_b0 5.0-5.2 -> 3.1,
yolo_style 4.6 -> 3.0, regnet_y_400mf 3.5 -> 2.4, resnet18 2.5 -> 1.6, unet2d_small 7.2-7.5 ->
5.8-6.0; whole models with every quick variant in run 3-23 % slower (vae_decoder_small the most)
until switched.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from onyxia.runtime.commands import Command, DispatchCommand
from onyxia.runtime.select import SelectCommand, walk_commands

_UPGRADE_KERNELS = 2  # cold kernels one run may switch to (its own compile time)
_AHEAD_BATCH = 4  # pipelines a run's slice builds ahead at once
QUICK_SHARE = 0.5  # a quick stand-in specializes at most this share of its choice's text


class WorkAhead:
    """Mixin of PlanReplay: uses its programs, backend, limits, stats, tuner, _warm, _upgrades, _ahead, _new_dims,
    _counted, _upgrading, _build_many and _refresh_live."""

    programs: dict[int, Any]
    backend: Any
    limits: Any
    stats: Any
    tuner: Any
    _warm: set[int]
    _upgrades: dict[SelectCommand, None]
    _live_commands: list[Command]

    def mark_warm(self, commands: Sequence[Command]) -> None:
        """The programs of the dispatches in `commands` have run once: the driver compiled them."""
        programs = {id(c.program): c.program for c in commands
                    if isinstance(c, DispatchCommand) and c.program is not None and id(c.program) not in self._warm}
        self._warm.update(programs)
        if programs:
            self.stats.precompiled += self.backend.compiled(list(programs.values()))

    def _compile_ahead(self, commands: Sequence[Command]) -> None:
        """Where the driver compiles at first dispatch, hand the backend the programs the next
        run (`commands`) dispatches cold, in replay order: helper devices may compile them first
        (runtime/precompile.py)."""
        if self.limits.compiles_at_dispatch:
            programs = (self.programs.get(c.shader) for c in self.cold_dispatches(commands))
            self.backend.compile_ahead(list({id(p): p for p in programs if p is not None}.values()))

    def cold_dispatches(self, commands: Sequence[Command]) -> list[DispatchCommand]:
        """The dispatches in `commands` (in order) whose program no run has dispatched yet."""
        warm = self._warm
        return [c for c in commands if isinstance(c, DispatchCommand) and all(c.workgroups)
                and id(self.programs.get(c.shader)) not in warm]

    def _cold(self, commands: Sequence[Command]) -> set[int]:
        """Shaders of the dispatches in `commands` whose program no run has dispatched yet."""
        return {c.shader for c in self.cold_dispatches(commands)}

    def cold_kernels(self) -> int:
        """Kernels the next run dispatches that no run has dispatched yet (on lavapipe, what it
        will wait for the driver to compile)."""
        return len(self._cold(walk_commands(self._live_commands)))

    def _prefer_warm(self, cmd: SelectCommand) -> None:
        """At new dims after a first result: if `cmd`'s choice is cold, replay the first
        eligible warm alternative until a later run switches (_upgrade). Interchangeable Selects
        only (plan.Select: tuned ones, and untuned ones saying so), where any eligible
        alternative computes the same: another's may not (the FFT's level Selects: "skip" is
        always eligible, "run" preferred where the length needs the level; standing "skip" in
        for a cold "run" gave wrong spectra at a new length). Of an untuned one, only an
        alternative listed before the choice: a product's row classes go from one row up, and a
        wider class standing in computes rows nobody wants (16 for each of an LLM's decode
        products after a prefill ran the 16-row class), a narrower one its rows in more blocks
        (squeeze-excite convs at batch 2 in the one-row class)."""
        if (not cmd.interchangeable or not self.stats.runs or not self.tuner.settings.enabled
                or not self._cold(cmd.replayed_by(cmd.chosen))):
            return
        for k, ok in enumerate(cmd.eligible[:None if cmd.tuned else cmd.chosen]):
            if ok and k != cmd.chosen and not self._cold(cmd.replayed_by(k)):
                self._stand_in(cmd, k, "warm")
                self.stats.warm_first += 1
                return

    def _stand_in(self, cmd: SelectCommand, k: int, source: str) -> None:
        """`cmd` replays alternative `k` ("warm" or "quick") until switched back (_restore)."""
        cmd.wanted = (cmd.chosen, cmd.source)
        cmd.chosen, cmd.source = k, source
        self._upgrades[cmd] = None

    def _restore(self, cmd: SelectCommand) -> None:
        """`cmd` replays again the alternative its stand-in stood in for."""
        del self._upgrades[cmd]
        (cmd.chosen, cmd.source), cmd.wanted = cmd.wanted, None
        self.stats.upgraded += 1

    def _specialization(self, cmd: SelectCommand, k: int) -> int:
        """The text alternative `k`'s kernels specialize their templates with (their defs): the
        size of what the driver compiles beyond the family's common code."""
        shaders = {c.shader for c in cmd.commands_of(k) if isinstance(c, DispatchCommand)}
        return sum(len(str(v)) for i in shaders for _, v in self.model.shaders[i].defs)

    def _quick_first(self) -> None:
        """Before the first run of a load: stand in quick variants (the module doc)."""
        if self.stats.runs or not self.tuner.settings.enabled or not self.backend.compiles_ahead:
            return
        for cmd in self.commands:
            if (not isinstance(cmd, SelectCommand) or not cmd.tuned or cmd.source != "default"
                    or self.tuner.was_compiled(cmd, cmd.chosen)):
                continue
            labels = cmd.step.labels
            family, slash, _ = labels[cmd.chosen].partition("/")
            if not slash:
                continue
            size = self._specialization(cmd, cmd.chosen)
            quick = min(((self._specialization(cmd, k), k) for k, ok in enumerate(cmd.eligible)
                         if ok and k != cmd.chosen and labels[k].partition("/")[:2] == (family, "/")),
                        default=None)
            if quick is not None and quick[0] <= QUICK_SHARE * size:
                self._stand_in(cmd, quick[1], "quick")
                self.stats.load.quick += 1

    def _hand_over(self) -> None:
        """After the first run: the helpers compile, in the background, the choices quick
        variants stand in for (their pipelines built now: cheap where the driver compiles at
        dispatch)."""
        wanted = [c for cmd in self._upgrades if cmd.source == "quick" and cmd.wanted is not None
                  for c in cmd.replayed_by(cmd.wanted[0]) if isinstance(c, DispatchCommand)]
        if wanted:
            self.build_programs(wanted)
            cold = self.cold_dispatches(wanted)
            self.backend.compile_ahead(list({id(p): p for c in cold if (p := self.programs.get(c.shader))}.values()),
                                       background=True)

    def finish_quick(self, timeout_s: float = 120.0) -> int:
        """Wait (up to `timeout_s`) for the helpers to compile the choices this load's quick
        variants stand in for, and switch to them now: how many Selects switched. A benchmark's
        steady state, or a process about to exit that wants a later one's first run at full
        speed."""
        if not any(cmd.source == "quick" for cmd in self._upgrades):
            return 0
        if self.stats.runs == 0:
            return 0  # the choices are handed over after the first run
        self.backend.wait_ahead(timeout_s)
        before = self.stats.upgraded
        self._switch_quick()
        return self.stats.upgraded - before

    def _switch_quick(self) -> None:
        """Switch each Select replaying a quick variant whose choice the helpers have compiled."""
        switched: list[tuple[SelectCommand, int]] = []
        for cmd in list(self._upgrades):
            if cmd.source != "quick":
                continue
            if cmd.wanted is None or not cmd.eligible[cmd.wanted[0]]:
                del self._upgrades[cmd]
                continue
            programs = [self.programs.get(i) for i in self._cold(cmd.replayed_by(cmd.wanted[0]))]
            if programs and (None in programs or not self.backend.compiled_ahead(programs)):
                continue
            self._restore(cmd)
            switched.append((cmd, cmd.chosen))
        if switched:
            self.tuner.note_compiled(switched)
            self._refresh_live()

    def _upgrade(self) -> bool:
        """Switch Selects replaying a warm stand-in to the alternative they stand in for, as many
        as bring at most _UPGRADE_KERNELS cold kernels (at least one Select); this run pays for
        compiling them. False when none was waiting."""
        kernels: set[int] = set()
        switched = False
        for cmd in list(self._upgrades):
            if cmd.source == "quick":
                continue  # _switch_quick's
            if cmd.source != "warm" or cmd.wanted is None or not cmd.eligible[cmd.wanted[0]]:
                del self._upgrades[cmd]  # dims, timing or a forced choice moved it since
                continue
            cold = self._cold(cmd.replayed_by(cmd.wanted[0]))
            if switched and len(kernels | cold) > _UPGRADE_KERNELS:
                break
            kernels |= cold
            self._restore(cmd)
            switched = True
        if switched:
            self._refresh_live()
        return switched

    def hold_work_ahead(self) -> None:
        """The next run does nothing ahead: it is the first result at a new input shape
        (InferenceSession.run calls this when a feed's shape changes). Dims that change what a
        run replays hold it anyway; this covers the rest: vae_decoder_small at 24x40 after
        32x32 replays the same kernels, and its first call ran a slice timing the first size's
        choices (+0.8 s). A decode step's update (the next length) does not call it."""
        self._new_dims = True

    def _ahead_slice(self) -> None:
        """Work a run after the first at these dims does before its own, up to a slice
        (TuneSettings.slice_s): switch Selects replaying a warm stand-in to their choice (this
        run compiles its kernels), else time the tuned Selects waiting (runtime/tuner.py), else
        build pipelines ahead. A first result, at load, at dims that changed what a run
        replays or at a session's new input shape (hold_work_ahead), waits for none of it."""
        if self._new_dims or not self.stats.runs:
            self._new_dims = False
            return
        if self._upgrades:
            self._switch_quick()
        self._counted = True
        share = self.tuner.settings.share
        if share is not None and self.stats.tuning_s + self.stats.ahead_s > share * self.stats.run_s:
            return  # the runs since the last work ahead have not earned the next yet
        if self._upgrades and self._upgrade():  # the whole run counts as work ahead
            self._counted, self._upgrading = False, True
            return
        if self.tuner.pending:  # before the feeds land (timing writes outputs)
            ready = self.tuner.ready()
            if ready:
                start = time.perf_counter()
                self.tuner.tune(self, ready, slice_s=self.tuner.settings.slice_s)
                self._refresh_live()
                self.stats.tuning_s += time.perf_counter() - start
                return
        if self._ahead:
            start = time.perf_counter()
            deadline = start + self.tuner.settings.slice_s
            while self._ahead and (time.perf_counter() < deadline):
                batch = [i for i in self._ahead[-_AHEAD_BATCH:] if i not in self.programs]
                del self._ahead[-_AHEAD_BATCH:]
                try:
                    self._build_many(batch)  # together: on threads where the backend can
                except Exception:  # noqa: BLE001 - work ahead: a run that needs one builds it and says why
                    continue
                self.stats.prebuilt += len(batch)
            self.stats.ahead_s += time.perf_counter() - start
