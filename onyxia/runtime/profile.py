"""Per-dispatch GPU time from timestamp queries, against the roofline (`onyxia bench --profile`).

Each dispatch gets its own compute pass with begin/end timestamp writes: slower than a normal
run (passes are not shared), but the per-dispatch times are what the GPU spent. Each time is
set against the dispatch's bytes and flops (onyxia/plan/cost.py) and the adapter's measured
bandwidth and peak (runtime/peaks.py): the roofline fraction is the larger of achieved/bandwidth
and achieved/peak, i.e. how close the dispatch runs to the roof that bounds it. `write_trace`
saves the same as Chrome trace events (ui.perfetto.dev, chrome://tracing).
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import wgpu

from onyxia.errors import DeviceError
from onyxia.plan import walk_steps
from onyxia.plan.cost import DispatchCost, fmt_bytes, plan_cost
from onyxia.runtime.peaks import AdapterPeaks, adapter_peaks


@dataclass(frozen=True)
class DispatchTiming:
    op: str  # node name
    op_type: str
    shader: str  # shader label
    nanoseconds: float
    start: float = 0.0  # ns since the first dispatch began


@dataclass(frozen=True)
class DispatchProfile:
    timing: DispatchTiming
    cost: DispatchCost

    @property
    def seconds(self) -> float:
        return max(self.timing.nanoseconds, 1.0) * 1e-9

    @property
    def bandwidth(self) -> float:
        return self.cost.bytes / self.seconds

    @property
    def flop_rate(self) -> float:
        return self.cost.flops / self.seconds

    def fraction(self, peaks: AdapterPeaks) -> float:
        """Of the roof that bounds this dispatch: memory or arithmetic, whichever it is nearer."""
        return max(self.bandwidth / peaks.bandwidth, self.flop_rate / peaks.flops)


def time_dispatches(exe, feeds: Mapping[str, Any]) -> list[DispatchTiming]:
    if "timestamp-query" not in exe.runtime.features:
        raise DeviceError(f"{exe.runtime.info.summary} has no timestamp queries; --profile needs them")
    exe.run(feeds)  # writes the inputs and warms up
    device = exe.device
    # Nested steps (a loop body, a branch's arms) are timed once each, in walk_steps order; of a
    # Select's alternatives only the one it replays now.
    owner = {id(s): op for op in exe.model.operations for s in walk_steps(op.steps)}
    cmds = exe.dispatch_commands()
    count = 2 * len(cmds)
    if not count:
        return []
    queries = device.create_query_set(type=wgpu.QueryType.timestamp, count=count)
    resolved = device.create_buffer(size=8 * count, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
    encoder = device.create_command_encoder()
    for i, cmd in enumerate(cmds):
        cpass = encoder.begin_compute_pass(timestamp_writes={
            "query_set": queries, "beginning_of_pass_write_index": 2 * i, "end_of_pass_write_index": 2 * i + 1})
        exe.backend.encode_dispatch(cpass, cmd)
        cpass.end()
    encoder.resolve_query_set(queries, 0, count, resolved, 0)
    device.queue.submit([encoder.finish()])
    stamps = np.frombuffer(device.queue.read_buffer(resolved), dtype=np.uint64).astype(np.float64)
    origin = stamps[0]
    return [DispatchTiming(owner[id(cmd.step)].name, owner[id(cmd.step)].op_type, exe.model.shaders[cmd.shader].label,
                           stamps[2 * i + 1] - stamps[2 * i], stamps[2 * i] - origin) for i, cmd in enumerate(cmds)]


def profile(exe, feeds: Mapping[str, Any], repeats: int = 1) -> list[DispatchProfile]:
    """Every dispatch that runs at the executor's dims (empty grids aside), timed and costed;
    with `repeats`, each dispatch's median over that many timed passes (a shared or throttled
    machine moves single samples by tens of percent; start offsets: the first pass's)."""
    passes = [time_dispatches(exe, feeds) for _ in range(max(repeats, 1))]
    timings = [replace(first, nanoseconds=float(np.median([p[i].nanoseconds for p in passes])))
               for i, first in enumerate(passes[0])]
    costs = plan_cost(exe.model, exe.dims, exe.select_choices(), adapter=exe.adapter_facts).dispatches
    assert len(costs) == len(timings), (len(costs), len(timings))
    return [DispatchProfile(t, c) for t, c in zip(timings, costs) if c.live]


