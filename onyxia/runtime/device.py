"""Runtime: picks a wgpu adapter, opens a device with its real limits and useful features."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import wgpu

from onyxia.codegen.transport import IMMEDIATE, UNIFORM, Transport, get_transport
from onyxia.errors import DeviceError
from onyxia.plan import CompiledModel
from onyxia.runtime.executor import PlanExecutor
from onyxia.runtime.ffi_types import install_for_wgpu
from onyxia.runtime.tuner import TuneSettings

# Features onyxia uses when the adapter has them.
WANTED_FEATURES = ("immediates", "shader-f16", "timestamp-query", "timestamp-query-inside-passes",
                   "timestamp-query-inside-encoders", "subgroup", "shader-int64")
_OFF = ("0", "false", "no", "off")
_TYPE_RANK = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}
_BACKEND_RANK = {"Vulkan": 0, "Metal": 0, "D3D12": 0, "OpenGL": 2}


@dataclass(frozen=True)
class AdapterInfo:
    name: str
    adapter_type: str  # DiscreteGPU | IntegratedGPU | CPU | ...
    backend: str  # Vulkan | Metal | D3D12 | OpenGL
    summary: str
    vendor: str = ""
    driver: str = ""  # the driver's description (e.g. "Mesa 22.3.6 (LLVM 15.0.6)")

    @property
    def identity(self) -> str:
        """vendor/device/driver/backend: what the tuning cache keys timings by."""
        return "/".join((self.vendor, self.name, self.driver, self.backend))


def _spread_lavapipe_work() -> None:
    """More llvmpipe (lavapipe) worker threads than cores, unless LP_NUM_THREADS is set.

    Mesa's compute thread pool cuts a dispatch's workgroups into one equal run per thread; a
    worker that wakes late finds its run taken by another that finished early, so with one
    thread per core a short dispatch often runs on one core. Twice as many runs as cores keeps
    both busy: on a 2-core VM (Mesa 22.3) a 4-thread pool decodes the ~30M int4 Llama 1.3-2x
    faster (prefill 124-157 -> 77-94 ms), fp32 the same. Read when the driver enumerates
    adapters, so this runs at import, before the first enumeration."""
    if "LP_NUM_THREADS" not in os.environ:
        os.environ["LP_NUM_THREADS"] = DRIVER_ENV_SET["LP_NUM_THREADS"] = str(min(2 * (os.cpu_count() or 1), 16))


# What _spread_lavapipe_work set (not the user): other programs started from this process, such
# as a benchmark's peers, get the environment without it.
DRIVER_ENV_SET: dict[str, str] = {}

_spread_lavapipe_work()
install_for_wgpu()  # wgpu's descriptor types without a C parse each (ffi_types' doc)


def _info(adapter: wgpu.GPUAdapter) -> AdapterInfo:
    info = adapter.info
    return AdapterInfo(info.get("device", "") or adapter.summary, info.get("adapter_type", ""),
                       info.get("backend_type", ""), adapter.summary, str(info.get("vendor", "")),
                       str(info.get("description", "")))


def _mesa_version(driver: str) -> tuple[int, int] | None:
    """(major, minor) of a Mesa driver description ("Mesa 25.0.7-2~bpo12+1 (LLVM 15.0.6)")."""
    found = re.match(r"Mesa (\d+)\.(\d+)", driver.strip())
    return (int(found[1]), int(found[2])) if found else None


def _lavapipe_mesa(info: AdapterInfo) -> tuple[int, int] | None:
    """The Mesa version of a CPU-type adapter's driver (lavapipe), else None."""
    return _mesa_version(info.driver) if info.adapter_type == "CPU" else None


# lavapipe from this Mesa on compiles a private array indexed at run time as an array; Mesa 22.3
# lowers it to branch ladders. Staging a conv_register tile's accumulators (first dispatch, Mesa's
# cache off, 2-core EPYC): 32x8 3x3 private 1.07 s on Mesa 25 vs 3.3 s on 22.3; in workgroup
# memory 1.6 vs 0.45 s; 16x16 1x1 1.03 vs 3.1-3.6 s, 2.1 vs 0.44 s. Between 22.3 and 25 unmeasured.
INDEXED_PRIVATE_MESA = (25, 0)


def stages_privately(info: AdapterInfo) -> bool:
    """Whether kernels stage through private arrays indexed at run time on this adapter
    (codegen/wgsl.py ONYXIA_INDEXED_PRIVATE): lavapipe from INDEXED_PRIVATE_MESA on."""
    mesa = _lavapipe_mesa(info)
    return mesa is not None and mesa >= INDEXED_PRIVATE_MESA


# lavapipe before this Mesa runs the register-tiled products fastest with 32 rows an invocation
# (128 accumulators), from it on with 16: Mesa 25 loads storage through a branch ladder per lane,
# and across it 128 accumulators spill on every step. Whisper's fc1 product (M 1500, K 384, N
# 1536, gemv_chunked.wgsl alone, medians, 2-core EPYC): Mesa 22.3 32 rows 165 ms, 16 rows 211;
# Mesa 25 85 / 44 (K 384 / N 384: 21.5 / 11.0; K 1536 / N 384: 82 / 41). Between them unmeasured.
NARROW_TILES_MESA = (25, 0)


