"""The contract between the replay core, its commands and a backend.

Commands (runtime/commands.py) read a few things of the replay and call back into the
backend; the replay (runtime/replay.py) builds commands and drives a backend. Both sides are
described here as plain records and protocols, so that neither module imports the other's
class and backends (wgpu, null) depend on this small surface only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from onyxia.codegen.transport import Transport
from onyxia.plan import Binding, CompiledModel, Dispatch, ShaderSpec, Step


class Command(Protocol):
    """A replay command as a backend sees it (runtime/commands.py has the classes)."""

    def encode(self, backend: Backend) -> None: ...


@dataclass(frozen=True)
class Limits:
    """The device limits replay decisions depend on."""

    max_workgroups: int = 65535  # per grid dimension; longer 1-D grids are folded into 2-D
    max_binding_bytes: int = 1 << 27  # maxStorageBufferBindingSize: the largest buffer
    max_immediate_bytes: int = 0  # push-constant bytes (0: none; shaders use the uniform buffer)
    native_f16: bool = False  # shader-f16: float16 buffers are `array<f16>` (else packed in u32)
    packed_f16_reads: bool = False  # with native_f16, vec4 reads of read-only float16 buffers packed
    wide_reads: bool = False  # shader-int64: `wide` buffers and raw weight codes read as 64-bit words
    subgroups: bool = False  # subgroup operations: shaders render with the ONYXIA_SUBGROUPS def
    subgroup_size: int = 0  # lanes of a workgroup-of-8 kernel's subgroup where probed (Runtime), else 0
    indexed_private: bool = False  # staging in a private array (ONYXIA_INDEXED_PRIVATE; device.py says where)
    wide_register_tiles: bool = False  # the "wide-register-tiles" adapter trait (device.py says where)
    guarded_loads: bool = False  # the "guarded-loads" adapter trait (device.py says where)
    cpu_adapter: bool = False  # a CPU-type adapter (lavapipe): the kind Select guards see
    # The driver compiles a kernel at its first dispatch, not when its pipeline is made (lavapipe:
    # llvmpipe generates the code at launch): a built pipeline is not yet warm (runtime/select.py).
    compiles_at_dispatch: bool = False
    adapter: str = "null"  # vendor/device/driver/backend: whose timings the tuning cache holds


@dataclass(frozen=True)
class FeedCopy:
    """A device tensor fed as an input: copied into the input's buffer at the start of a run."""

    src: Any
    dst: Any
    nbytes: int


@dataclass(frozen=True)
class Readback:
    """An output read back after a run (`capacity`: its buffer's size, for staging)."""

    name: str
    buffer: Any
    nbytes: int
    capacity: int


class Backend(Protocol):
    """What replay asks of a device. Buffers, layouts, programs and bind groups are opaque."""

    limits: Limits

    # Allocator
    def alloc(self, label: str, nbytes: int) -> Any: ...
    def free(self, buffer: Any) -> None: ...
    def copyin(self, buffer: Any, data: np.ndarray) -> None: ...
    def copyout(self, buffer: Any, nbytes: int) -> bytes | memoryview: ...

    # Programs: a layout per shader (from its first dispatch's bindings), a program per
    # (shader, static dims), a bind group per dispatch.
    def layout(self, spec: ShaderSpec, bindings: Sequence[Binding]) -> Any: ...
    def program(self, spec: ShaderSpec, code: str, layout: Any, transport: Transport) -> Any: ...
    # Several programs, one per (spec, code, layout, transport) job, perhaps built in parallel;
    # `done(n)` after each (n built so far).
    def make_programs(self, jobs: Sequence[tuple[ShaderSpec, str, Any, Transport]],
                 done: Callable[[int], None] | None = None) -> list[Any]: ...
    # Where the driver compiles at first dispatch (Limits.compiles_at_dispatch): the next run's
    # programs not dispatched yet, in replay order, which the backend may compile ahead on other
    # threads (runtime/precompile.py; `compiles_ahead` says whether it does; `background`: programs
    # no run replays yet, after those); whether the driver has some programs already; and the
    # programs a run dispatched, with how many of them were compiled ahead.
    compiles_ahead: bool
    def compile_ahead(self, programs: Sequence[Any], background: bool = False) -> None: ...
    def compiled_ahead(self, programs: Sequence[Any]) -> bool: ...
    def wait_ahead(self, timeout_s: float) -> bool: ...
    def compiled(self, programs: Sequence[Any]) -> int: ...
    # There too: the programs of these DispatchCommands compiled now, waited for (an empty grid
    # each: the driver compiles the kernel and runs nothing). The autotuner's, before timing.
    def compile_now(self, commands: Sequence[Any]) -> None: ...
    def bind(self, layout: Any, buffers: Sequence[Any]) -> Any: ...

    # Parameter memory: `words` holds every dispatch's parameters, the uniform slots first.
    def prepare(self, commands: Sequence[Command], words: np.ndarray, uniform_words: int) -> None: ...
    def params_changed(self) -> None: ...

    # One run: feed copies, every command, readback of the requested outputs.
    def execute(self, commands: Sequence[Command], feeds: Sequence[FeedCopy],
                readback: Sequence[Readback]) -> list[bytes | memoryview]: ...

    # Per-command work, called back from Command.encode during execute.
    def dispatch(self, cmd: Any) -> None: ...  # a DispatchCommand
    def copy(self, cmd: Any) -> None: ...  # a CopyCommand (or anything with its buffer/offset/size fields)
    # Host control flow (ReadSymbol, BranchStep, LoopStep): submit what is encoded so far, wait
    # for it, read `nbytes` of `buffer` back, and go on encoding the rest of the run.
    def sync_read(self, buffer: Any, nbytes: int) -> bytes | memoryview: ...

    # The autotuner (runtime/tuner.py): seconds each of up to `repeats` replays of `commands`
    # took after a warm-up, fewer (at least one) once time.perf_counter passes `deadline` or a
    # replay takes longer than `cutoff` seconds (GPU timestamps where the adapter has them,
    # else wall time to completion). `warm`: every kernel of `commands` is compiled, so a
    # warm-up over twice `cutoff` is the one sample (the first touch of fresh buffers aside,
    # no first-use cost is in it).
    def time_commands(self, commands: Sequence[Command], repeats: int, deadline: float,
                      cutoff: float = float("inf"), warm: bool = False) -> list[float]: ...
    # A probe: these dispatches once with each grid's longest axis cut to 1/`share` (ceil), run
    # and waited for; (wall seconds, the fraction of the workgroups that ran).
    def probe_commands(self, commands: Sequence[Any], share: int) -> tuple[float, float]: ...


class Replay(Protocol):
    """What a command reads of the replay that owns it (PlanReplay implements it)."""

    model: CompiledModel
    dims: dict[str, int]
    limits: Limits
    backend: Backend
    buffers: Mapping[str, Any]
    shader_transport: Sequence[Transport]
    param_words: np.ndarray

    def root(self, name: str) -> str: ...
    def program_for(self, step: Dispatch) -> Any: ...
    def bind(self, step: Dispatch) -> Any: ...
    def build(self, step: Step) -> Any: ...  # the command of a nested step (a branch arm, a loop body)
    tuner: Any  # runtime/tuner.py's Tuner: tuned SelectCommands ask it which alternative to replay
    adapter_facts: Any  # plan.AdapterFacts: what Select guards see of the adapter
    def set_data_symbol(self, name: str, value: int) -> None: ...
