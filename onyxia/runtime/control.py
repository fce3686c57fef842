"""Host control flow: the commands of ReadSymbol, BranchStep and LoopStep.

These are the only commands that may stop a run in the middle: a value the GPU computed decides
what is encoded next (a count, a condition). They call `backend.sync_read`, which submits the
work encoded so far, waits, reads a few bytes back and lets encoding go on; on lavapipe one such
sync costs 0.25-0.7 ms (benchmarks/bench_host_control.py). A plan without these steps (an LLM's decode step)
never pays it: PlanReplay only takes the slower readback path when a command here is present.

A LoopStep whose condition is not read back (Scan, a Loop whose condition stays true, the RNN
families' time loop) syncs nothing: its iterations are encoded into the run's one submission,
with the per-iteration copy offsets recorded as each iteration is encoded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxia.errors import ComputeError, InputError, OnyxiaError
from onyxia.ir import dtypes
from onyxia.plan import BranchStep, LoopStep, ReadSymbol
from onyxia.runtime.commands import Command, replays, value
from onyxia.runtime.contract import Backend, Replay

# A loop whose condition never turns false would hang the run: a host loop stops here with an
# error instead (about a minute of syncs on lavapipe).
MAX_LOOP_ITERATIONS = 1 << 20


def _scalar(raw: bytes | memoryview, dtype: dtypes.DType) -> int:
    return int(dtypes.from_device(bytes(raw[:4]), dtype, 1)[0])


@replays(ReadSymbol)
class ReadSymbolCommand(Command):
    """Reads a count back and sets its data symbol; from the host feed when it is an input."""

    __slots__ = ("step", "replay", "dtype", "buffer", "limit", "feed", "resolved", "device_sync")

    def __init__(self, step: ReadSymbol, index: int, replay: Replay) -> None:
        super().__init__(step, index, replay)
        self.step, self.replay = step, replay
        self.dtype = dtypes.from_name(replay.model.tensors[step.tensor].dtype)
        self.buffer = replay.buffers[replay.root(step.tensor)]
        self.limit: int | None = None
        # A graph input's value is on the host already: PlanReplay.run passes it in (take).
        self.feed = step.tensor if step.tensor in replay.model.inputs else None
        self.device_sync = self.feed is None
        self.resolved = False

    def refresh(self, replay: Replay) -> None:
        self.limit = None if self.step.limit is None else int(value(self.step.limit, replay.dims))

    def set(self, kind: str, index: int, value: int) -> None:
        self.limit = value

    def rebind(self, replay: Replay, grown: set[str]) -> None:
        self.buffer = replay.buffers[replay.root(self.step.tensor)]

    def take(self, feed: np.ndarray) -> None:
        """The value from the fed array: no sync in this run."""
        flat = np.asarray(feed).reshape(-1)
        if flat.size != 1:
            raise InputError(f"input '{self.step.tensor}' must hold one value (it sets {self.step.symbol}), "
                             f"got {flat.size}")
        self._set(int(flat[0]))
        self.resolved = True

    def _set(self, v: int) -> None:
        if v < 0 or (self.limit is not None and v > self.limit):
            bound = f"[0, {self.limit}]" if self.limit is not None else "non-negative"
            raise InputError(f"tensor '{self.step.tensor}' holds {v}, which must be {bound} "
                             f"(it sizes '{self.step.symbol}')")
        self.replay.set_data_symbol(self.step.symbol, v)

    def encode(self, backend: Backend) -> None:
        if self.resolved:
            return
        v = _scalar(backend.sync_read(self.buffer, 4), self.dtype)
        if self.dtype == dtypes.INT64 and v == dtypes.INT64_LOST:  # the mark, not a number
            raise ComputeError(f"tensor '{self.step.tensor}' (it sizes '{self.step.symbol}') holds an int64 value "
                               "lost upstream: outside ±(2^31 - 1), the range the GPU holds int64 in")
        self._set(v)


@replays(BranchStep)
class BranchCommand(Command):
    """If on the device's condition: one readback (none for a fed condition), then the arm it
    picks, then the data symbols that size the If's outputs as that arm gave them."""

    __slots__ = ("step", "replay", "buffer", "then", "orelse", "values", "feed", "resolved", "fed")
    device_sync = True  # also when fed: output sizes are known only once the arm is chosen

    def __init__(self, step: BranchStep, index: int, replay: Replay) -> None:
        super().__init__(step, index, replay)
        self.step, self.replay = step, replay
        self.buffer = replay.buffers[replay.root(step.cond)]
        self.values = [0] * (len(step.then_dims) + len(step.orelse_dims))
        self.feed = step.cond if step.cond in replay.model.inputs else None
        self.resolved, self.fed = False, False
        self.then = [replay.build(s) for s in step.then]
        self.orelse = [replay.build(s) for s in step.orelse]

    def refresh(self, replay: Replay) -> None:
        self.values = [int(value(v, replay.dims)) for _, v in (*self.step.then_dims, *self.step.orelse_dims)]

    def set(self, kind: str, index: int, value: int) -> None:
        self.values[index] = value

    def rebind(self, replay: Replay, grown: set[str]) -> None:
        self.buffer = replay.buffers[replay.root(self.step.cond)]

    def take(self, feed: np.ndarray) -> None:
        """The condition from the fed array: no sync in this run."""
        flat = np.asarray(feed).reshape(-1)
        if flat.size != 1:
            raise InputError(f"input '{self.step.cond}' must hold one value (the condition of If "
                             f"'{self.step.label}'), got {flat.size}")
        self.fed = bool(flat[0])

    def encode(self, backend: Backend) -> None:
        taken = self.fed if self.resolved else _scalar(backend.sync_read(self.buffer, 4), dtypes.BOOL) != 0
        arm = "then_branch" if taken else "else_branch"
        try:
            for cmd in self.then if taken else self.orelse:
                cmd.encode(backend)
        except OnyxiaError as exc:  # a count out of range, a loop past its limit: say where
            exc.args = (f"If '{self.step.label}' {arm}: {exc}", *exc.args[1:])
            raise
        dims, offset = (self.step.then_dims, 0) if taken else (self.step.orelse_dims, len(self.step.then_dims))
        for k, (symbol, _) in enumerate(dims):
            self.replay.set_data_symbol(symbol, self.values[offset + k])


