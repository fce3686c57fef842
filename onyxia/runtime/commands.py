"""Replay commands: each plan Step kind in the form the replay loop runs it.

A command holds its step's values evaluated for the current dimensions (workgroup counts,
parameter words, copy sizes, host data) and the backend objects it uses (program, bind group,
buffers). Each Step kind has one command class, registered with `@replays(StepKind)`; adding a
step kind means one Step subclass in plan.py and one command class here, nothing else.

The methods a command implements, all called by Replay:
- `refresh(replay)`: evaluate every value for `replay.dims` (load time, and after a failed update);
- `set(kind, index, value)`: patch one symbolic value (kinds as in SymbolicBinding);
- `settle(replay)`: recompute derived state after patches (fold a grid, write host data);
- `rebind(replay, grown)`: follow buffers that were reallocated;
- `encode(backend)`: record the per-run work (one call per run; most of the replay cost);
- `dispatches()`, `param_word(index)`: its kernel launches and where their parameters live.

No wgpu here: backends are reached through the calls in runtime/replay.py's `Backend`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onyxia.codegen.transport import Transport
from onyxia.errors import PlanError
from onyxia.ir import dtypes
from onyxia.ir.shapes import SymDim
from onyxia.plan import CopyBuffer, Dispatch, Step, WriteBuffer
from onyxia.runtime.contract import Backend, Replay

_COMMANDS: dict[type[Step], type[Command]] = {}


def value(v: Any, dims: dict[str, int]) -> Any:
    return v.evaluate(dims) if isinstance(v, SymDim) else v


def word(v: Any, type_: str) -> int:
    """A parameter value as the 32-bit word the kernel reads."""
    return int(np.float32(v).view(np.uint32)) if type_ == "f32" else int(v) & 0xFFFFFFFF


def replays(step_kind: type[Step]) -> Callable[[type[Command]], type[Command]]:
    """Class decorator: `cls` is the command that replays steps of `step_kind`."""
    def register(cls: type[Command]) -> type[Command]:
        _COMMANDS[step_kind] = cls
        return cls
    return register


def command_for(step: Step, index: int, replay: Replay) -> Command:
    cls = _COMMANDS.get(type(step))
    if cls is None:
        raise PlanError(f"step {index} is a {type(step).__name__}, which this runtime cannot replay "
                        f"(known: {', '.join(sorted(k.__name__ for k in _COMMANDS))})")
    return cls(step, index, replay)


class Command:
    __slots__ = ("index",)
    per_run = True  # False: work done at load and on dimension changes only (host writes)
    device_sync = False  # True: encoding it may read a value back from the GPU (runtime/control.py)

    def __init__(self, step: Step, index: int, replay: Replay) -> None:
        self.index = index

    def refresh(self, replay: Replay) -> None:
        pass

    def set(self, kind: str, index: int, value: int) -> None:
        raise PlanError(f"step {self.index} has no '{kind}' value {index}")

    def settle(self, replay: Replay) -> None:
        pass

    def rebind(self, replay: Replay, grown: set[str]) -> None:
        pass

    def encode(self, backend: Backend) -> None:
        pass

    def dispatches(self) -> tuple[DispatchCommand, ...]:
        return ()

    def param_word(self, index: int) -> tuple[int, str]:
        """(position in the replay's parameter memory, type) of parameter `index`."""
        raise PlanError(f"step {self.index} has no parameter {index}")


@replays(Dispatch)
class DispatchCommand(Command):
    """A kernel launch. Its parameter words live in the replay's parameter memory (`params` is
    this dispatch's slice), so update_dimensions patches them all in one vectorized scatter."""

    __slots__ = ("step", "shader", "types", "transport", "param_offset", "params", "raw_workgroups",
                 "workgroups", "program", "bindings", "bind_params")

    def __init__(self, step: Dispatch, index: int, replay: Replay) -> None:
        super().__init__(step, index, replay)
        self.step = step
        self.shader = step.shader
        spec = replay.model.shaders[step.shader]
        self.types = tuple(p.type for p in spec.immediates)
        self.transport: Transport = replay.shader_transport[step.shader]
        self.param_offset = 0
        self.params: memoryview | None = None  # set by the replay's parameter layout
        self.raw_workgroups = [0, 0, 0]  # as the plan computes them
        self.workgroups = (0, 0, 0)  # as dispatched (a long grid folded into 2-D)
        self.program: Any = replay.program_for(step)
        # Made with the program when a run first replays this dispatch (PlanReplay.build_programs):
        # an idle Select alternative costs no bind group, at load or when buffers regrow.
        self.bindings: Any = None
        self.bind_params: Any = None  # the backend's way of passing `params` (None: no params)

    def refresh(self, replay: Replay) -> None:
        dims = replay.dims
        words = replay.param_words
        for j, (v, t) in enumerate(zip(self.step.immediates, self.types)):
            words[self.param_offset + j] = word(value(v, dims), t)
        self.raw_workgroups = [int(value(v, dims)) for v in self.step.workgroups]
        self.settle(replay)

    def set(self, kind: str, index: int, value: int) -> None:
        # Immediates never come here: Replay scatters them into the parameter memory.
        self.raw_workgroups[index] = value

    def settle(self, replay: Replay) -> None:
        x, y, z = self.raw_workgroups
        limit = replay.limits.max_workgroups
        if x > limit and y == 1:  # fold a long 1-D grid into 2-D; kernels use the flat index
            y = -(-x // limit)
            x = -(-x // y)
        self.workgroups = (x, y, z)

    def rebind(self, replay: Replay, grown: set[str]) -> None:
        if self.bindings is not None and any(replay.root(b.tensor) in grown for b in self.step.bindings):
            self.bindings = None  # remade when next replayed (PlanReplay.build_programs)

    def encode(self, backend: Backend) -> None:
        backend.dispatch(self)

    def dispatches(self) -> tuple[DispatchCommand, ...]:
        return (self,)

    def param_word(self, index: int) -> tuple[int, str]:
        return self.param_offset + index, self.types[index]


@replays(CopyBuffer)
class CopyCommand(Command):
    """A buffer-to-buffer copy, with its byte size and offsets evaluated."""

    __slots__ = ("step", "src", "dst", "src_buffer", "dst_buffer", "size", "src_offset", "dst_offset")

    def __init__(self, step: CopyBuffer, index: int, replay: Replay) -> None:
        super().__init__(step, index, replay)
        self.step = step
        self.src, self.dst = replay.root(step.src), replay.root(step.dst)
        self.src_buffer, self.dst_buffer = replay.buffers[self.src], replay.buffers[self.dst]
        self.size = self.src_offset = self.dst_offset = 0

    def refresh(self, replay: Replay) -> None:
        s = self.step
        self.size, self.src_offset, self.dst_offset = (
            int(value(v, replay.dims)) for v in (s.size, s.src_offset, s.dst_offset))

    def set(self, kind: str, index: int, value: int) -> None:
        if index == 0:
            self.size = value
        elif index == 1:
            self.src_offset = value
        else:
            self.dst_offset = value

    def rebind(self, replay: Replay, grown: set[str]) -> None:
        self.src_buffer, self.dst_buffer = replay.buffers[self.src], replay.buffers[self.dst]

    def encode(self, backend: Backend) -> None:
        if self.size:
            backend.copy(self)


@replays(WriteBuffer)
class WriteCommand(Command):
    """Host data that depends only on dimensions: written at load and when its values change."""

    __slots__ = ("step", "dst", "dtype", "data")
    per_run = False

    def __init__(self, step: WriteBuffer, index: int, replay: Replay) -> None:
        super().__init__(step, index, replay)
        self.step = step
        self.dst = replay.root(step.dst)
        self.dtype = dtypes.from_name(step.dtype)
        self.data = np.zeros(len(step.data), dtype=self.dtype.numpy)

    def refresh(self, replay: Replay) -> None:
        for i, v in enumerate(self.step.data):
            self.data[i] = value(v, replay.dims)
        self.settle(replay)

    def set(self, kind: str, index: int, value: int) -> None:
        self.data[index] = value

    def settle(self, replay: Replay) -> None:
        if self.data.size:
            replay.backend.copyin(replay.buffers[self.dst], dtypes.to_device(self.data, self.dtype, f"'{self.dst}'"))

    def rebind(self, replay: Replay, grown: set[str]) -> None:
        if self.dst in grown:  # a new buffer starts empty
            self.settle(replay)
