"""Per-dispatch GPU time from timestamp queries (`onyxia bench --profile`).

Each dispatch gets its own compute pass with begin/end timestamp writes: slower than a normal
run (passes are not shared), but the per-dispatch times are what the GPU spent.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import wgpu

from onyxia.errors import DeviceError
from onyxia.plan import walk_steps


@dataclass(frozen=True)
class DispatchTiming:
    op: str  # node name
    op_type: str
    shader: str  # shader label
    nanoseconds: float


def time_dispatches(exe, feeds: Mapping[str, Any]) -> list[DispatchTiming]:
    if "timestamp-query" not in exe.runtime.features:
        raise DeviceError(f"{exe.runtime.info.summary} has no timestamp queries; --profile needs them")
    exe.run(feeds)  # writes the inputs and warms up
    device = exe.device
    # Nested steps (a loop body, a branch's arms) are timed once each, in walk_steps order; of a
    # Tunable's alternatives only the one it replays now.
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
    return [DispatchTiming(owner[id(cmd.step)].name, owner[id(cmd.step)].op_type, exe.model.shaders[cmd.shader].label,
                           stamps[2 * i + 1] - stamps[2 * i]) for i, cmd in enumerate(cmds)]


def profile_dispatches(exe, feeds: Mapping[str, Any], top: int = 10) -> list[str]:
    """Readable lines: GPU time per op type, then the slowest dispatches."""
    timings = time_dispatches(exe, feeds)
    total = sum(t.nanoseconds for t in timings) or 1.0
    by_type: dict[str, list[float]] = collections.defaultdict(list)
    for t in timings:
        by_type[t.op_type].append(t.nanoseconds)
    lines = [f"GPU time {total / 1e3:.1f} µs over {len(timings)} dispatches"]
    for op_type, ns in sorted(by_type.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"{op_type:<28} {len(ns):4d} dispatches {sum(ns) / 1e3:10.1f} µs {100 * sum(ns) / total:5.1f}%")
    lines.append(f"slowest {min(top, len(timings))} dispatches:")
    for t in sorted(timings, key=lambda t: -t.nanoseconds)[:top]:
        lines.append(f"  {t.nanoseconds / 1e3:9.1f} µs  {t.op} ({t.op_type}, shader {t.shader})")
    return lines
