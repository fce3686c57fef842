"""NullBackend: replays a plan without a GPU, for tests of everything but the kernels.

Buffers are host bytearrays; host writes, feed uploads, buffer copies and readback really happen,
kernels are recorded and never run. Every allocation, free, program build (with its rendered
WGSL), bind group and encoded command is kept, so memory planning, reallocation, recompiles and
update_dimensions are testable in tests/unit:

    exe = null_executor(compiled)
    exe.update_dimensions({"seq": 3})
    exe.run(feeds)
    exe.backend.runs[-1]  # [DispatchRecord(...), CopyRecord(...), ...]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onyxia.codegen.transport import IMMEDIATE, Transport
from onyxia.plan import Binding, CompiledModel, ShaderSpec
from onyxia.runtime.commands import Command, CopyCommand, DispatchCommand
from onyxia.runtime.contract import FeedCopy, Limits, Readback
from onyxia.runtime.replay import PlanReplay
from onyxia.runtime.tuner import TuneSettings, probe_grid

# Vulkan guarantees 128 bytes of push constants; most desktop drivers give 256.
NULL_LIMITS = Limits(max_workgroups=65535, max_binding_bytes=1 << 27, max_immediate_bytes=128)


@dataclass(eq=False)
class NullBuffer:
    label: str
    data: bytearray
    freed: bool = False

    @property
    def nbytes(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class NullProgram:
    label: str
    code: str  # the rendered WGSL
    transport: Transport


@dataclass(frozen=True)
class NullBindGroup:
    buffers: tuple[NullBuffer, ...]


@dataclass(frozen=True)
class DispatchRecord:
    shader: str  # label
    workgroups: tuple[int, int, int]
    params: tuple[int, ...]  # the parameter words as the kernel would read them
    buffers: tuple[str, ...]  # labels of the bound buffers


@dataclass(frozen=True)
class CopyRecord:
    src: str
    dst: str
    size: int
    src_offset: int
    dst_offset: int


@dataclass
class NullBackend:
    limits: Limits = NULL_LIMITS
    allocations: list[NullBuffer] = field(default_factory=list)  # in order, freed ones included
    programs: list[NullProgram] = field(default_factory=list)  # every build, recompiles included
    bind_groups: int = 0
    param_uploads: int = 0  # params_changed calls (the uniform transport's upload)
    runs: list[list[DispatchRecord | CopyRecord]] = field(default_factory=list)  # encoded per run
    syncs: int = 0  # sync_read calls (host control flow reading a value back mid-run)
    timed: list[list[str]] = field(default_factory=list)  # shader labels of each time_commands call
    probed: list[int] = field(default_factory=list)  # workgroups of each probe_commands call
    words: np.ndarray = field(default_factory=lambda: np.zeros(1, np.uint32))

    @property
    def live(self) -> list[NullBuffer]:
        return [b for b in self.allocations if not b.freed]

    @property
    def live_bytes(self) -> int:
        return sum(b.nbytes for b in self.live)

    # ---- allocator ------------------------------------------------------------------------
    def alloc(self, label: str, nbytes: int) -> NullBuffer:
        if nbytes > self.limits.max_binding_bytes:  # what wgpu would refuse
            raise AssertionError(f"replay allocated {nbytes} bytes for '{label}', over the binding limit")
        buf = NullBuffer(label, bytearray(nbytes))
        self.allocations.append(buf)
        return buf

    def free(self, buffer: NullBuffer) -> None:
        assert not buffer.freed, f"'{buffer.label}' freed twice"
        buffer.freed = True

    def copyin(self, buffer: NullBuffer, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).tobytes()
        assert not buffer.freed and len(raw) <= buffer.nbytes, (buffer.label, len(raw), buffer.nbytes)
        buffer.data[:len(raw)] = raw

    def copyout(self, buffer: NullBuffer, nbytes: int) -> bytes:
        assert not buffer.freed and nbytes <= buffer.nbytes, (buffer.label, nbytes, buffer.nbytes)
        return bytes(buffer.data[:nbytes])

    # ---- programs -------------------------------------------------------------------------
    def layout(self, spec: ShaderSpec, bindings: Sequence[Binding]) -> tuple[Binding, ...]:
        return tuple(bindings)

    def program(self, spec: ShaderSpec, code: str, layout: Any, transport: Transport) -> NullProgram:
        program = NullProgram(spec.label, code, transport)
        self.programs.append(program)
        return program

    def make_programs(self, jobs: Sequence[tuple[ShaderSpec, str, Any, Transport]],
                 done: Callable[[int], None] | None = None) -> list[NullProgram]:
        out = []
        for job in jobs:
            out.append(self.program(*job))
            if done is not None:
                done(len(out))
        return out

    compiles_ahead = False  # no helper devices

    def compile_ahead(self, programs: Sequence[NullProgram], background: bool = False) -> None:
        pass  # nothing compiles at dispatch here

    def compiled_ahead(self, programs: Sequence[NullProgram]) -> bool:
        return False

    def wait_ahead(self, timeout_s: float) -> bool:
        return True

    def compiled(self, programs: Sequence[NullProgram]) -> int:
        return 0

    def compile_now(self, commands: Sequence[Any]) -> None:
        pass  # nor here

    def bind(self, layout: Any, buffers: Sequence[NullBuffer]) -> NullBindGroup:
        self.bind_groups += 1
        return NullBindGroup(tuple(buffers))

    # ---- parameters -----------------------------------------------------------------------
    def prepare(self, commands: Sequence[Command], words: np.ndarray, uniform_words: int) -> None:
        self.words = words

    def params_changed(self) -> None:
        self.param_uploads += 1

    # ---- replay ---------------------------------------------------------------------------
    def execute(self, commands: Sequence[Command], feeds: Sequence[FeedCopy],
                readback: Sequence[Readback]) -> list[bytes]:
        for f in feeds:
            f.dst.data[:f.nbytes] = f.src.data[:f.nbytes]
        self._encoded: list[DispatchRecord | CopyRecord] = []
        for cmd in commands:
            cmd.encode(self)
        self.runs.append(self._encoded)
        return [self.copyout(r.buffer, r.nbytes) for r in readback]

    def dispatch(self, cmd: DispatchCommand) -> None:
        if not all(cmd.workgroups):
            return
        assert all(0 < n <= self.limits.max_workgroups for n in cmd.workgroups), cmd.workgroups
        assert cmd.bindings is not None, f"dispatch of {cmd.program.label} replayed without its bind group"
        assert all(not b.freed for b in cmd.bindings.buffers), "dispatch binds a freed buffer"
        params = tuple(int(w) for w in np.frombuffer(cmd.params, np.uint32)) if cmd.params is not None else ()
        self._encoded.append(DispatchRecord(cmd.program.label, cmd.workgroups, params,
                                            tuple(b.label for b in cmd.bindings.buffers)))

    def sync_read(self, buffer: NullBuffer, nbytes: int) -> bytes:
        self.syncs += 1
        return self.copyout(buffer, nbytes)

    def copy(self, cmd: CopyCommand) -> None:
        src, dst = cmd.src_buffer, cmd.dst_buffer
        assert cmd.src_offset + cmd.size <= src.nbytes and cmd.dst_offset + cmd.size <= dst.nbytes, cmd.step
        dst.data[cmd.dst_offset:cmd.dst_offset + cmd.size] = src.data[cmd.src_offset:cmd.src_offset + cmd.size]
        self._encoded.append(CopyRecord(src.label, dst.label, cmd.size, cmd.src_offset, cmd.dst_offset))

    def probe_commands(self, commands: Sequence[Any], share: int) -> tuple[float, float]:
        """The cut grids' stand-in cost (one microsecond a workgroup, as time_commands) and their
        share of the workgroups."""
        full = sum(math.prod(cmd.workgroups) for cmd in commands)
        part = sum(math.prod(probe_grid(cmd.workgroups, share)) for cmd in commands)
        self.probed.append(part)
        return part * 1e-6, (part / full if full else 1.0)

    def time_commands(self, commands: Sequence[Command], repeats: int, deadline: float,
                      cutoff: float = float("inf"), warm: bool = False) -> list[float]:
        """No kernels run here: a stand-in cost, one microsecond per workgroup launched (so
        tests of the tuner see a deterministic fastest alternative)."""
        saved = getattr(self, "_encoded", None)
        self._encoded = []
        for cmd in commands:
            cmd.encode(self)
        launched = [r for r in self._encoded if isinstance(r, DispatchRecord)]
        self._encoded = saved  # type: ignore[assignment]
        self.timed.append([r.shader for r in launched])
        cost = sum(x * y * z for r in launched for x, y, z in (r.workgroups,)) * 1e-6
        return [cost] * (1 if cost > cutoff else repeats)


def null_executor(model: CompiledModel, *, transport: str | Transport = IMMEDIATE,
                  limits: Limits = NULL_LIMITS, tuning: TuneSettings | None = None) -> PlanReplay:
    """A PlanReplay of `model` on a fresh NullBackend (no GPU, no kernels run)."""
    return PlanReplay(model, NullBackend(limits), transport=transport, tuning=tuning)


__all__ = ["CopyRecord", "DispatchRecord", "NULL_LIMITS", "NullBackend", "NullBuffer", "NullProgram", "null_executor"]