class _RangeCopy:
    """A copy as backend.copy reads it (the fields of a CopyCommand), re-aimed per iteration."""

    __slots__ = ("src_buffer", "dst_buffer", "size", "src_offset", "dst_offset", "step")

    def __init__(self) -> None:
        self.src_buffer = self.dst_buffer = None
        self.size = self.src_offset = self.dst_offset = 0
        self.step = None


@replays(LoopStep)
class LoopCommand(Command):
    """Loop/Scan on the host: the body's commands encoded once per iteration."""

    __slots__ = ("step", "replay", "body", "values", "copies", "buffers", "cond", "counter", "table",
                 "table_size", "device_sync", "_copy", "first")

    def __init__(self, step: LoopStep, index: int, replay: Replay) -> None:
        super().__init__(step, index, replay)
        self.step, self.replay = step, replay
        self.copies = (*step.enter, *step.leave)
        self.values = [0] * (1 + 5 * len(self.copies))
        self.device_sync = step.cond is not None or step.first is not None or step.iterations is not None
        self.table: Any = None  # int32 0, 1, 2, ...: the counter's source (copied, no kernel)
        self.table_size = 0
        self._copy = _RangeCopy()
        self.rebind(replay, set())
        self.body = [replay.build(s) for s in step.body]

    def refresh(self, replay: Replay) -> None:
        s = self.step
        flat = (s.trip_count, *(v for c in self.copies for v in c.values()))
        self.values = [int(value(v, replay.dims)) for v in flat]

    def set(self, kind: str, index: int, value: int) -> None:
        self.values[index] = value

    def rebind(self, replay: Replay, grown: set[str]) -> None:
        def buf(name: str | None) -> Any:
            return None if name is None else replay.buffers[replay.root(name)]
        self.cond, self.first, self.counter = buf(self.step.cond), buf(self.step.first), buf(self.step.counter)
        self.buffers = [(buf(c.src), buf(c.dst)) for c in self.copies]

    def _ensure_table(self, count: int) -> None:
        """The index table holds at least `count` entries (grown between synced iterations, or
        before the loop when every iteration goes into one submission)."""
        if self.step.counter is None or count <= self.table_size:
            return
        size = max(count, 2 * self.table_size, 16)
        table = self.replay.backend.alloc(f"{self.step.label}/iteration-index", 4 * size)
        self.replay.backend.copyin(table, np.arange(size, dtype=np.int32))
        if self.table is not None:
            self.replay.backend.free(self.table)
        self.table, self.table_size = table, size

    def _copy_range(self, backend: Backend, src: Any, src_offset: int, dst: Any, dst_offset: int, size: int) -> None:
        c = self._copy
        c.src_buffer, c.dst_buffer, c.size, c.src_offset, c.dst_offset = src, dst, size, src_offset, dst_offset
        if size:
            backend.copy(c)

    def encode(self, backend: Backend) -> None:
        trip = self.values[0]
        synced = self.step.cond is not None
        if not synced and trip > MAX_LOOP_ITERATIONS:
            raise InputError(f"Loop '{self.step.label}' would run {trip} iterations, over the host loop's limit "
                             f"of {MAX_LOOP_ITERATIONS}")
        if self.first is not None and not _scalar(backend.sync_read(self.first, 4), dtypes.BOOL):
            trip = 0
        self._ensure_table(min(trip, 64) if synced else trip)
        i = 0
        while i < trip:
            if i >= MAX_LOOP_ITERATIONS:
                raise InputError(f"Loop '{self.step.label}' ran {i} iterations without its condition turning "
                                 "false; stopped at the host loop's limit")
            self._ensure_table(i + 1)  # grows only between synced iterations
            if self.step.counter is not None:
                self._copy_range(backend, self.table, 4 * i, self.counter, 0, 4)
            self._copies(backend, i, 0, len(self.step.enter))
            for cmd in self.body:
                cmd.encode(backend)
            self._copies(backend, i, len(self.step.enter), len(self.copies))
            i += 1
            if synced and i < trip and not _scalar(backend.sync_read(self.cond, 4), dtypes.BOOL):
                break
        if self.step.iterations is not None:
            self.replay.set_data_symbol(self.step.iterations, i)

    def _copies(self, backend: Backend, i: int, start: int, stop: int) -> None:
        v = self.values
        for k in range(start, stop):
            size, src_off, src_stride, dst_off, dst_stride = v[1 + 5 * k:6 + 5 * k]
            src, dst = self.buffers[k]
            self._copy_range(backend, src, src_off + i * src_stride, dst, dst_off + i * dst_stride, size)


__all__ = ["BranchCommand", "LoopCommand", "MAX_LOOP_ITERATIONS", "ReadSymbolCommand"]
