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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import onyxia.runtime.control  # noqa: F401  (registers the host control-flow commands)
from onyxia.codegen.transport import IMMEDIATE, UNIFORM, Transport, get_transport
from onyxia.codegen.wgsl import render
from onyxia.errors import ComputeError, DeviceError, DimensionError, InputError
from onyxia.ir import dtypes
from onyxia.ir.shapes import SymDim, compile_dim, dim_symbols
from onyxia.plan import ADAPTER_CPU, STATUS_TENSOR, CompiledModel, Dispatch, Step
from onyxia.runtime.commands import Command, DispatchCommand, command_for, value
from onyxia.runtime.contract import Backend, FeedCopy, Limits, Readback
from onyxia.runtime.tensor import DeviceTensor, TensorSlot
from onyxia.runtime.tuner import (
    TunableCommand,
    Tuner,
    TuneResult,
    TuneSettings,
    idle_commands,
    live_commands,
)


@dataclass
class ExecutorStats:
    runs: int = 0
    recompiles: int = 0  # shader modules rebuilt after a static dim changed
    reallocs: int = 0  # buffers regrown past their capacity
    dimension_updates: int = 0
    readback_bytes: int = 0  # bytes copied to the host by the last run
    tuning_timings: int = 0  # Tunable alternatives timed (runtime/tuner.py): 0 when all were cached
    tuned: int = 0  # Tunable steps chosen by timing


@dataclass(eq=False)
class _Expression:
    """One distinct symbolic expression and every place its value goes."""

    number: int
    expr: SymDim
    fn: Any  # the compiled evaluator
    commands: list[tuple[Command, str, int]] = field(default_factory=list)
    buffers: list[str] = field(default_factory=list)  # buffers sized by it (capacity checks)
    shaders: list[int] = field(default_factory=list)  # shaders baking it (recompiled on change)
    params: bool = False  # some dispatch parameter word is this expression


def _idle_dispatch(cmd: Command) -> bool:
    """A dispatch whose grid is empty now (a run does not encode it)."""
    return isinstance(cmd, DispatchCommand) and not all(cmd.workgroups)


