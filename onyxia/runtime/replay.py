"""PlanReplay: the backend-neutral replay of a CompiledModel.

Everything that decides *what* to do lives here: the commands built from the plan's steps,
buffer capacities and the memory plan's aliases, the shaders' parameter transports, the symbolic
bindings evaluated as their distinct expressions, the recompile and reallocation decisions of
`update_dimensions`, and feed checking. A `Backend` does the device work (the contract below,
modelled on tinygrad's Allocator + Program): runtime/wgpu_backend.py on a GPU, runtime/null.py
without one, so all of this is unit-tested without an adapter.

Nothing is recomputed per run: input/output shapes and byte sizes, parameter words, workgroup
counts and copy sizes are evaluated at load and refreshed by update_dimensions only where a
changed symbol reaches them. The plan's symbolic bindings (496 in a 4-layer GPT-2 block) are
grouped by distinct expression (38 there), indexed by symbol; an update evaluates each affected
expression once and scatters its value to every place that uses it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

import onyxia.runtime.control  # noqa: F401  (registers the host control-flow commands)
from onyxia.codegen.transport import IMMEDIATE, UNIFORM, Transport, get_transport
from onyxia.codegen.wgsl import render
from onyxia.errors import DeviceError, DimensionError, InputError
from onyxia.ir import dtypes
from onyxia.ir.shapes import SymDim, compile_dim, dim_symbols
from onyxia.plan import STATUS_TENSOR, CompiledModel, Dispatch, Step
from onyxia.runtime.ahead import WorkAhead
from onyxia.runtime.commands import Command, DispatchCommand, command_for, value
from onyxia.runtime.contract import Backend, FeedCopy, Limits, Readback
from onyxia.runtime.dimensions import MIN_BUFFER_BYTES, DimensionUpdates
from onyxia.runtime.select import (
    SelectCommand,
    adapter_facts,
    idle_commands,
    limit_guarded_tensors,
    live_commands,
    walk_commands,
)
from onyxia.runtime.status import Site, read_status, refuse_lost
from onyxia.runtime.tensor import DeviceTensor, TensorSlot
from onyxia.runtime.tuner import Tuner, TuneResult, TuneSettings


@dataclass
class LoadTimes:
    """Where an executor's load went (seconds), and what it built. `total_s` is the whole
    PlanReplay setup; the rest of it (commands, bind groups, parameters) is total_s minus the
    parts named here. Pipelines are built for the dispatches a run replays now: a Select's
    other alternatives get theirs when first chosen (`deferred` until then). Nothing is timed
    at load (runtime/tuner.py: later runs do it; ExecutorStats.tuning_s)."""

    buffers_s: float = 0.0  # allocations and weight uploads
    render_s: float = 0.0  # WGSL text from the plan's templates (codegen/wgsl.py render)
    shader_modules_s: float = 0.0  # the backend's shader modules (naga parses and validates)
    pipelines_s: float = 0.0  # the backend's pipelines (the driver compiles the kernel)
    total_s: float = 0.0
    pipelines: int = 0  # pipelines built
    shared: int = 0  # shaders whose WGSL and layout equal a built one's: its pipeline reused
    deferred: int = 0  # shaders not built at load (only alternatives a run does not replay now use them)
    quick: int = 0  # Selects whose first run replays a quicker-to-compile variant of their choice (runtime/ahead.py)
    weight_bytes: int = 0  # bytes uploaded


# Bytes of a limit-guarded buffer (select.limit_guarded_tensors) while its size is past the
# device's storage-binding limit: nothing eligible binds it; it regrows once its size fits.
GUARDED_PLACEHOLDER = 256


@dataclass
class ExecutorStats:
    runs: int = 0
    recompiles: int = 0  # shader modules rebuilt after a static dim changed
    reallocs: int = 0  # buffers regrown past their capacity
    dimension_updates: int = 0
    readback_bytes: int = 0  # bytes copied to the host by the last run
    tuning_timings: int = 0  # Select alternatives timed (runtime/tuner.py): 0 when all were cached
    tuned: int = 0  # tuned Select steps chosen by timing
    tuning_s: float = 0.0  # seconds runs spent timing them (after the first run at a shape class)
    prebuilt: int = 0  # pipelines of alternatives not replayed yet, built ahead by later runs
    precompiled: int = 0  # kernels runs dispatched that a helper device compiled too (runtime/precompile.py)
    warm_first: int = 0  # Selects that replayed a warm stand-in at new dims (runtime/select.py)
    upgraded: int = 0  # of those and the quick ones (LoadTimes.quick), switched to the alternative they stood in for
    ahead_s: float = 0.0  # seconds runs spent building those, or running with switched kernels
    run_s: float = 0.0  # seconds runs spent on their own work (not the first at new dims; no work ahead)
    load: LoadTimes = field(default_factory=LoadTimes)


class PlanReplay(DimensionUpdates, WorkAhead):
    """A CompiledModel replayed on a Backend: `run`, `update_dimensions`, device tensors.

    The public surface of PlanExecutor (its wgpu subclass); on the NullBackend it replays a plan
    with no GPU. `commands` are the steps in replay form, `buffers`/`capacity` the allocations
    by root tensor, `programs` the built shaders, `stats` the counters tests assert on.
    """

    def __init__(self, model: CompiledModel, backend: Backend, *, transport: str | Transport = IMMEDIATE,
                 tuning: TuneSettings | None = None, progress: Callable[[int, int], None] | None = None):
        """`progress(done, total)` is called as pipelines are built at load (the CLI draws a
        line with it)."""
        start = time.perf_counter()
        self.model = model
        self.backend = backend
        self.transport = get_transport(transport)
        self.limits: Limits = backend.limits
        self.stats = ExecutorStats()
        self.tuner = Tuner(tuning or TuneSettings.from_env(), self.limits.adapter, self.stats)
        self.dims: dict[str, int] = dict(model.dims)
        # What Select guards may ask of the adapter (runtime/select.py); assume_adapter changes it.
        self.adapter_facts = adapter_facts(self.limits)
        # Too many parameters for push constants: that shader takes the uniform buffer.
        self.shader_transport = [
            self.transport if self.transport.carries(spec.immediate_bytes, self.limits.max_immediate_bytes)
            else UNIFORM for spec in model.shaders]
        self._alias = {n: t.alias_of for n, t in model.tensors.items() if t.alias_of}
        self.buffers: dict[str, Any] = {}
        self.capacity: dict[str, int] = {}
        self._layouts: dict[int, Any] = {}
        self._layout_of: dict[tuple[bool, ...], Any] = {}  # one layout per binding signature
        self.programs: dict[int, Any] = {}  # shader index -> program, for shaders a run has replayed
        self._by_code: dict[tuple, Any] = {}  # (WGSL, layout, transport, entry) -> program: identical ones once
        self._progress = progress
        self._constraints = [(a, b, node, compile_dim(a), compile_dim(b)) for a, b, node in model.constraints]
        # Data-dependent symbols: the capacity each is sized for, as a function of the dims.
        self._bounds = {name: (compile_dim(b), dim_symbols(b)) for name, b in model.data_symbols.items()
                        if b is not None}
        self._limit_guarded = limit_guarded_tensors([s for op in model.operations for s in op.steps], self.root)
        self._setup_buffers()
        self.stats.load.buffers_s = time.perf_counter() - start
        self.commands: list[Command] = []  # every step's command, nested ones included (walk_steps order)
        top = [self.build(s) for op in model.operations for s in op.steps]
        self._run_commands = [c for c in top if c.per_run]
        # Host control flow reads values back mid-run; without it a run is one submission with
        # the outputs' sizes known up front (the LLM decode path: nothing here costs it anything).
        self._device_syncs = any(c.device_sync for c in self.commands)
        self._feed_reads = [c for c in self.commands if getattr(c, "feed", None) is not None]
        self._by_shader: dict[int, list[DispatchCommand]] = {}
        for cmd in self.commands:
            for d in cmd.dispatches():
                self._by_shader.setdefault(d.shader, []).append(d)
        self._layout_params()
        self.backend.prepare(self.commands, self.param_words, self._uniform_words)
        self._setup_expressions()
        self._slots: dict[str, TensorSlot] = {}
        self._input_names = frozenset(model.inputs)
        for name in (*model.inputs, *model.outputs):
            self._slot(name)
        self._live_commands = self._run_commands
        # Programs a finished run has dispatched: lavapipe compiled them (runtime/select.py, warm first)
        self._warm: set[int] = set()
        self._unwarmed = True  # what a run encodes changed since the last run marked it warm
        self._upgrades: dict[SelectCommand, None] = {}  # Selects replaying a warm stand-in, in order
        self._upgrading = False  # this run switched some to the alternative they stood in for
        # Tuned Selects replay the cached choice or the heuristic's: nothing is timed at load.
        self._refresh_all()
        load = self.stats.load
        self._progress = None
        load.deferred = len(self._layouts) - len(self.programs)
        # The pipelines a run does not replay now, which later runs build ahead (a slice each)
        # so that new dims choosing them need not: only shaders baking no symbol, which a
        # dims change never rebuilds.
        baking = {i for e in self._exprs for i in e.shaders}
        self._ahead = [i for i in sorted(self._layouts) if i not in self.programs and i not in baking]
        self._new_dims = False  # dims changed what a run replays since the last run
        self._counted = False  # this run's time counts in stats.run_s (not a first run)
        load.total_s = time.perf_counter() - start

    # ---- setup --------------------------------------------------------------------------
    def root(self, name: str) -> str:
        return self._alias.get(name, name)

    def _size(self, name: str) -> int:
        # WebGPU buffers cannot be empty: a zero-size tensor still gets one vec4 (MIN_BUFFER_BYTES:
        # a kernel may bind it as an array of vec4s).
        return max(int(value(self.model.tensors[name].nbytes, self.dims)), MIN_BUFFER_BYTES)

    def _setup_buffers(self) -> None:
        for name, info in self.model.tensors.items():
            if info.alias_of:
                continue
            size = self._size(name)
            if size > self.limits.max_binding_bytes and name in self._limit_guarded:
                size = GUARDED_PLACEHOLDER  # its alternatives are not eligible now (select.limit_guarded_tensors)
            self._check_binding(name, size)
            self.buffers[name] = self.backend.alloc(name, size)
            self.capacity[name] = size
            if info.data is not None:
                data = dtypes.to_device(info.data, dtypes.from_name(info.dtype), f"weight '{name}'")
                if data.nbytes:
                    self.backend.copyin(self.buffers[name], data)
                    self.stats.load.weight_bytes += data.nbytes

    def build(self, step: Step) -> Command:
        """The command of `step`; a step holding others builds theirs (right after its own
        index, as walk_steps numbers them)."""
        index = len(self.commands)
        self.commands.append(None)  # type: ignore[arg-type]  # reserved: the children come after
        cmd = command_for(step, index, self)
        self.commands[index] = cmd
        return cmd

    def _check_binding(self, name: str, size: int) -> None:
        if size > self.limits.max_binding_bytes:
            raise DeviceError(f"tensor '{name}' needs {size} bytes for {self.dims}, over this device's "
                              f"max storage binding of {self.limits.max_binding_bytes} bytes")

    def program_for(self, step: Dispatch) -> Any:
        """The shader's program if built, else None (`build_programs` builds it when a run first
        replays it). Its first dispatch's bindings give the layout (one per binding signature)."""
        index = step.shader
        if index not in self._layouts:
            signature = tuple(b.read_only for b in step.bindings)
            layout = self._layout_of.get(signature)
            if layout is None:
                layout = self._layout_of[signature] = self.backend.layout(self.model.shaders[index], step.bindings)
            self._layouts[index] = layout
        return self.programs.get(index)

    def build_programs(self, commands: Sequence[Command]) -> None:
        """Build the programs and bind groups of the dispatches in `commands` that have none yet.
        A pipeline costs ~20 ms on lavapipe and half a plan's shaders may belong to Select
        alternatives a run does not replay at these dims on this adapter: those wait until
        chosen. So do their bind groups, made again only where a regrown buffer dropped them
        (733 in regnet_y_400mf, whose runs replay 119 dispatches: update_dimensions at a new image
        size 79 -> 15 ms)."""
        dispatches = [c for c in commands if isinstance(c, DispatchCommand)]
        missing = [c for c in dispatches if c.program is None]
        todo = sorted({c.shader for c in missing} - self.programs.keys())
        if todo:
            self._build_many(todo)
        for c in missing:
            c.program = self.programs[c.shader]
        for c in dispatches:
            if c.bindings is None:
                c.bindings = self.bind(c.step)

    def _render(self, index: int) -> tuple[tuple, tuple]:
        """(the key of identical kernels, the backend's job) of shader `index` at the dims now."""
        spec = self.model.shaders[index]
        transport = self.shader_transport[index]
        start = time.perf_counter()
        code = render(spec, self.model.templates[spec.template], self.dims, transport,
                      native_f16=self.limits.native_f16, packed_f16_reads=self.limits.packed_f16_reads,
                      subgroups=self.limits.subgroups, subgroup_size=self.limits.subgroup_size,
                      wide_reads=self.limits.wide_reads, indexed_private=self.limits.indexed_private)
        self.stats.load.render_s += time.perf_counter() - start
        layout = self._layouts[index]
        key = (code, id(layout), str(transport), spec.entry_point, spec.immediate_bytes)
        return key, (spec, code, layout, transport)

    def _build(self, index: int) -> Any:
        """Shader `index`'s program, rendered at the dims now (shared with an identical kernel's)."""
        key, job = self._render(index)
        program = self._by_code.get(key)
        if program is not None:  # two shaders, one kernel: one module and pipeline
            self.stats.load.shared += 1
            return program
        program = self._by_code[key] = self._make([job])[0]
        return program

    def _build_many(self, todo: list[int]) -> None:
        """The programs of shaders `todo`, the distinct kernels built together (in parallel
        where the backend can)."""
        jobs: list[tuple] = []
        owner: dict[tuple, int] = {}  # kernel key -> its job
        keys = []
        for index in todo:
            key, job = self._render(index)
            keys.append(key)
            if key in self._by_code or key in owner:
                self.stats.load.shared += 1
            else:
                owner[key] = len(jobs)
                jobs.append(job)
        for key, program in zip(owner, self._make(jobs)):
            self._by_code[key] = program
        for index, key in zip(todo, keys):
            self.programs[index] = self._by_code[key]

    def _make(self, jobs: list[tuple]) -> list[Any]:
        load = self.stats.load
        modules = getattr(self.backend, "shader_module_s", 0.0)
        start = time.perf_counter()
        progress = self._progress
        done = None if progress is None else lambda n: progress(n, len(jobs))
        programs = self.backend.make_programs(jobs, done)
        if not self.limits.compiles_at_dispatch:  # compiled already: warm (runtime/select.py)
            self._warm.update(id(p) for p in programs)
        module_s = getattr(self.backend, "shader_module_s", 0.0) - modules
        load.shader_modules_s += module_s
        load.pipelines_s += time.perf_counter() - start - module_s  # wall time: they may build in parallel
        load.pipelines += len(jobs)
        return programs

    def bind(self, step: Dispatch) -> Any:
        return self.backend.bind(self._layouts[step.shader], [self.buffers[self.root(b.tensor)] for b in step.bindings])

    def _layout_params(self) -> None:
        """Every dispatch's parameter words in one memory: uniform slots (aligned) first, then
        the immediates, so the uniform transport uploads one prefix and patches scatter once."""
        dispatches = [d for c in self.commands for d in c.dispatches() if d.types]
        dispatches.sort(key=lambda d: d.transport != UNIFORM)  # stable: keeps step order within each
        offset = 0
        self._uniform_words = 0
        for d in dispatches:
            d.param_offset = offset
            offset += d.transport.slot_words(len(d.types))
            if d.transport == UNIFORM:
                self._uniform_words = offset
        self._param_raw = bytearray(4 * max(offset, 1))
        self.param_words = np.frombuffer(self._param_raw, dtype=np.uint32)
        view = memoryview(self._param_raw)
        for d in dispatches:
            # wgpu-py turns a bytearray-backed buffer into a pointer ~3x faster than a numpy
            # array (measured: 0.7 vs 1.9 µs), once per dispatch per run with immediates.
            d.params = view[4 * d.param_offset:4 * (d.param_offset + len(d.types))]

    def _refresh_all(self) -> None:
        """Evaluate everything for the current dims (load time; recovery from a failed update)."""
        for e in self._exprs:
            self._values[e.number] = e.fn(self.dims)
        for cmd in self.commands:
            cmd.refresh(self)
        self.backend.params_changed()
        for slot in self._slots.values():
            slot.refresh(self.dims)
        self._quick_first()  # at load (runtime/ahead.py)
        self._refresh_live()

    def _refresh_live(self) -> None:
        """What a run encodes (select.live_commands), with the programs it needs built; mid-run
        readbacks may change grids and choices: keep all, and build every reachable program."""
        self._live_commands = self._run_commands if self._device_syncs else live_commands(self._run_commands)
        needed = self._run_dispatches()
        self.build_programs(needed)
        self._compile_ahead(needed)
        self._unwarmed = True

    def _run_dispatches(self) -> list[Command]:
        """What the next run may dispatch: each command it encodes, loop bodies included (an
        empty grid: once it fills); with mid-run readbacks, which may change grids and choices,
        every dispatch."""
        return self.dispatch_commands() if self._device_syncs else walk_commands(self._live_commands)

    def assume_adapter(self, kind: str, traits: Iterable[str] | None = None) -> None:
        """Choose every Select's alternative as on an adapter of `kind` ("cpu" or "gpu") with
        `traits` (plan.select.TRAITS; default: this adapter's): this device then runs the other
        kind's kernels (tests check every variant on one adapter)."""
        if kind not in ("cpu", "gpu"):
            raise DimensionError(f"adapter kind must be 'cpu' or 'gpu', got {kind!r}")
        facts = self.adapter_facts
        self.adapter_facts = replace(facts, kind=kind, traits=facts.traits if traits is None else frozenset(traits))
        for cmd in self.commands:
            if isinstance(cmd, SelectCommand):
                cmd.settle(self)
        self._refresh_live()

    def choose(self, cmd: SelectCommand, index: int) -> None:
        """Replay alternative `index` of the Select `cmd` (one of `self.commands`) until the dims,
        the adapter or the tuner choose again: tests and tools run each variant this way."""
        if not 0 <= index < len(cmd.alternatives) or not cmd.eligible[index]:
            raise DimensionError(f"select '{cmd.step.key}': alternative {index} is not eligible at {self.dims}")
        cmd.chosen, cmd.source = index, "forced"
        self._refresh_live()

    def tune(self, *, force: bool = False, budget_s: float | None = None) -> list[TuneResult]:
        """Time the tuned Selects waiting for a choice (`force`: all) and replay the fastest."""
        results = self.tuner.tune(self, self.commands if force else list(self.tuner.pending), budget_s)
        self._refresh_live()
        return results

    def _slot(self, name: str) -> TensorSlot:
        slot = self._slots.get(name)
        if slot is None:
            info = self.model.tensors[name]
            symbols = frozenset().union(*(d.symbols for d in info.shape if isinstance(d, SymDim)))
            slot = self._slots[name] = TensorSlot(name, self.root(name), dtypes.from_name(info.dtype),
                                                   tuple(info.shape), symbols)
            slot.refresh(self.dims)
        return slot

    # ---- running ------------------------------------------------------------------------
    def input_shape(self, name: str) -> tuple[int, ...]:
        return self._slot(name).shape

    def _check_feed(self, name: str, feed: Any) -> np.ndarray | DeviceTensor:
        return self._slot(name).check_feed(feed)

    def run(self, feeds: Mapping[str, Any], outputs: Sequence[str] | None = None, *,
            device_outputs: Sequence[str] = ()) -> dict[str, np.ndarray | DeviceTensor]:
        """Run the plan. Feeds are numpy arrays or DeviceTensors; outputs named in
        `device_outputs` come back as DeviceTensors (valid until the next run) and are not
        read back."""
        model = self.model
        names = list(model.outputs) if outputs is None else list(outputs)
        for n in (*names, *device_outputs):
            if n not in model.tensors:
                raise InputError(f"unknown output '{n}' (outputs: {', '.join(model.outputs)})")
        inputs = self._input_names
        if len(feeds) != len(inputs) or any(k not in inputs for k in feeds):
            unknown = [k for k in feeds if k not in inputs]
            missing = [k for k in model.inputs if k not in feeds]
            raise InputError("; ".join(
                ([f"unknown inputs {unknown}"] if unknown else []) + ([f"missing inputs {missing}"] if missing else []))
                + f" (the model's inputs: {', '.join(model.inputs)})")
        checked = {k: self._check_feed(k, v) for k, v in feeds.items()}
        self._counted = self._upgrading = False
        self._ahead_slice()
        start = time.perf_counter()

        copies = []
        for name, feed in checked.items():
            slot = self._slots[name]
            buf = self.buffers[slot.root]
            if isinstance(feed, DeviceTensor):
                if feed.buffer is not buf:
                    copies.append(FeedCopy(feed.buffer, buf, feed.nbytes))
            else:
                data = dtypes.to_device(feed, slot.dtype, f"input '{name}'")
                if data.nbytes:
                    self.backend.copyin(buf, data)
        for cmd in self._feed_reads:  # data symbols given by fed values: no GPU sync for them
            fed = checked[cmd.feed]
            cmd.resolved = not isinstance(fed, DeviceTensor)
            if cmd.resolved:
                cmd.take(fed)
        slots = [self._slot(n) for n in names if n not in device_outputs]
        # The status word rides along with outputs read anyway (4 more bytes, no extra drain);
        # a run reading nothing back leaves it set for the next one that does.
        status = STATUS_TENSOR in self.buffers and bool(slots)
        status_raw: bytes | memoryview | None = None
        if not self._device_syncs:
            readback = [Readback(s.name, self.buffers[s.root], s.nbytes, self.capacity[s.root]) for s in slots]
            if status:
                readback.append(Readback(STATUS_TENSOR, self.buffers[STATUS_TENSOR], 4, 4))
            raws = self.backend.execute(self._live_commands, copies, readback)
            status_raw = raws.pop() if status else None
        else:  # output sizes may depend on values read back during the run: read them after it
            self.backend.execute(self._run_commands, copies, [])
            raws = [self.backend.copyout(self.buffers[s.root], s.nbytes) if s.nbytes else b"" for s in slots]
            status_raw = self.backend.copyout(self.buffers[STATUS_TENSOR], 4) if status else None
        self.stats.runs += 1
        if self._unwarmed:
            self.mark_warm(walk_commands(live_commands(self._live_commands)))
            self._unwarmed = False
        if self.stats.runs == 1 and self._upgrades:
            self._hand_over()
        noted = self._check_status(status_raw) if status_raw is not None else None
        results: dict[str, np.ndarray | DeviceTensor] = {}
        total = 0
        for slot, raw in zip(slots, raws):
            total += slot.nbytes
            count = math.prod(slot.shape)
            results[slot.name] = dtypes.from_device(raw, slot.dtype, count).reshape(slot.shape)
            if slot.dtype == dtypes.INT64 and count:
                refuse_lost(slot.name, results[slot.name], noted)
        for name in device_outputs:
            results[name] = self.device_tensor(name)
        self.stats.readback_bytes = total
        if self._counted:
            self.stats.run_s += time.perf_counter() - start
        elif self._upgrading:
            self.stats.ahead_s += time.perf_counter() - start
        return {n: results[n] for n in (*names, *[d for d in device_outputs if d not in names])}

    def _check_status(self, raw: bytes | memoryview) -> Site | None:
        """read_status of the word (runtime/status.py), cleared for the next run."""
        word = int(np.frombuffer(raw, dtype=np.uint32)[0])
        if word:
            self.backend.copyin(self.buffers[STATUS_TENSOR], np.zeros(1, np.uint32))
        return read_status(word, self.model.sites)

    # ---- device tensors -------------------------------------------------------------------
    def device_tensor(self, name: str) -> DeviceTensor:
        """The executor's own buffer for tensor `name` (e.g. to keep state on the device)."""
        slot = self._slot(name)
        return DeviceTensor(self.buffers[slot.root], slot.shape, slot.dtype.name)

    def read_tensor(self, tensor: DeviceTensor) -> np.ndarray:
        """A device tensor's values (a blocking read; meant for debugging and tests)."""
        dtype = dtypes.from_name(tensor.dtype)
        if not tensor.nbytes:
            return np.zeros(tensor.shape, dtype.numpy)
        raw = self.backend.copyout(tensor.buffer, tensor.nbytes)
        return dtypes.from_device(raw, dtype, math.prod(tensor.shape)).reshape(tensor.shape)

    @property
    def dispatches_per_run(self) -> int:
        """Kernel launches a run encodes now (empty grids and Select alternatives not replayed
        left out)."""
        return sum(isinstance(c, DispatchCommand) for c in self._live_commands)

    def select_choices(self) -> dict[int, int]:
        """{id of a tuned Select step: the alternative it replays now} (plan_cost's `choices`;
        the others follow their guards at whatever dims plan_cost is given)."""
        return {id(c.step): c.chosen for c in self.commands if isinstance(c, SelectCommand) and c.tuned}

    def dispatch_commands(self) -> list[DispatchCommand]:
        """Every kernel launch in replay order (including those whose grid is empty now), but
        not those of the alternatives a Select step does not replay now."""
        idle = idle_commands(self.commands)
        return [d for cmd in self.commands if id(cmd) not in idle for d in cmd.dispatches()]
