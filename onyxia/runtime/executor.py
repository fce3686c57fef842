"""PlanExecutor: replays a CompiledModel on a wgpu device.

The replay itself (commands, binding evaluation, capacities, recompile and reallocation
decisions, feed checking) is backend-neutral: runtime/replay.py. This class runs it on the
wgpu backend of a `Runtime` (runtime/wgpu_backend.py). Setup happens once: buffers (weights
uploaded), bind groups, and the shader modules and pipelines of what a run replays (a Select's
other alternatives get theirs when first chosen); `stats.load` says where the load time went.
`run` writes the feeds, encodes every step into one command encoder (one compute pass between
copies), submits once and reads back only the requested outputs. `update_dimensions` patches
immediates, workgroup counts and copy sizes in place; it recompiles only shaders baked with a
changed static dim and reallocates only buffers whose capacity is exceeded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import wgpu

from onyxia.codegen.transport import IMMEDIATE, Transport
from onyxia.plan import CompiledModel
from onyxia.runtime.replay import ExecutorStats, PlanReplay
from onyxia.runtime.tuner import TuneSettings
from onyxia.runtime.wgpu_backend import WgpuBackend


class PlanExecutor(PlanReplay):
    backend: WgpuBackend

    def __init__(self, runtime: Any, model: CompiledModel, *, transport: str | Transport = IMMEDIATE,
                 tuning: TuneSettings | None = None, progress: Callable[[int, int], None] | None = None,
                 compile_ahead: bool = True):
        self.runtime = runtime
        self.device: wgpu.GPUDevice = runtime.device
        super().__init__(model, WgpuBackend(runtime, compile_ahead=compile_ahead), transport=transport, tuning=tuning,
                         progress=progress)


__all__ = ["ExecutorStats", "PlanExecutor"]
