"""WgpuBackend: executes a PlanReplay on a wgpu device.

Setup once: buffers, shader modules, pipelines, bind groups (a new bind group per dispatch
costs ~5x a cached one on lavapipe). A run is one command encoder — the feed copies, one compute
pass spanning each run of dispatches between copies, the output copies into staging buffers —
one submit, and a map of the staging buffers of the requested outputs only (runtime/wgpu_readback.py,
which also serves one-off reads and host control flow's mid-run reads). Its dispatches are
encoded with wgpu-native's pass calls directly where wgpu-py has them (`_raw_pass_calls`).

Each parameter transport binds its own way (`_ImmediateParams`, `_UniformParams`), chosen by
transport class: push constants set per dispatch, or one uniform buffer holding a 256-byte slot
per dispatch, bound with a dynamic offset and uploaded only when values change.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import numpy as np
import wgpu

from onyxia.codegen.transport import UNIFORM, Immediates, Transport, UniformBuffer
from onyxia.errors import DeviceError, ShaderError
from onyxia.plan import Binding, ShaderSpec
from onyxia.runtime.commands import Command, CopyCommand, DispatchCommand
from onyxia.runtime.contract import FeedCopy, Limits, Readback
from onyxia.runtime.precompile import Kernel, for_device
from onyxia.runtime.tuner import probe_grid
from onyxia.runtime.wgpu_readback import StagingReads

_USAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
_COPYOUT = "<copyout>"  # the staging buffer of one-off reads (copyout, host control flow's sync_read)
_KEEP_COPYOUT_BYTES = 1 << 20  # larger one-off reads (the tuner saving buffers) free theirs after
# Threads building pipelines at once: the CPUs this process may use (at least 2, at most 8).
_PIPELINE_THREADS = min(8, max(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                               else os.cpu_count() or 2))


def _raw_pass_calls() -> Any:
    """wgpu-native's compute-pass entry points as wgpu-py 0.32 loads them, without its per-call
    error-capture wrapper, or None where this wgpu-py does not have them. A replay encodes
    ~100 dispatches a run with 4 calls each; the wrapper makes that ~1.4 ms a run instead of
    ~0.5 (lavapipe, 96 dispatches), time a CPU adapter takes from the kernels and a GPU waits
    for. The pass's own errors still surface: wgpu validates a pass's commands when it ends,
    and end / finish go through wgpu-py."""
    try:
        from wgpu.backends.wgpu_native._ffi import ffi, lib
        calls = (lib.wgpuComputePassEncoderSetPipeline, lib.wgpuComputePassEncoderSetBindGroup,
                 lib.wgpuComputePassEncoderSetImmediates, lib.wgpuComputePassEncoderDispatchWorkgroups)
    except (ImportError, AttributeError):
        return None
    return ffi, calls


_RAW = _raw_pass_calls()


class _ImmediateParams:
    """Push constants: `set_immediates` with the dispatch's slice of the parameter memory."""

    def __init__(self, backend: WgpuBackend) -> None:
        pass

    def pipeline_layouts(self, layout: Any, spec: ShaderSpec) -> tuple[list[Any], int]:
        return [layout], spec.immediate_bytes

    def binder(self, cmd: DispatchCommand) -> Callable[[wgpu.GPUComputePassEncoder], None]:
        data, size = cmd.params, len(cmd.params)  # type: ignore[arg-type]
        if _RAW is not None:  # the parameter memory never moves (PlanReplay._layout_params)
            pointer, set_immediates = _RAW[0].from_buffer(data), _RAW[1][2]
            return lambda cpass: set_immediates(cpass._internal, 0, pointer, size)
        return lambda cpass: cpass.set_immediates(0, data, 0, size)  # lavapipe needs data_size

    def upload(self) -> None:
        pass  # read from the parameter memory at encode time


