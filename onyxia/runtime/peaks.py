"""The adapter's measured memory bandwidth and arithmetic peak: the roof of `onyxia bench --profile`.

Measured once per adapter with a vec4 copy (bytes read + written per second) and independent
FMA chains (flops per second: the faster of two forms of the loop, see _fma), and cached on disk
in `adapter-peaks-3.json` under the user's cache folder (ONYXIA_CACHE_DIR, else
$XDG_CACHE_HOME/onyxia, else ~/.cache/onyxia), keyed by adapter vendor, device, driver and
backend. Each kernel runs several times; the fastest submission counts (the others met a busy
machine). Timed on the host around a submission and a 16-byte readback, so the figures include
one submission's latency: the kernels are sized to make that small.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

import numpy as np
import wgpu

from onyxia.runtime.tuner import default_cache_dir

# -2: the FMA kernel measured a quarter of the peak before; -3: half of it on Mesa 25 (see _fma)
CACHE_FILE = "adapter-peaks-3.json"
COPY_BYTES = 32 << 20  # per buffer: well past the caches of GPUs and CPUs
COPY_PER_THREAD = 4  # vec4s each invocation copies
FMA_THREADS = 64 * 1024
FMA_ITERATIONS = 512  # loop trips per invocation: far under lavapipe's ~65,535 bound
FMA_CHAINS = 16  # independent vec4 accumulators per invocation
REPEATS = 5

_COPY = f"""
@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let stride = nwg.x * 256u;
    for (var k = 0u; k < {COPY_PER_THREAD}u; k++) {{
        let i = gid.x + k * stride;
        dst[i] = src[i];
    }}
}}
"""

# Named accumulators, not an array indexed in a loop: lavapipe kept such an array in memory and
# the kernel read 40-51 GF/s on this 2-core host where named ones read 73-82 (the array form, at
# a busy moment, is where the 18.2 GF/s roof that stop 33's conv fractions used came from).
# The loop's trip count a constant (`kept` False) or hidden from the compiler behind
# num_workgroups (shaders/common/grid.wgsl kept_bound): Mesa 25's lavapipe ran the constant-trip
# loop at half speed (30 vs 64 GF/s on a 2-core EPYC), Mesa 22.3 the hidden one a little slower
# (55 vs 59); measure() keeps the faster.
def _fma(kept: bool) -> str:
    bound = f"select({FMA_ITERATIONS}u, 0u, nwg.z == 0u)" if kept else f"{FMA_ITERATIONS}u"
    return f"""
@group(0) @binding(0) var<storage, read_write> out: array<vec4<f32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let seed = f32(gid.x) * 1e-7;
{"".join(f"    var a{c} = vec4<f32>(seed + {c}.0);{chr(10)}" for c in range(FMA_CHAINS))}\
    let m = vec4<f32>(0.9999);
    let a = vec4<f32>(1e-4);
    for (var k = 0u; k < {bound}; k++) {{
{"".join(f"        a{c} = fma(a{c}, m, a);{chr(10)}" for c in range(FMA_CHAINS))}\
    }}
    out[gid.x] = {" + ".join(f"a{c}" for c in range(FMA_CHAINS))};
}}
"""


@dataclass(frozen=True)
class AdapterPeaks:
    bandwidth: float  # bytes per second a copy kernel moves (read + written)
    flops: float  # f32 flops per second of FMA chains (an FMA is 2 flops)
    key: str  # the adapter this was measured on

    @property
    def ridge(self) -> float:
        """Flops per byte where a kernel stops being bound by memory."""
        return self.flops / max(self.bandwidth, 1.0)


def _timed(device: wgpu.GPUDevice, pipeline, bind_group, groups: int, written) -> float:
    """Seconds of the fastest of REPEATS submissions of one dispatch (after a warm-up)."""
    best = float("inf")
    for i in range(REPEATS + 1):
        encoder = device.create_command_encoder()
        cpass = encoder.begin_compute_pass()
        cpass.set_pipeline(pipeline)
        cpass.set_bind_group(0, bind_group)
        cpass.dispatch_workgroups(groups, 1, 1)
        cpass.end()
        start = time.perf_counter()
        device.queue.submit([encoder.finish()])
        # Reading 16 bytes of the written buffer waits for the kernel (wgpu-py's
        # on_submitted_work_done_sync fails on some wgpu-native builds).
        device.queue.read_buffer(written, 0, 16)
        if i:
            best = min(best, time.perf_counter() - start)
    return best


def _pipeline(device: wgpu.GPUDevice, code: str):
    module = device.create_shader_module(code=code)
    return device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})


def measure(device: wgpu.GPUDevice, key: str, max_binding: int | None = None) -> AdapterPeaks:
    """Run the copy and FMA kernels on `device`."""
    size = COPY_BYTES if max_binding is None else min(COPY_BYTES, max_binding)
    groups = size // (16 * 256 * COPY_PER_THREAD)
    size = groups * 16 * 256 * COPY_PER_THREAD
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST
    src = device.create_buffer(size=size, usage=usage)
    dst = device.create_buffer(size=size, usage=usage | wgpu.BufferUsage.COPY_SRC)
    device.queue.write_buffer(src, 0, np.ones(size // 4, np.float32))
    copy = _pipeline(device, _COPY)
    bind = device.create_bind_group(layout=copy.get_bind_group_layout(0), entries=[
        {"binding": 0, "resource": {"buffer": src}}, {"binding": 1, "resource": {"buffer": dst}}])
    bandwidth = 2 * size / _timed(device, copy, bind, groups, dst)
    out = device.create_buffer(size=16 * FMA_THREADS, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    flops = 0.0
    for kept in (False, True):
        fma = _pipeline(device, _fma(kept))
        bind = device.create_bind_group(layout=fma.get_bind_group_layout(0),
                                        entries=[{"binding": 0, "resource": {"buffer": out}}])
        seconds = _timed(device, fma, bind, FMA_THREADS // 256, out)
        flops = max(flops, FMA_THREADS * FMA_ITERATIONS * FMA_CHAINS * 4 * 2 / seconds)
    for buf in (src, dst, out):
        buf.destroy()
    return AdapterPeaks(bandwidth, flops, key)


def adapter_peaks(runtime, *, refresh: bool = False) -> AdapterPeaks:
    """The peaks of `runtime`'s adapter: from the cache, or measured now and cached."""
    key = runtime.info.identity  # the adapter whose timings the tuning cache holds, too
    path = default_cache_dir() / CACHE_FILE
    try:
        table = json.loads(path.read_text())
        if not isinstance(table, dict):
            table = {}
    except (OSError, ValueError):
        table = {}
    entry = table.get(key)
    if not refresh and isinstance(entry, dict):
        try:
            return AdapterPeaks(float(entry["bandwidth"]), float(entry["flops"]), key)
        except (KeyError, TypeError, ValueError):
            pass  # a damaged entry: measure again
    peaks = measure(runtime.device, key, int(runtime.limits.get("max-storage-buffer-binding-size", COPY_BYTES)))
    table[key] = {k: v for k, v in asdict(peaks).items() if k != "key"}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache folder: measured again next time
    return peaks