def has_wide_register_tiles(info: AdapterInfo) -> bool:
    """The "wide-register-tiles" adapter trait (plan.select.TRAITS): lavapipe before NARROW_TILES_MESA."""
    mesa = _lavapipe_mesa(info)
    return mesa is not None and mesa < NARROW_TILES_MESA


# lavapipe from this Mesa on guards every storage load with a branch per lane (GALLIVM_DEBUG=ir:
# unet2d_small's register attention kernel, 8-wide heads, 30k instructions in 1,483 blocks): the
# register attention kernel (sdpa_rows.wgsl, a load site for each of its 4 rows' operands)
# compiles in 1.3-1.6 s there against 0.35 s on Mesa 22.3, and unet2d_small's attention over
# heads of 8 takes 206 ms a run against 148 with the flash kernel (0.36 s to compile); on Mesa 22.3
# 168 vs 182 ms (2-core EPYC, alternating, medians of 7). Between them unmeasured.
GUARDED_LOADS_MESA = (25, 0)


def has_guarded_loads(info: AdapterInfo) -> bool:
    """The "guarded-loads" adapter trait (plan.select.TRAITS): lavapipe from GUARDED_LOADS_MESA on."""
    mesa = _lavapipe_mesa(info)
    return mesa is not None and mesa >= GUARDED_LOADS_MESA


def list_adapters() -> list[AdapterInfo]:
    return [_info(a) for a in wgpu.gpu.enumerate_adapters_sync()]


def select_adapter(choice: str | int | None = None) -> wgpu.GPUAdapter:
    """Discrete > integrated > virtual > CPU, native APIs before OpenGL.

    `choice` (or the ONYXIA_ADAPTER environment variable) picks by index in
    `list_adapters()` or by a case-insensitive substring of the adapter's summary.
    """
    adapters = wgpu.gpu.enumerate_adapters_sync()
    if not adapters:
        raise DeviceError("no GPU adapter found; install a Vulkan driver (on Debian: mesa-vulkan-drivers)")
    choice = os.environ.get("ONYXIA_ADAPTER") if choice is None else choice
    if choice is not None and str(choice).strip() != "":
        text = str(choice).strip()
        if text.isdigit():
            if int(text) >= len(adapters):
                raise DeviceError(f"adapter index {text} out of range ({len(adapters)} adapters)")
            return adapters[int(text)]
        matches = [a for a in adapters if text.lower() in a.summary.lower()]
        if not matches:
            names = "; ".join(f"{i}: {a.summary}" for i, a in enumerate(adapters))
            raise DeviceError(f"no adapter matches '{text}' (available: {names})")
        adapters = matches
    return min(adapters, key=lambda a: (_TYPE_RANK.get(_info(a).adapter_type, 4),
                                        _BACKEND_RANK.get(_info(a).backend, 1)))


_SUBGROUP_PROBE = """
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(8)
fn main(@builtin(subgroup_size) lanes: u32, @builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) { out[0] = lanes; }
}
"""


def _subgroup_size(device: wgpu.GPUDevice) -> int:
    """The subgroup size a workgroup of 8 runs with (one dispatch, ~15 ms on lavapipe the first
    time, then Mesa's disk cache), or 0 if the probe fails."""
    try:
        out = device.create_buffer(size=4, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
        pipeline = device.create_compute_pipeline(layout="auto", compute={
            "module": device.create_shader_module(code=_SUBGROUP_PROBE), "entry_point": "main"})
        encoder = device.create_command_encoder()
        cpass = encoder.begin_compute_pass()
        cpass.set_pipeline(pipeline)
        cpass.set_bind_group(0, device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[
            {"binding": 0, "resource": {"buffer": out}}]))
        cpass.dispatch_workgroups(1, 1, 1)
        cpass.end()
        device.queue.submit([encoder.finish()])
        size = int.from_bytes(bytes(device.queue.read_buffer(out, 0, 4)), "little")
        out.destroy()
        return size
    except Exception:  # noqa: BLE001 - unknown: kernels take their plain paths
        return 0