class PlanReplay:
    """A CompiledModel replayed on a Backend: `run`, `update_dimensions`, device tensors.

    The public surface of PlanExecutor (its wgpu subclass); on the NullBackend it replays a plan
    with no GPU. `commands` are the steps in replay form, `buffers`/`capacity` the allocations
    by root tensor, `programs` the built shaders, `stats` the counters tests assert on.
    """

    def __init__(self, model: CompiledModel, backend: Backend, *, transport: str | Transport = IMMEDIATE,
                 tuning: TuneSettings | None = None):
        self.model = model
        self.backend = backend
        self.transport = get_transport(transport)
        self.limits: Limits = backend.limits
        self.stats = ExecutorStats()
        self.tuner = Tuner(tuning or TuneSettings.from_env(), self.limits.adapter, self.stats)
        self.dims: dict[str, int] = dict(model.dims)
        if ADAPTER_CPU in self.dims:  # kernel variants for this kind of adapter (ir/dim_env.py)
            self.dims[ADAPTER_CPU] = int(self.limits.cpu_adapter)
        # Too many parameters for push constants: that shader takes the uniform buffer.
        self.shader_transport = [
            self.transport if self.transport.carries(spec.immediate_bytes, self.limits.max_immediate_bytes)
            else UNIFORM for spec in model.shaders]
        self._alias = {n: t.alias_of for n, t in model.tensors.items() if t.alias_of}
        self.buffers: dict[str, Any] = {}
        self.capacity: dict[str, int] = {}
        self._layouts: dict[int, Any] = {}
        self.programs: dict[int, Any] = {}  # shader index -> program, for shaders a dispatch uses
        self._constraints = [(a, b, node, compile_dim(a), compile_dim(b)) for a, b, node in model.constraints]
        # Data-dependent symbols: the capacity each is sized for, as a function of the dims.
        self._bounds = {name: (compile_dim(b), dim_symbols(b)) for name, b in model.data_symbols.items()
                        if b is not None}
        self._setup_buffers()
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
        for name in (*model.inputs, *model.outputs):
            self._slot(name)
        self._live_commands = self._run_commands
        self._refresh_all()
        self.tune()  # the Tunable steps the cache has no choice for (none when tuning is off)

    # ---- setup --------------------------------------------------------------------------
    def root(self, name: str) -> str:
        return self._alias.get(name, name)

    def _size(self, name: str) -> int:
        # WebGPU buffers cannot be empty: a zero-size tensor still gets one word.
        return max(int(value(self.model.tensors[name].nbytes, self.dims)), 4)

    def _setup_buffers(self) -> None:
        for name, info in self.model.tensors.items():
            if info.alias_of:
                continue
            size = self._size(name)
            self._check_binding(name, size)
            self.buffers[name] = self.backend.alloc(name, size)
            self.capacity[name] = size
            if info.data is not None:
                data = dtypes.to_device(info.data, dtypes.from_name(info.dtype), f"weight '{name}'")
                if data.nbytes:
                    self.backend.copyin(self.buffers[name], data)

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
        """The shader's program, built at its first dispatch (whose bindings give the layout)."""
        index = step.shader
        if index not in self.programs:
            spec = self.model.shaders[index]
            self._layouts[index] = self.backend.layout(spec, step.bindings)
            self.programs[index] = self._build(index)
        return self.programs[index]

    def _build(self, index: int) -> Any:
        spec = self.model.shaders[index]
        transport = self.shader_transport[index]
        code = render(spec, self.model.templates[spec.template], self.dims, transport,
                      native_f16=self.limits.native_f16, packed_f16_reads=self.limits.packed_f16_reads,
                      subgroups=self.limits.subgroups, wide_reads=self.limits.wide_reads)
        return self.backend.program(spec, code, self._layouts[index], transport)

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

    def _setup_expressions(self) -> None:
        """Group the plan's symbolic bindings by distinct expression, indexed by symbol."""
        by_expr: dict[SymDim, _Expression] = {}
        words: dict[bool, tuple[list[int], list[int]]] = {False: ([], []), True: ([], [])}  # f32? -> (pos, expr)
        for b in self.model.symbolic_bindings:
            e = by_expr.get(b.expr)
            if e is None:
                e = by_expr[b.expr] = _Expression(len(by_expr), b.expr, b.expr.compile())
            if b.kind == "buffer":
                e.buffers.append(str(b.target))
            elif b.kind == "shader":
                if int(b.target) in self.programs:  # shaders no dispatch uses are never built
                    e.shaders.append(int(b.target))
            elif b.kind == "immediate":
                position, type_ = self.commands[int(b.target)].param_word(b.index)
                e.params = True
                pos, src = words[type_ == "f32"]
                pos.append(position)
                src.append(e.number)
            else:
                e.commands.append((self.commands[int(b.target)], b.kind, b.index))
        self._exprs = list(by_expr.values())
        self._values = [0] * len(self._exprs)  # each expression's current value (a list: cheap to compare)
        (self._param_pos, self._param_src), (self._float_pos, self._float_src) = (
            (np.array(pos, dtype=np.intp), np.array(src, dtype=np.intp)) for pos, src in words.values())
        self._by_symbol: dict[str, list[int]] = {}
        for e in self._exprs:
            for symbol in e.expr.symbols:
                self._by_symbol.setdefault(symbol, []).append(e.number)

    def _scatter_params(self) -> None:
        """Every symbolic parameter word from its expression's value, in two numpy scatters."""
        words = self.param_words
        values = np.array(self._values, dtype=np.int64)
        words[self._param_pos] = (values[self._param_src] & 0xFFFFFFFF).astype(np.uint32)
        if len(self._float_pos):
            words[self._float_pos] = values[self._float_src].astype(np.float32).view(np.uint32)

    def _refresh_all(self) -> None:
        """Evaluate everything for the current dims (load time; recovery from a failed update)."""
        for e in self._exprs:
            self._values[e.number] = e.fn(self.dims)
        for cmd in self.commands:
            cmd.refresh(self)
        self.backend.params_changed()
        for slot in self._slots.values():
            slot.refresh(self.dims)
        self._refresh_live()

    def _refresh_live(self) -> None:
        """What a run encodes (tuner.live_commands); mid-run readbacks may change grids: keep all."""
        self._live_commands = self._run_commands if self._device_syncs else live_commands(self._run_commands)

    def tune(self, *, force: bool = False, budget_s: float | None = None) -> list[TuneResult]:
        """Time the Tunable steps waiting for a choice (`force`: all) and replay the fastest."""
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

    # ---- dimensions ---------------------------------------------------------------------
    def update_dimensions(self, dims: Mapping[str, int]) -> None:
        """Change symbol values (e.g. sequence_length 8 → 1) without recompiling the plan.

        Only the distinct expressions over a changed symbol are evaluated (once each), and only
        the values that changed are scattered. Everything that can fail — bad values, broken
        constraints, sizes over the device limit, a shader that does not compile, an allocation
        — happens before the executor's state changes, so an error leaves it usable with the
        old dims. This runs once per generated token in an LLM session.
        """
        new = dict(self.dims)
        for name, v in dims.items():
            if name not in self.dims:
                raise DimensionError(f"unknown dimension '{name}' (the plan's symbols: {', '.join(sorted(self.dims))})")
            if name in self.model.data_symbols:
                raise DimensionError(f"dimension '{name}' depends on the data: the model sets it while it runs")
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise DimensionError(f"dimension '{name}' must be a non-negative integer, got {v!r}")
            new[name] = int(v)
        if all(new[k] == self.dims[k] for k in dims):
            return
        for name, (fn, _) in self._bounds.items():  # data symbols take their capacity from the dims
            new[name] = max(fn(new), 0)
        changed = {k for k in new if new[k] != self.dims[k]}
        for a, b, node, fa, fb in self._constraints:
            if fa(new) != fb(new):
                what = f"dimensions {a} = {fa(new)} and {b} = {fb(new)} must be equal" if isinstance(b, SymDim) \
                    else f"dimension {a} = {fa(new)} must be {b}"
                # The symbols' values too, unless shown already: an expression's value alone does
                # not say which feed broke it.
                hidden = sorted((dim_symbols(a) | dim_symbols(b)) - {str(x) for x in (a, b)})
                given = f" (with {', '.join(f'{s}={new[s]}' for s in hidden)})" if hidden else ""
                raise DimensionError(f"{what}{given}: node '{node}' needs them equal "
                                     "(they were when the model was compiled)")
        self._apply(new, changed)
        self.stats.dimension_updates += 1

    def set_data_symbol(self, name: str, value: int) -> None:
        """A data-dependent symbol's value, read back during a run: patches the values that
        depend on it (grid sizes, parameters, copy sizes) before the steps after it are encoded,
        and grows the buffers it sizes past their capacity (nothing has written them yet)."""
        if self.dims[name] == value:
            return
        new = dict(self.dims)
        new[name] = value
        for other, (fn, symbols) in self._bounds.items():  # capacities bounded by this symbol follow it
            if name in symbols:
                new[other] = max(fn(new), 0)
        self._apply(new, {k for k in new if new[k] != self.dims[k]})

    def _apply(self, new: dict[str, int], changed: set[str]) -> None:
        """Move to the dims `new` (`changed`: the symbols whose values differ)."""
        affected = [self._exprs[i] for i in sorted({i for s in changed for i in self._by_symbol.get(s, ())})]
        # A shader baking a changed static dim is rebuilt (once, though it may bake several values).
        rebuild = {index for e in affected for index in e.shaders}
        values = self._values
        exprs = [(e, v) for e, v in ((e, e.fn(new)) for e in affected) if v != values[e.number]]
        grown: dict[str, int] = {}
        for e, v in exprs:
            for name in e.buffers:
                size = max(v, 4)
                if size > self.limits.max_binding_bytes:
                    shown = {k: n for k, n in new.items() if k != ADAPTER_CPU}  # the user's dims only
                    raise DeviceError(f"tensor '{name}' would need {size} bytes for {shown}, over this "
                                      f"device's max storage binding of {self.limits.max_binding_bytes} bytes")
                if size > self.capacity[name]:
                    grown[name] = max(size, grown.get(name, 0))
        old_dims, self.dims = self.dims, new  # programs render with the new dims
        programs: dict[int, Any] = {}
        buffers: dict[str, Any] = {}
        try:
            for index in sorted(rebuild):
                programs[index] = self._build(index)
            for name, size in grown.items():
                buffers[name] = self.backend.alloc(name, size)
        except Exception:
            for buf in buffers.values():
                self.backend.free(buf)
            self.dims = old_dims  # nothing else changed yet
            raise
        try:
            self._commit(exprs, programs, buffers, grown, changed)
        except Exception:
            self.dims = old_dims  # leave the executor as it was: usable with the old dims
            self._refresh_all()
            raise

    def _commit(self, exprs: list[tuple[_Expression, int]], programs: dict[int, Any], buffers: dict[str, Any],
                grown: dict[str, int], changed: set[str]) -> None:
        for index, program in programs.items():
            self.programs[index] = program
            for cmd in self._by_shader.get(index, ()):
                cmd.program = program
            self.stats.recompiles += 1
        for name, buf in buffers.items():  # grow past capacity: new buffer, new bind groups for its users
            self.backend.free(self.buffers[name])
            self.buffers[name] = buf
            self.capacity[name] = grown[name]
            self.stats.reallocs += 1
        if buffers:
            for cmd in self.commands:
                cmd.rebind(self, set(buffers))
        dirty: dict[Command, bool] = {}  # command -> whether it was a dispatch with an empty grid
        params = False
        values = self._values
        for e, v in exprs:
            values[e.number] = v
            params = params or e.params
            for cmd, kind, index in e.commands:
                if cmd not in dirty:
                    dirty[cmd] = _idle_dispatch(cmd)
                cmd.set(kind, index, v)
        for cmd in dirty:
            cmd.settle(self)
        if params:
            self._scatter_params()
            self.backend.params_changed()
        for slot in self._slots.values():
            if slot.symbols & changed:
                slot.refresh(self.dims)
        # What a run encodes (live_commands) changes only where a grid empties or fills or a
        # Tunable may choose anew; a decode step's new lengths change neither (~0.3 ms a step).
        if any(isinstance(cmd, TunableCommand) or _idle_dispatch(cmd) != was for cmd, was in dirty.items()):
            self._refresh_live()

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
        unknown = [k for k in feeds if k not in model.inputs]
        missing = [k for k in model.inputs if k not in feeds]
        if unknown or missing:
            raise InputError("; ".join(
                ([f"unknown inputs {unknown}"] if unknown else []) + ([f"missing inputs {missing}"] if missing else []))
                + f" (the model's inputs: {', '.join(model.inputs)})")
        checked = {k: self._check_feed(k, v) for k, v in feeds.items()}
        if self.tuner.pending:  # new shape classes; before the feeds land (timing writes outputs)
            self.tune()

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
        if status_raw is not None:
            self._check_status(status_raw)
        results: dict[str, np.ndarray | DeviceTensor] = {}
        total = 0
        for slot, raw in zip(slots, raws):
            total += slot.nbytes
            count = math.prod(slot.shape)
            results[slot.name] = dtypes.from_device(raw, slot.dtype, count).reshape(slot.shape)
        for name in device_outputs:
            results[name] = self.device_tensor(name)
        self.stats.readback_bytes = total
        return {n: results[n] for n in (*names, *[d for d in device_outputs if d not in names])}

    def _check_status(self, raw: bytes | memoryview) -> None:
        """Raise the error a kernel reported in the status word (and clear it for the next run)."""
        site = int(np.frombuffer(raw, dtype=np.uint32)[0])
        if not site:
            return
        self.backend.copyin(self.buffers[STATUS_TENSOR], np.zeros(1, np.uint32))
        sites = self.model.sites
        node, op_type, what = sites[site - 1] if site <= len(sites) else ("?", "?", f"report {site}")
        raise ComputeError(f"node '{node}' ({op_type}): {what}; its results are wrong, so the run's outputs "
                           "are not returned")

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
        """Kernel launches a run encodes now (empty grids and Tunable alternatives not replayed
        left out)."""
        return sum(isinstance(c, DispatchCommand) for c in self._live_commands)

    def tunable_choices(self) -> dict[int, int]:
        """{id of a Tunable step: the alternative it replays now} (plan_cost's `choices`)."""
        return {id(c.step): c.chosen for c in self.commands if isinstance(c, TunableCommand)}

    def dispatch_commands(self) -> list[DispatchCommand]:
        """Every kernel launch in replay order (including those whose grid is empty now), but
        not those of the alternatives a Tunable step does not replay now."""
        idle = idle_commands(self.commands)
        return [d for cmd in self.commands if id(cmd) not in idle for d in cmd.dispatches()]