def _rates(nbytes: int, flops: int, seconds: float, peaks: AdapterPeaks) -> str:
    gbs, gfs = nbytes / seconds / 1e9, flops / seconds / 1e9
    roof = max(nbytes / seconds / peaks.bandwidth, flops / seconds / peaks.flops)
    return (f"{fmt_bytes(nbytes):>10} {flops / 1e6:9.3f} Mflop {gbs:8.3f} GB/s {gfs:8.3f} GF/s "
            f"{100 * nbytes / seconds / peaks.bandwidth:6.1f}% BW {100 * flops / seconds / peaks.flops:6.1f}% peak "
            f"roof {100 * roof:5.1f}%")


def profile_lines(profiles: list[DispatchProfile], peaks: AdapterPeaks, top: int = 10) -> list[str]:
    """Readable lines: the roof, every dispatch, GPU time per op type, the slowest dispatches."""
    total_ns = sum(p.timing.nanoseconds for p in profiles) or 1.0
    total_bytes = sum(p.cost.bytes for p in profiles)
    total_flops = sum(p.cost.flops for p in profiles)
    lines = [f"adapter roof: {peaks.bandwidth / 1e9:.3f} GB/s copy bandwidth, {peaks.flops / 1e9:.3f} GF/s FMA peak "
             f"(measured, cached; ridge {peaks.ridge:.2f} flop/B)",
             f"GPU time {total_ns / 1e3:.1f} µs over {len(profiles)} dispatches: "
             + _rates(total_bytes, total_flops, total_ns * 1e-9, peaks),
             "per dispatch (µs, bytes, flops, achieved rates, fraction of bandwidth / peak / roof):"]
    for p in profiles:
        lines.append(f"  {p.timing.nanoseconds / 1e3:9.1f} µs " + _rates(p.cost.bytes, p.cost.flops, p.seconds, peaks)
                     + f"  {p.timing.op} ({p.timing.op_type}, {p.timing.shader})")
    by_type: dict[str, list[float]] = collections.defaultdict(list)
    for p in profiles:
        by_type[p.timing.op_type].append(p.timing.nanoseconds)
    lines.append("per op type:")
    for op_type, ns in sorted(by_type.items(), key=lambda kv: -sum(kv[1])):
        share = 100 * sum(ns) / total_ns
        lines.append(f"  {op_type:<28} {len(ns):4d} dispatches {sum(ns) / 1e3:10.1f} µs {share:5.1f}%")
    lines.append(f"slowest {min(top, len(profiles))} dispatches:")
    for p in sorted(profiles, key=lambda p: -p.timing.nanoseconds)[:top]:
        lines.append(f"  {p.timing.nanoseconds / 1e3:9.1f} µs  roof {100 * p.fraction(peaks):5.1f}%  "
                     f"{p.timing.op} ({p.timing.op_type}, shader {p.timing.shader})")
    return lines


def trace_events(profiles: list[DispatchProfile], peaks: AdapterPeaks, device: str = "") -> dict:
    """A Chrome trace (JSON object format): one complete ("X") slice per dispatch, in µs."""
    events: list[dict] = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 1,
                           "args": {"name": f"onyxia {device}".strip()}},
                          {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "dispatches"}}]
    for p in profiles:
        events.append({
            "name": f"{p.timing.op} [{p.timing.shader}]", "cat": p.timing.op_type, "ph": "X",
            "ts": p.timing.start / 1e3, "dur": p.timing.nanoseconds / 1e3, "pid": 1, "tid": 1,
            "args": {"node": p.timing.op, "op_type": p.timing.op_type, "shader": p.timing.shader,
                     "bytes": p.cost.bytes, "flops": p.cost.flops,
                     "GB/s": round(p.bandwidth / 1e9, 4), "GF/s": round(p.flop_rate / 1e9, 4),
                     "bandwidth_fraction": round(p.bandwidth / peaks.bandwidth, 4),
                     "peak_fraction": round(p.flop_rate / peaks.flops, 4),
                     "roofline_fraction": round(p.fraction(peaks), 4)},
        })
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"bandwidth_bytes_per_s": peaks.bandwidth, "peak_flops_per_s": peaks.flops,
                          "adapter": peaks.key}}


def write_trace(path: str | Path, profiles: list[DispatchProfile], peaks: AdapterPeaks, device: str = "") -> None:
    Path(path).write_text(json.dumps(trace_events(profiles, peaks, device)))


def profile_dispatches(exe, feeds: Mapping[str, Any], top: int = 10) -> list[str]:
    """Readable lines for `exe`'s run on `feeds` (measures the adapter's roof at first use)."""
    return profile_lines(profile(exe, feeds), adapter_peaks(exe.runtime), top)