class Runtime:
    """Owns the wgpu device; `load_model` turns a CompiledModel into a PlanExecutor."""

    def __init__(self, adapter: str | int | wgpu.GPUAdapter | None = None, *,
                 transport: str | Transport | None = None, f16: bool | None = None,
                 packed_f16_reads: bool | None = None, subgroups: bool = True, wide_reads: bool | None = None,
                 indexed_private: bool | None = None, wide_register_tiles: bool | None = None,
                 guarded_loads: bool | None = None):
        """`f16=False` (or ONYXIA_F16=0) leaves shader-f16 unused even where the adapter has it:
        float16 tensors keep their 2-byte storage, packed in u32 words, as on adapters without it.
        `packed_f16_reads`: with shader-f16, read-only float16 operands read as vec4s still come
        packed in words (the matrix products' weights); default: on a CPU-type adapter, where
        that is the faster form (codegen/storage.py buffer_code). `subgroups=False` leaves the
        adapter's subgroup operations unused (kernels take their plain paths; for tests).
        `wide_reads`: the buffers kernels read in pairs (the chunked products' weights) come as
        64-bit words (shader-int64); default: on a CPU-type adapter that has it, where that is the
        faster form (codegen/storage.py). `indexed_private`: kernels stage through private arrays
        indexed at run time (codegen/wgsl.py ONYXIA_INDEXED_PRIVATE); default: where the driver
        compiles those fast (stages_privately()). `wide_register_tiles`: the adapter trait the plans'
        register-tiled products prefer 32-row tiles by (default: has_wide_register_tiles());
        `guarded_loads`: the adapter trait of that name (default: has_guarded_loads())."""
        self.adapter = adapter if isinstance(adapter, wgpu.GPUAdapter) else select_adapter(adapter)
        self.info = _info(self.adapter)
        self.packed_f16_reads = (self.info.adapter_type == "CPU") if packed_f16_reads is None else packed_f16_reads
        use_f16 = f16 if f16 is not None else os.environ.get("ONYXIA_F16", "1").strip().lower() not in _OFF
        wide = (self.info.adapter_type == "CPU") if wide_reads is None else wide_reads
        self.features = frozenset(f for f in WANTED_FEATURES if f in self.adapter.features
                                  and (use_f16 or f != "shader-f16") and (subgroups or f != "subgroup")
                                  and (wide or f != "shader-int64"))
        self.wide_reads = "shader-int64" in self.features
        self.indexed_private = stages_privately(self.info) if indexed_private is None else indexed_private
        self.wide_register_tiles = (has_wide_register_tiles(self.info) if wide_register_tiles is None
                                    else wide_register_tiles)
        self.guarded_loads = has_guarded_loads(self.info) if guarded_loads is None else guarded_loads
        limits = dict(self.adapter.limits)
        try:
            self.device = self.adapter.request_device_sync(
                label="onyxia", required_features=sorted(self.features), required_limits=limits)
        except Exception as exc:
            raise DeviceError(f"cannot open a device on {self.info.summary}: {exc}") from exc
        self.limits = dict(self.device.limits)
        # Kernels for CPU-type adapters share loads across a workgroup of 8 with subgroupBroadcast
        # where its subgroup holds all 8 (codegen/wgsl.py ONYXIA_SUBGROUPS_OF_8); the adapter's
        # reported range does not say (lavapipe: 4-128, running 8 on AVX2), so it is measured.
        self.subgroup_size = _subgroup_size(self.device) \
            if "subgroup" in self.features and self.info.adapter_type == "CPU" else 0
        chosen = get_transport(transport) if transport is not None else None
        # Immediates (push constants) are the default where the device has them. Measured with
        # benchmarks/bench_replay.py on lavapipe (medians of 7 runs x 50): the host side of run()
        # ties on a 200-dispatch chain (immediate/uniform 1.03) and favours immediates on a
        # 4-layer GPT-2 block (0.91); update_dimensions is cheaper with immediates (12 vs 50 µs,
        # 30 vs 42 µs: no uniform buffer to re-upload). Encoding alone is dearer with immediates
        # (7.0 vs 5.6 µs per dispatch), the whole run() is not: measure run(), not encode().
        self.transport: Transport = chosen or (IMMEDIATE if IMMEDIATE.available(self.features) else UNIFORM)
        if not self.transport.available(self.features):
            raise DeviceError(f"{self.info.summary} cannot use the '{self.transport}' parameter transport "
                              f"(no push constants); use transport='{UNIFORM}'")

    @property
    def max_immediate_bytes(self) -> int:
        return int(self.limits.get("max-immediate-size", 0)) if "immediates" in self.features else 0

    def load_model(self, model: CompiledModel, *, transport: str | Transport | None = None,
                   tuning: TuneSettings | None = None, progress: Callable[[int, int], None] | None = None,
                   compile_ahead: bool = True):
        """`tuning`: how kernel variants are chosen (runtime/tuner.py; default: the environment's
        ONYXIA_TUNE and ONYXIA_CACHE_DIR). `progress(done, total)`: called as pipelines are built.
        `compile_ahead=False`: no helper devices compile the runs' kernels ahead on a driver that
        compiles at dispatch (runtime/precompile.py) — for a plan an earlier process ran, whose
        kernels the driver's disk cache has (they still compile quick first's choices in the
        background: runtime/ahead.py). The executor's `stats.load` (runtime/replay.py
        LoadTimes) splits the load's time."""
        return PlanExecutor(self, model, transport=get_transport(transport or self.transport), tuning=tuning,
                            progress=progress, compile_ahead=compile_ahead)

    def describe(self) -> str:
        features = ", ".join(sorted(self.features)) or "none"
        return f"{self.info.summary} [{self.transport} immediates; features: {features}]"

    def __repr__(self) -> str:
        return f"Runtime({self.describe()})"