class _UniformParams:
    """A uniform buffer over the parameter memory's uniform prefix, bound at UniformBuffer.GROUP
    with the dispatch's slot as dynamic offset; re-uploaded after parameter changes."""

    def __init__(self, backend: WgpuBackend) -> None:
        self.backend = backend
        self.layout = backend.device.create_bind_group_layout(entries=[{
            "binding": 0, "visibility": wgpu.ShaderStage.COMPUTE,
            "buffer": {"type": wgpu.BufferBindingType.uniform, "has_dynamic_offset": True}}])
        self.buffer: wgpu.GPUBuffer | None = None
        self.group: wgpu.GPUBindGroup | None = None

    def pipeline_layouts(self, layout: Any, spec: ShaderSpec) -> tuple[list[Any], int]:
        return [layout, self.layout], 0

    def binder(self, cmd: DispatchCommand) -> Callable[[wgpu.GPUComputePassEncoder], None]:
        offsets = [4 * cmd.param_offset]
        return lambda cpass: cpass.set_bind_group(UniformBuffer.GROUP, self.group, offsets)

    def allocate(self, nbytes: int, slot_bytes: int) -> None:
        device = self.backend.device
        self.buffer = device.create_buffer(label="params", size=nbytes,
                                           usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
        self.group = device.create_bind_group(layout=self.layout, entries=[
            {"binding": 0, "resource": {"buffer": self.buffer, "offset": 0, "size": slot_bytes}}])

    def upload(self) -> None:
        if self.buffer is not None:
            self.backend.device.queue.write_buffer(self.buffer, 0, self.backend.words[:self.backend.uniform_words])


_PARAMS: dict[type[Transport], type[_ImmediateParams] | type[_UniformParams]] = {
    Immediates: _ImmediateParams, UniformBuffer: _UniformParams}


class WgpuBackend:
    def __init__(self, runtime: Any, *, compile_ahead: bool = True) -> None:
        self.runtime = runtime
        self.device: wgpu.GPUDevice = runtime.device
        self.limits = Limits(
            max_workgroups=int(runtime.limits.get("max-compute-workgroups-per-dimension", 65535)),
            max_binding_bytes=int(runtime.limits.get("max-storage-buffer-binding-size", 1 << 27)),
            max_immediate_bytes=runtime.max_immediate_bytes,
            native_f16="shader-f16" in runtime.features, packed_f16_reads=runtime.packed_f16_reads,
            subgroups="subgroup" in runtime.features, subgroup_size=runtime.subgroup_size,
            wide_reads=runtime.wide_reads, indexed_private=runtime.indexed_private,
            wide_register_tiles=runtime.wide_register_tiles, guarded_loads=runtime.guarded_loads,
            cpu_adapter=runtime.info.adapter_type == "CPU", compiles_at_dispatch=runtime.info.adapter_type == "CPU",
            adapter=runtime.info.identity)
        self._params: dict[type[Transport], Any] = {}
        self.reads = StagingReads(self.device)
        self.words = np.zeros(1, np.uint32)
        self.uniform_words = 0
        self._encoder: wgpu.GPUCommandEncoder | None = None
        self._pass: wgpu.GPUComputePassEncoder | None = None
        self.shader_module_s = 0.0  # time in create_shader_module (the load report's split)
        # Helper devices compiling kernels where the driver compiles at dispatch: the next run's
        # unless `compile_ahead` is off (their driver's cache has them), and the background's.
        self._precompiler = for_device(runtime.adapter, self.device, self.limits.compiles_at_dispatch)
        self._ahead_of_runs = compile_ahead
        self._kinds: dict[int, tuple[bool, ...]] = {}  # id(bind group layout) -> its bindings' read_only
        self._kernel_of: dict[int, Kernel] = {}  # id(program) -> what a helper compiles for it
        self._fence = self.device.create_buffer(size=4, usage=_USAGE)  # a word read back to wait (_wait)

    def _params_for(self, transport: Transport) -> Any:
        kind = type(transport)
        if kind not in self._params:
            self._params[kind] = _PARAMS[kind](self)
        return self._params[kind]

    # ---- allocator ------------------------------------------------------------------------
    def alloc(self, label: str, nbytes: int) -> wgpu.GPUBuffer:
        return self.device.create_buffer(label=label, size=nbytes, usage=_USAGE)

    def free(self, buffer: wgpu.GPUBuffer) -> None:
        buffer.destroy()

    def copyin(self, buffer: wgpu.GPUBuffer, data: np.ndarray) -> None:
        self.device.queue.write_buffer(buffer, 0, data)

    def copyout(self, buffer: wgpu.GPUBuffer, nbytes: int) -> bytes | memoryview:
        if not nbytes:
            return b""
        encoder = self.device.create_command_encoder()
        encoder.copy_buffer_to_buffer(buffer, 0, self.reads.staging(_COPYOUT, nbytes, nbytes), 0, nbytes)
        self._submit(encoder)
        return self._read_copyout(nbytes)

    def _read_copyout(self, nbytes: int) -> bytes | memoryview:
        try:
            return self.reads.read([(self.reads.staging(_COPYOUT, nbytes, nbytes), nbytes)])[0]
        finally:
            if nbytes > _KEEP_COPYOUT_BYTES:
                self.reads.release(_COPYOUT)

    def _submit(self, encoder: wgpu.GPUCommandEncoder) -> None:
        try:
            self.device.queue.submit([encoder.finish()])
        except Exception as exc:
            raise DeviceError(f"GPU submission failed (device lost?): {exc}") from exc

    # ---- programs -------------------------------------------------------------------------
    def layout(self, spec: ShaderSpec, bindings: Sequence[Binding]) -> wgpu.GPUBindGroupLayout:
        layout = self.device.create_bind_group_layout(entries=[
            {"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
             "buffer": {"type": wgpu.BufferBindingType.read_only_storage if b.read_only
                        else wgpu.BufferBindingType.storage}}
            for i, b in enumerate(bindings)])
        self._kinds[id(layout)] = tuple(b.read_only for b in bindings)
        return layout

    def program(self, spec: ShaderSpec, code: str, layout: Any, transport: Transport) -> wgpu.GPUComputePipeline:
        return self._pipeline(spec, *self._module(spec, code, layout, transport))

    def make_programs(self, jobs: Sequence[tuple[ShaderSpec, str, Any, Transport]],
                 done: Callable[[int], None] | None = None) -> list[wgpu.GPUComputePipeline]:
        """Shader modules (naga: a few ms each) and pipeline layouts here, then the pipelines
        (the driver's compile) on threads: wgpu-native takes a device's calls from any thread,
        wgpu-py captures their errors per thread, and cffi lets go of the GIL during the call.
        wgpu-native 0.32 has no create_compute_pipeline_async (wgpu-py makes it synchronous).
        Measured on lavapipe, mobilenet_v3_large's 51 pipelines on a 2-core host loaded ~10x
        over: 6.2-6.6 s wall on 1 thread, 6.2-6.7 s on 4, whose calls added up to 23-25 s: they
        do run at once (no lock serializes them), the host had no idle core to give them. A
        host with idle cores divides the driver's compile among them."""
        prepared = [self._module(spec, code, layout, transport) for spec, code, layout, transport in jobs]
        if len(jobs) < 2:
            out = [self._pipeline(spec, *p) for (spec, *_), p in zip(jobs, prepared)]
            if done is not None and out:
                done(1)
        else:
            with ThreadPoolExecutor(max_workers=min(len(jobs), _PIPELINE_THREADS)) as pool:
                futures = [pool.submit(self._pipeline, spec, *p) for (spec, *_), p in zip(jobs, prepared)]
                for n, _ in enumerate(as_completed(futures)):
                    if done is not None:
                        done(n + 1)
                out = [f.result() for f in futures]
        if self._precompiler is not None:  # a helper builds the same kernel: one bind group, push constants
            for (spec, code, layout, transport), program in zip(jobs, out):
                if not spec.immediates or isinstance(transport, Immediates):
                    self._kernel_of[id(program)] = Kernel(code, spec.entry_point, self._kinds[id(layout)],
                                                          spec.immediate_bytes)
        return out

    @property
    def compiles_ahead(self) -> bool:
        """Whether helper devices compile kernels ahead of their first dispatch here."""
        return self._precompiler is not None

    def compile_ahead(self, programs: Sequence[wgpu.GPUComputePipeline], background: bool = False) -> None:
        """`programs` (in replay order) are the next run's that no run dispatched yet: helper
        devices compile them from the last while the run compiles from the first
        (runtime/precompile.py; lavapipe only). `background`: programs no run replays yet, for
        the helpers once the next run's are done."""
        if self._precompiler is not None and (background or self._ahead_of_runs):
            self._precompiler.want([k for p in programs if (k := self._kernel_of.get(id(p))) is not None],
                                   background=background)

    def wait_ahead(self, timeout_s: float) -> bool:
        """Wait until the helpers have nothing left to compile; False on timeout."""
        return self._precompiler is None or self._precompiler.idle(timeout_s)

    def compiled_ahead(self, programs: Sequence[wgpu.GPUComputePipeline]) -> bool:
        """Whether the driver has `programs` (a helper or a run compiled them; or a helper could
        not, and the run that dispatches one builds and reports it)."""
        if self._precompiler is None:
            return False
        return self._precompiler.settled([k for p in programs if (k := self._kernel_of.get(id(p))) is not None])

    def compiled(self, programs: Sequence[wgpu.GPUComputePipeline]) -> int:
        """A run dispatched `programs`: the driver has them. How many of them a helper compiled."""
        if self._precompiler is None:
            return 0
        kernels = [k for p in programs if (k := self._kernel_of.get(id(p))) is not None]
        self._precompiler.done(kernels)
        return sum(k.key in self._precompiler.compiled for k in kernels)

    def _module(self, spec: ShaderSpec, code: str, layout: Any, transport: Transport) -> tuple[Any, Any]:
        """The shader module and pipeline layout of a program."""
        try:
            start = time.perf_counter()
            module = self.device.create_shader_module(label=spec.label, code=code)
            self.shader_module_s += time.perf_counter() - start
            layouts, immediate_size = [layout], 0
            if spec.immediates:
                layouts, immediate_size = self._params_for(transport).pipeline_layouts(layout, spec)
            return module, self.device.create_pipeline_layout(bind_group_layouts=layouts, immediate_size=immediate_size)
        except Exception as exc:
            raise ShaderError(f"shader '{spec.label}' failed to compile: {exc}") from exc

    def _pipeline(self, spec: ShaderSpec, module: Any, pipeline_layout: Any) -> wgpu.GPUComputePipeline:
        try:
            return self.device.create_compute_pipeline(layout=pipeline_layout, compute={
                "module": module, "entry_point": spec.entry_point})
        except Exception as exc:
            raise ShaderError(f"shader '{spec.label}' failed to compile: {exc}") from exc

    def bind(self, layout: Any, buffers: Sequence[wgpu.GPUBuffer]) -> wgpu.GPUBindGroup:
        return self.device.create_bind_group(layout=layout, entries=[
            {"binding": i, "resource": {"buffer": b}} for i, b in enumerate(buffers)])

    # ---- parameters -----------------------------------------------------------------------
    def prepare(self, commands: Sequence[Command], words: np.ndarray, uniform_words: int) -> None:
        self.words, self.uniform_words = words, uniform_words
        slot_bytes = 0
        for cmd in commands:
            for d in cmd.dispatches():
                if d.types:
                    d.bind_params = self._params_for(d.transport).binder(d)
                    if d.transport == UNIFORM:
                        slot_bytes = max(slot_bytes, 4 * UNIFORM.slot_words(len(d.types)))
        if uniform_words:
            self._params_for(UNIFORM).allocate(4 * uniform_words, slot_bytes)

    def params_changed(self) -> None:
        for params in self._params.values():
            params.upload()

    # ---- replay ---------------------------------------------------------------------------
    def execute(self, commands: Sequence[Command], feeds: Sequence[FeedCopy],
                readback: Sequence[Readback]) -> list[bytes | memoryview]:
        encoder = self.device.create_command_encoder()
        for f in feeds:
            encoder.copy_buffer_to_buffer(f.src, 0, f.dst, 0, f.nbytes)
        encoder = self.encode(encoder, commands)  # a new encoder after each sync_read
        reads = []
        for r in readback:
            if r.nbytes:
                staging = self.reads.staging(r.name, r.nbytes, r.capacity)
                encoder.copy_buffer_to_buffer(r.buffer, 0, staging, 0, r.nbytes)
                reads.append((staging, r.nbytes))
        self._submit(encoder)
        raws = iter(self.reads.read(reads))
        return [next(raws) if r.nbytes else b"" for r in readback]

    def encode(self, encoder: wgpu.GPUCommandEncoder, commands: Sequence[Command]) -> wgpu.GPUCommandEncoder:
        """Every command into `encoder`; a compute pass spans each run of dispatches. Returns
        the encoder holding the end of the run (host control flow submits and starts new ones)."""
        self._encoder, self._pass = encoder, None
        try:
            for cmd in commands:
                cmd.encode(self)
            if self._pass is not None:
                self._pass.end()
            return self._encoder
        finally:
            self._encoder = self._pass = None

    def sync_read(self, buffer: wgpu.GPUBuffer, nbytes: int) -> memoryview:
        """Submit what is encoded so far, wait for it and read `nbytes` of `buffer`; encoding
        goes on in a fresh encoder (ReadSymbol, BranchStep, a LoopStep's condition)."""
        if self._encoder is None:
            return self.copyout(buffer, nbytes)
        if self._pass is not None:
            self._pass.end()
            self._pass = None
        if nbytes:  # the read's copy rides in the submission of the work before it
            self._encoder.copy_buffer_to_buffer(buffer, 0, self.reads.staging(_COPYOUT, nbytes, nbytes), 0, nbytes)
        self._submit(self._encoder)
        self._encoder = self.device.create_command_encoder()
        return self._read_copyout(nbytes) if nbytes else b""

    def dispatch(self, cmd: DispatchCommand) -> None:
        # The per-run hot path (encode_dispatch inlined): ~10 Python-level calls per dispatch.
        x, y, z = cmd.workgroups
        if not (x and y and z):
            return
        cpass = self._pass
        if cpass is None:
            cpass = self._pass = self._encoder.begin_compute_pass()  # type: ignore[union-attr]
        if _RAW is None:
            cpass.set_pipeline(cmd.program)
            cpass.set_bind_group(0, cmd.bindings)
            if cmd.bind_params is not None:
                cmd.bind_params(cpass)
            cpass.dispatch_workgroups(x, y, z)
            return
        ffi, (set_pipeline, set_bind_group, _, dispatch) = _RAW
        handle = cpass._internal
        set_pipeline(handle, cmd.program._internal)
        set_bind_group(handle, 0, cmd.bindings._internal, 0, ffi.NULL)
        if cmd.bind_params is not None:
            cmd.bind_params(cpass)
        dispatch(handle, x, y, z)

    def encode_dispatch(self, cpass: wgpu.GPUComputePassEncoder, cmd: DispatchCommand,
                        workgroups: tuple[int, int, int] | None = None) -> None:
        """One dispatch into a given pass (the profiler gives each its own timed pass), over
        `workgroups` instead of its own grid where given (the tuner's compile and probe: an empty
        grid is dispatched too, the driver compiling the kernel and running nothing)."""
        cpass.set_pipeline(cmd.program)
        cpass.set_bind_group(0, cmd.bindings)
        if cmd.bind_params is not None:
            cmd.bind_params(cpass)
        if workgroups is not None:
            cpass.dispatch_workgroups(*workgroups)
            return
        x, y, z = cmd.workgroups
        if x and y and z:
            cpass.dispatch_workgroups(x, y, z)

    def copy(self, cmd: CopyCommand) -> None:
        if self._pass is not None:
            self._pass.end()
            self._pass = None
        self._encoder.copy_buffer_to_buffer(cmd.src_buffer, cmd.src_offset,  # type: ignore[union-attr]
                                            cmd.dst_buffer, cmd.dst_offset, cmd.size)

    # ---- autotuning (runtime/tuner.py) ----------------------------------------------------
    def compile_now(self, commands: Sequence[DispatchCommand]) -> None:
        """Have the driver compile these dispatches' programs now: each dispatched with an empty
        grid (lavapipe compiles a kernel at its first dispatch and then runs nothing), waited for."""
        if commands:
            self._run_once([(cmd, (0, 0, 0)) for cmd in commands])

    def probe_commands(self, commands: Sequence[DispatchCommand], share: int) -> tuple[float, float]:
        """Run these dispatches once, each grid's longest axis cut to 1/`share` (tuner.probe_grid):
        (wall seconds, the fraction of the workgroups that ran). The kernels bound their work by
        their parameters, so a smaller grid computes part of the outputs and writes nothing else."""
        grids = [probe_grid(cmd.workgroups, share) for cmd in commands]
        full = sum(math.prod(cmd.workgroups) for cmd in commands)
        start = time.perf_counter()
        self._run_once(list(zip(commands, grids)))
        return time.perf_counter() - start, (sum(map(math.prod, grids)) / full if full else 1.0)

    def _run_once(self, dispatches: Sequence[tuple[DispatchCommand, tuple[int, int, int]]]) -> None:
        """These dispatches over these grids in one pass, submitted and waited for."""
        encoder = self.device.create_command_encoder()
        cpass = encoder.begin_compute_pass()
        for cmd, grid in dispatches:
            self.encode_dispatch(cpass, cmd, grid)
        cpass.end()
        self.device.queue.submit([encoder.finish()])
        self._wait()

    def _wait(self) -> None:
        """Wait for the queue: reading a word back waits for the work before it
        (on_submitted_work_done_sync does not work with this wgpu-native)."""
        self.device.queue.read_buffer(self._fence, 0, 4)

    def time_commands(self, commands: Sequence[Command], repeats: int, deadline: float,
                      cutoff: float = float("inf"), warm: bool = False) -> list[float]:
        """Seconds per replay of `commands`, up to `repeats` times after a warm-up (fewer, at
        least one, past `deadline` on time.perf_counter or once a replay takes over `cutoff`; with
        `warm` kernels, a warm-up over twice `cutoff` is the one sample): GPU timestamps around
        one compute pass each where the adapter has them and the commands are all dispatches,
        else wall time from encoding to the queue's completion."""
        queue = self.device.queue
        stamped = "timestamp-query" in self.runtime.features and all(isinstance(c, DispatchCommand) for c in commands)
        wall: list[float] = []
        # With timestamps the one wall-timed replay is the warm-up.
        for _ in range(1 + (0 if stamped else repeats)):
            start = time.perf_counter()
            queue.submit([self.encode(self.device.create_command_encoder(), commands).finish()])
            self._wait()  # the same cost for every alternative
            wall.append(time.perf_counter() - start)
            if len(wall) == 1 and warm and wall[0] > 2 * cutoff:
                return wall  # compiled already, and far slower even allowing for first touches
            if len(wall) >= 2 and (wall[-1] > cutoff or time.perf_counter() + wall[-1] > deadline):
                break  # far slower than the best so far (no need to know how much), or out of time
        if not stamped:
            return wall[1:] or wall
        first = self._stamped(commands, 1)
        if not first:  # a driver without real stamps
            return wall
        if first[0] > cutoff:
            return first
        more = min(repeats - 1, int((deadline - time.perf_counter()) / max(wall[0], 1e-6)))
        return first + (self._stamped(commands, more) if more > 0 else [])

    def _stamped(self, commands: Sequence[Command], repeats: int) -> list[float]:
        """GPU seconds of `repeats` replays, one compute pass each ([] without real stamps)."""
        count = 2 * repeats
        queries = self.device.create_query_set(type=wgpu.QueryType.timestamp, count=count)
        resolved = self.device.create_buffer(size=8 * count, usage=wgpu.BufferUsage.QUERY_RESOLVE
                                             | wgpu.BufferUsage.COPY_SRC)
        encoder = self.device.create_command_encoder()
        for i in range(repeats):
            cpass = encoder.begin_compute_pass(timestamp_writes={
                "query_set": queries, "beginning_of_pass_write_index": 2 * i, "end_of_pass_write_index": 2 * i + 1})
            for cmd in commands:
                self.encode_dispatch(cpass, cmd)  # type: ignore[arg-type]
            cpass.end()
        encoder.resolve_query_set(queries, 0, count, resolved, 0)
        self.device.queue.submit([encoder.finish()])
        stamps = np.frombuffer(self.device.queue.read_buffer(resolved), dtype=np.uint64).astype(np.float64)
        spans = [(stamps[2 * i + 1] - stamps[2 * i]) * 1e-9 for i in range(repeats)]
        return spans if all(s > 0 for s in spans) else []
