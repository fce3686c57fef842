"""PlanExecutor: replays a CompiledModel on a wgpu device.

Setup happens once: buffers (weights uploaded), shader modules, pipelines and bind groups.
`run` writes the feeds, encodes every step into one command encoder (one compute pass between
copies), submits once and reads back only the requested outputs. `update_dimensions`
re-evaluates the plan's symbolic bindings and patches immediates, workgroup counts and copy
sizes in place; it recompiles only shaders baked with a changed static dim and reallocates
only buffers whose capacity is exceeded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import wgpu

from onyxia.codegen.wgsl import IMMEDIATE, UNIFORM, UNIFORM_GROUP, render
from onyxia.errors import DeviceError, DimensionError, InputError, ShaderError
from onyxia.ir import dtypes
from onyxia.ir.shapes import SymDim, compile_dim
from onyxia.plan import CompiledModel, CopyBuffer, Dispatch, ShaderSpec, TensorInfo, WriteBuffer
from onyxia.runtime.tensor import DeviceTensor

_USAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
_UNIFORM_SLOT = 256  # bytes per dispatch in the uniform transport (minUniformBufferOffsetAlignment)


@dataclass
class ExecutorStats:
    runs: int = 0
    recompiles: int = 0  # shader modules rebuilt after a static dim changed
    reallocs: int = 0  # buffers regrown past their capacity
    dimension_updates: int = 0
    readback_bytes: int = 0  # bytes copied to the host by the last run


def _value(v: Any, dims: Mapping[str, int]) -> Any:
    return v.evaluate(dims) if isinstance(v, SymDim) else v


def _pack(values: Sequence[Any], types: Sequence[str]) -> np.ndarray:
    """Immediates as 32-bit words."""
    words = np.zeros(max(len(values), 1), dtype=np.uint32)
    for i, (v, t) in enumerate(zip(values, types)):
        words[i] = np.float32(v).view(np.uint32) if t == "f32" else (int(v) & 0xFFFFFFFF)
    return words


class _DispatchCmd:
    """A Dispatch step with everything `run` needs, resolved."""

    __slots__ = ("step", "index", "pipeline", "bind_group", "raw_workgroups", "workgroups", "immediates", "raw",
                 "uniform_offset", "types")

    def __init__(self, step: Dispatch, index: int, types: Sequence[str]):
        self.step, self.index, self.types = step, index, types
        self.pipeline = self.bind_group = None
        self.raw_workgroups = [0, 0, 0]
        self.workgroups = (0, 0, 0)
        self.set_immediates(np.zeros(1, np.uint32))
        self.uniform_offset = 0


    def set_immediates(self, words: np.ndarray) -> None:
        # wgpu-py turns a bytearray into a pointer ~3x faster than a numpy array (measured:
        # 0.7 vs 1.9 µs), and set_immediates runs once per dispatch per run. `immediates` is a
        # uint32 view of the same memory, for patching words in place.
        self.raw = bytearray(words.astype(np.uint32).tobytes())
        self.immediates = np.frombuffer(self.raw, dtype=np.uint32)


class PlanExecutor:
    def __init__(self, runtime, model: CompiledModel, *, transport: str = IMMEDIATE):
        self.runtime = runtime
        self.device: wgpu.GPUDevice = runtime.device
        self.model = model
        self.transport = transport
        self.stats = ExecutorStats()
        self.dims: dict[str, int] = dict(model.dims)
        self._max_wg = int(runtime.limits.get("max-compute-workgroups-per-dimension", 65535))
        self._max_binding = int(runtime.limits.get("max-storage-buffer-binding-size", 1 << 27))
        self._max_immediates = runtime.max_immediate_bytes if transport == IMMEDIATE else 0
        self._alias = {n: t.alias_of for n, t in model.tensors.items() if t.alias_of}
        self._buffers: dict[str, wgpu.GPUBuffer] = {}
        self._capacity: dict[str, int] = {}
        self._staging: dict[str, wgpu.GPUBuffer] = {}
        # Each symbolic expression compiled once: update_dimensions is a per-token hot path.
        self._bindings = [(b, b.expr.compile()) for b in model.symbolic_bindings]
        self._constraints = [(a, b, node, compile_dim(a), compile_dim(b)) for a, b, node in model.constraints]
        self._steps = model.steps
        self._setup_buffers()
        self._setup_pipelines()
        self._setup_commands()
        self._write_symbolic_data()

    # ---- setup --------------------------------------------------------------------------
    def _root(self, name: str) -> str:
        return self._alias.get(name, name)

    def _nbytes(self, info: TensorInfo) -> int:
        return max(int(_value(info.nbytes, self.dims)), 4)

    def _setup_buffers(self) -> None:
        for name, info in self.model.tensors.items():
            if info.alias_of:
                continue
            self._allocate(name, info)
            if info.data is not None:
                dtype = dtypes.from_name(info.dtype)
                data = dtypes.to_device(info.data, dtype, f"weight '{name}'")
                if data.nbytes:
                    self.device.queue.write_buffer(self._buffers[name], 0, data)

    def _allocate(self, name: str, info: TensorInfo) -> None:
        size = self._nbytes(info)
        if size > self._max_binding:
            raise DeviceError(f"tensor '{name}' needs {size} bytes, over this device's "
                              f"max storage binding of {self._max_binding} bytes")
        self._buffers[name] = self.device.create_buffer(label=name, size=size, usage=_USAGE)
        self._capacity[name] = size

    def _setup_pipelines(self) -> None:
        self._pipelines: list[wgpu.GPUComputePipeline] = [None] * len(self.model.shaders)  # type: ignore[list-item]
        self._layouts: list[wgpu.GPUBindGroupLayout] = [None] * len(self.model.shaders)  # type: ignore[list-item]
        self._shader_transport: list[str] = [self.transport] * len(self.model.shaders)
        first_use: dict[int, Dispatch] = {}
        for s in self._steps:
            if isinstance(s, Dispatch):
                first_use.setdefault(s.shader, s)
        if self.transport == UNIFORM or any(
                spec.immediate_bytes > self._max_immediates for spec in self.model.shaders):
            self._uniform_layout = self.device.create_bind_group_layout(entries=[{
                "binding": 0, "visibility": wgpu.ShaderStage.COMPUTE,
                "buffer": {"type": wgpu.BufferBindingType.uniform, "has_dynamic_offset": True}}])
        for index, spec in enumerate(self.model.shaders):
            if spec.immediate_bytes > self._max_immediates:
                self._shader_transport[index] = UNIFORM  # too many params for push constants
            step = first_use.get(index)
            if step is None:
                continue
            self._layouts[index] = self.device.create_bind_group_layout(entries=[
                {"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
                 "buffer": {"type": wgpu.BufferBindingType.read_only_storage if b.read_only
                            else wgpu.BufferBindingType.storage}}
                for i, b in enumerate(step.bindings)])
            self._pipelines[index] = self._build_pipeline(index, spec)

    def _build_pipeline(self, index: int, spec: ShaderSpec) -> wgpu.GPUComputePipeline:
        transport = self._shader_transport[index]
        template = self.model.templates[spec.template]
        code = render(spec, template, self.dims, transport if spec.immediates else IMMEDIATE)
        try:
            module = self.device.create_shader_module(label=spec.label, code=code)
            layouts = [self._layouts[index]]
            immediate_size = 0
            if spec.immediates and transport == UNIFORM:
                layouts.append(self._uniform_layout)
            elif spec.immediates:
                immediate_size = spec.immediate_bytes
            layout = self.device.create_pipeline_layout(bind_group_layouts=layouts, immediate_size=immediate_size)
            return self.device.create_compute_pipeline(layout=layout, compute={"module": module,
                                                                               "entry_point": spec.entry_point})
        except Exception as exc:
            raise ShaderError(f"shader '{spec.label}' failed to compile: {exc}") from exc

    def _setup_commands(self) -> None:
        self._cmds: list[Any] = []
        n_uniform = 0
        for index, s in enumerate(self._steps):
            if isinstance(s, Dispatch):
                spec = self.model.shaders[s.shader]
                cmd = _DispatchCmd(s, index, [p.type for p in spec.immediates])
                if spec.immediates and self._shader_transport[s.shader] == UNIFORM:
                    cmd.uniform_offset = n_uniform * _UNIFORM_SLOT
                    n_uniform += 1
                else:
                    cmd.uniform_offset = -1
                self._cmds.append(cmd)
            elif isinstance(s, CopyBuffer):
                self._cmds.append([s, 0, 0, 0])  # step, size, src_offset, dst_offset
            else:
                self._cmds.append(s)
        self._uniform_buffer = None
        if n_uniform:
            self._uniform_buffer = self.device.create_buffer(
                label="params", size=n_uniform * _UNIFORM_SLOT,
                usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
            self._uniform_group = self.device.create_bind_group(layout=self._uniform_layout, entries=[
                {"binding": 0, "resource": {"buffer": self._uniform_buffer, "offset": 0, "size": _UNIFORM_SLOT}}])
        self._refresh_commands(bind_groups=True)

    def _make_bind_group(self, step: Dispatch) -> wgpu.GPUBindGroup:
        return self.device.create_bind_group(layout=self._layouts[step.shader], entries=[
            {"binding": i, "resource": {"buffer": self._buffers[self._root(b.tensor)]}}
            for i, b in enumerate(step.bindings)])

    def _refresh_commands(self, bind_groups: bool = False) -> None:
        """Evaluate workgroups, immediates and copy sizes for the current dims."""
        for cmd in self._cmds:
            if isinstance(cmd, _DispatchCmd):
                s = cmd.step
                cmd.pipeline = self._pipelines[s.shader]
                if bind_groups:
                    cmd.bind_group = self._make_bind_group(s)
                cmd.raw_workgroups = [int(_value(v, self.dims)) for v in s.workgroups]
                self._fold_grid(cmd)
                cmd.set_immediates(_pack([_value(v, self.dims) for v in s.immediates], cmd.types))
            elif isinstance(cmd, list):
                step = cmd[0]
                cmd[1:] = [int(_value(v, self.dims)) for v in (step.size, step.src_offset, step.dst_offset)]
        self._upload_uniforms()

    def _fold_grid(self, cmd: _DispatchCmd) -> None:
        x, y, z = cmd.raw_workgroups
        if x > self._max_wg and y == 1:  # fold a long 1-D grid into 2-D; kernels use the flat index
            y = -(-x // self._max_wg)
            x = -(-x // y)
        cmd.workgroups = (x, y, z)

    def _upload_uniforms(self) -> None:
        if self._uniform_buffer is None:
            return
        uniform = np.zeros(self._uniform_buffer.size // 4, np.uint32)
        for cmd in self._cmds:
            if isinstance(cmd, _DispatchCmd) and cmd.uniform_offset >= 0:
                start = cmd.uniform_offset // 4
                uniform[start:start + len(cmd.immediates)] = cmd.immediates
        self.device.queue.write_buffer(self._uniform_buffer, 0, uniform)

    def _write_symbolic_data(self) -> None:
        for s in self._steps:
            if isinstance(s, WriteBuffer):
                data = np.array([_value(v, self.dims) for v in s.data], dtype=dtypes._DEVICE_NUMPY[s.dtype])
                if data.nbytes:
                    self.device.queue.write_buffer(self._buffers[self._root(s.dst)], 0, data)

    # ---- dimensions ---------------------------------------------------------------------
    def update_dimensions(self, dims: Mapping[str, int]) -> None:
        """Change symbol values (e.g. sequence_length 8 → 1) without recompiling the plan.

        Only bindings whose expression uses a changed symbol are re-evaluated, each through its
        compiled function; this runs once per generated token in an LLM session.
        """
        new = dict(self.dims)
        for name, value in dims.items():
            if name not in self.dims:
                raise DimensionError(f"unknown dimension '{name}' (the plan's symbols: {', '.join(sorted(self.dims))})")
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise DimensionError(f"dimension '{name}' must be a non-negative integer, got {value!r}")
            new[name] = int(value)
        changed = {k for k in new if new[k] != self.dims[k]}
        if not changed:
            return
        for a, b, node, fa, fb in self._constraints:
            if fa(new) != fb(new):
                what = f"dimensions {a} = {fa(new)} and {b} = {fb(new)} must be equal" if isinstance(b, SymDim) \
                    else f"dimension {a} = {fa(new)} must be {b}"
                raise DimensionError(f"{what}: node '{node}' needs them equal (they were when the model was compiled)")
        old_dims, self.dims = self.dims, new
        try:
            self._patch(changed)
        except Exception:
            self.dims = old_dims  # leave the executor as it was: usable with the old dims
            self._refresh_commands(bind_groups=True)
            raise
        self.stats.dimension_updates += 1

    def _patch(self, changed: set[str]) -> None:
        new = self.dims
        stale: set[str] = set()
        regrid: set[_DispatchCmd] = set()
        rebuild: set[int] = set()
        writes = False
        immediates = False
        for b, fn in self._bindings:
            if not (b.expr.symbols & changed):
                continue
            kind = b.kind
            if kind == "immediate":
                cmd = self._cmds[b.target]
                v = fn(new)
                is_float = cmd.types[b.index] == "f32"
                cmd.immediates[b.index] = np.float32(v).view(np.uint32) if is_float else v & 0xFFFFFFFF
                immediates = True
            elif kind == "workgroups":
                cmd = self._cmds[b.target]
                cmd.raw_workgroups[b.index] = fn(new)
                regrid.add(cmd)
            elif kind == "copy":
                self._cmds[b.target][1 + b.index] = fn(new)
            elif kind == "write":
                writes = True
            elif kind == "buffer":
                size = fn(new)
                if size > self._max_binding:
                    raise DeviceError(f"tensor '{b.target}' would need {size} bytes for {new}, over this "
                                      f"device's max storage binding of {self._max_binding} bytes")
                if size > self._capacity[b.target]:
                    stale.add(b.target)
            elif kind == "shader" and self._pipelines[b.target] is not None:
                rebuild.add(b.target)  # a shader may bake several values over the changed dim
        for index in sorted(rebuild):
            self._pipelines[index] = self._build_pipeline(index, self.model.shaders[index])
            for cmd in self._cmds:
                if isinstance(cmd, _DispatchCmd) and cmd.step.shader == index:
                    cmd.pipeline = self._pipelines[index]
            self.stats.recompiles += 1
        for cmd in regrid:
            self._fold_grid(cmd)
        for name in stale:  # grow past capacity: new buffer, new bind groups for its users
            self._buffers[name].destroy()
            self._allocate(name, self.model.tensors[name])
            self._staging.pop(name, None)
            self.stats.reallocs += 1
        if stale:
            for cmd in self._cmds:
                if isinstance(cmd, _DispatchCmd) and any(self._root(x.tensor) in stale for x in cmd.step.bindings):
                    cmd.bind_group = self._make_bind_group(cmd.step)
        if immediates:
            self._upload_uniforms()
        if writes:
            self._write_symbolic_data()

    # ---- running ------------------------------------------------------------------------
    def input_shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(_value(d, self.dims)) for d in self.model.tensors[name].shape)

    def _check_feed(self, name: str, value: Any) -> np.ndarray | DeviceTensor:
        info = self.model.tensors[name]
        expected = self.input_shape(name)
        dtype = dtypes.from_name(info.dtype)
        if isinstance(value, DeviceTensor):
            if value.dtype != dtype.name or value.shape != expected:
                raise InputError(f"input '{name}': device tensor is {value.dtype}{list(value.shape)}, "
                                 f"expected {dtype.name}{list(expected)}")
            return value
        array = np.asarray(value)
        if array.dtype != dtype.numpy:
            raise InputError(f"input '{name}' has dtype {array.dtype}, expected {dtype.name}")
        if array.ndim != len(expected):
            raise InputError(f"input '{name}' has rank {array.ndim}, expected {len(expected)} "
                             f"(shape {[str(d) for d in info.shape]})")
        for axis, (got, want, sym) in enumerate(zip(array.shape, expected, info.shape)):
            if got != want:
                hint = f" ({sym} = {want}; call update_dimensions to change it)" if isinstance(sym, SymDim) else ""
                raise InputError(f"input '{name}' dim {axis} is {got}, expected {want}{hint}")
        return array

    def run(self, feeds: Mapping[str, Any], outputs: Sequence[str] | None = None, *,
            device_outputs: Sequence[str] = ()) -> dict[str, np.ndarray | DeviceTensor]:
        """Run the plan. Feeds are numpy arrays or DeviceTensors; outputs named in
        `device_outputs` come back as DeviceTensors (valid until the next run) and are not
        read back."""
        names = list(self.model.outputs) if outputs is None else list(outputs)
        for n in (*names, *device_outputs):
            if n not in self.model.tensors:
                raise InputError(f"unknown output '{n}' (outputs: {', '.join(self.model.outputs)})")
        unknown = [k for k in feeds if k not in self.model.inputs]
        missing = [k for k in self.model.inputs if k not in feeds]
        if unknown or missing:
            raise InputError("; ".join(
                ([f"unknown inputs {unknown}"] if unknown else []) + ([f"missing inputs {missing}"] if missing else []))
                + f" (the model's inputs: {', '.join(self.model.inputs)})")
        checked = {k: self._check_feed(k, v) for k, v in feeds.items()}

        queue = self.device.queue
        encoder = self.device.create_command_encoder()
        for name, value in checked.items():
            buf = self._buffers[self._root(name)]
            if isinstance(value, DeviceTensor):
                if value.buffer is not buf:
                    encoder.copy_buffer_to_buffer(value.buffer, 0, buf, 0, value.nbytes)
            else:
                data = dtypes.to_device(value, dtypes.from_name(self.model.tensors[name].dtype), f"input '{name}'")
                if data.nbytes:
                    queue.write_buffer(buf, 0, data)
        self._encode(encoder)
        readback = [n for n in names if n not in device_outputs]
        staged = []
        for name in readback:
            nbytes = int(_value(self.model.tensors[name].nbytes, self.dims))
            if nbytes:
                staging = self._staging_buffer(name)
                encoder.copy_buffer_to_buffer(self._buffers[self._root(name)], 0, staging, 0, nbytes)
            staged.append((name, nbytes))
        try:
            queue.submit([encoder.finish()])
        except Exception as exc:
            raise DeviceError(f"GPU submission failed (device lost?): {exc}") from exc
        results: dict[str, np.ndarray | DeviceTensor] = {}
        total = 0
        for name, nbytes in staged:
            info = self.model.tensors[name]
            dtype = dtypes.from_name(info.dtype)
            shape = self.input_shape(name)
            if nbytes:
                staging = self._staging[name]
                staging.map_sync(wgpu.MapMode.READ, 0, nbytes)
                raw = np.frombuffer(staging.read_mapped(0, nbytes, copy=True), dtype=dtype.device_numpy)
                staging.unmap()
                total += nbytes
            else:
                raw = np.zeros(0, dtype=dtype.device_numpy)
            results[name] = dtypes.from_device(raw, dtype).reshape(shape)
        for name in device_outputs:
            info = self.model.tensors[name]
            results[name] = DeviceTensor(self._buffers[self._root(name)], self.input_shape(name), info.dtype)
        self.stats.runs += 1
        self.stats.readback_bytes = total
        return {n: results[n] for n in (*names, *[d for d in device_outputs if d not in names])}

    def _staging_buffer(self, name: str) -> wgpu.GPUBuffer:
        buf = self._staging.get(name)
        cap = self._capacity[self._root(name)]
        if buf is None or buf.size < cap:
            buf = self.device.create_buffer(label=f"{name}/readback", size=cap,
                                            usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
            self._staging[name] = buf
        return buf

    def _encode(self, encoder: wgpu.GPUCommandEncoder) -> None:
        """Every step into one encoder; a compute pass spans each run of dispatches."""
        cpass = None
        for cmd in self._cmds:
            if isinstance(cmd, _DispatchCmd):
                x, y, z = cmd.workgroups
                if not (x and y and z):
                    continue
                if cpass is None:
                    cpass = encoder.begin_compute_pass()
                self._encode_dispatch(cpass, cmd)
            elif isinstance(cmd, list):
                if cpass is not None:
                    cpass.end()
                    cpass = None
                step, size, src_off, dst_off = cmd
                if size:
                    encoder.copy_buffer_to_buffer(self._buffers[self._root(step.src)], src_off,
                                                  self._buffers[self._root(step.dst)], dst_off, size)
        if cpass is not None:
            cpass.end()

    def _encode_dispatch(self, cpass: wgpu.GPUComputePassEncoder, cmd: _DispatchCmd) -> None:
        cpass.set_pipeline(cmd.pipeline)
        cpass.set_bind_group(0, cmd.bind_group)
        if cmd.uniform_offset >= 0:
            cpass.set_bind_group(UNIFORM_GROUP, self._uniform_group, [cmd.uniform_offset])
        elif cmd.types:
            cpass.set_immediates(0, cmd.raw, 0, len(cmd.raw))
        x, y, z = cmd.workgroups
        if x and y and z:
            cpass.dispatch_workgroups(x, y, z)

    # ---- device tensors -------------------------------------------------------------------
    def device_tensor(self, name: str) -> DeviceTensor:
        """The executor's own buffer for tensor `name` (e.g. to keep state on the device)."""
        info = self.model.tensors[name]
        return DeviceTensor(self._buffers[self._root(name)], self.input_shape(name), info.dtype)

    def read_tensor(self, tensor: DeviceTensor) -> np.ndarray:
        return tensor.numpy(self.device)
