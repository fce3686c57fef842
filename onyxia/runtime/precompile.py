"""Compile ahead: helper devices compile the next run's kernels on lavapipe's idle cores.

lavapipe compiles a kernel at its first dispatch (Limits.compiles_at_dispatch), on the one
thread that executes its device's queue, so a cold first run waits for its kernels one after
another while the host's other cores idle: unet2d_small's 47 kernels take ~5 s of a 5.4 s first
replay on a 2-core host. Mesa keeps what it compiles in its on-disk shader cache, keyed by the
kernel and not by the device, and any device's first dispatch of that kernel reads it from there.
So a helper — a second device of the same adapter, on a thread — dispatches the kernels the
next run replays, from the last one backwards, while the run compiles them from the first:
the two meet in the middle. The helper's dispatch has an empty grid (the driver compiles the
kernel and runs nothing) and dummy buffers; nothing of it reaches the plan's device.

Measured (Mesa 22.3, 2 cores, fresh caches, tuning off): unet2d_small's first replay 5.2-5.6 ->
3.5 s, efficientnet_b0 4.1 -> 2.7 s; Mesa 25: efficientnet_b0 18.6 -> 10.5 s. With Mesa's disk
cache off (MESA_SHADER_CACHE_DISABLE) the helper only competes for the cores (unet 6.2 s), so
it does not start then.

The helpers also take background work once a run's list is done: the kernel choices a quick
first run stood faster-compiling variants in for (runtime/ahead.py), for a plan from the plan
cache too (whose first run's own kernels the disk cache has, so nothing is handed over for it).

`ONYXIA_PRECOMPILE=0` turns it off, `=N` sets the helper count (default: one per core past the
first, at most 4). The helpers are per process and per adapter (`for_device`), idle on a
condition between hand-offs, and stop at interpreter exit after the kernel in hand.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import wgpu

log = logging.getLogger(__name__)

_MIN_KERNELS = 3  # fewer cold kernels than this: the run compiles them itself
# Background kernels wait this long after being handed over: a process that ends right after its
# first result (a one-shot `onyxia run`) exits without waiting for a helper mid-compile.
BACKGROUND_DELAY_S = 0.5
_MAX_HELPERS = 4
_HISTORY = 4096  # entries of `order` kept (a long-lived process loads many models)
_OFF = ("0", "off", "false", "no", "n", "f")


@dataclass(frozen=True)
class Kernel:
    """What a helper needs to compile a program as the plan's device would: the same WGSL,
    entry point, binding kinds and push-constant size give the driver the same kernel."""

    code: str
    entry_point: str
    read_only: tuple[bool, ...]  # per storage binding, in binding order
    immediate_bytes: int

    @cached_property
    def key(self) -> bytes:
        """A digest of the kernel: what the Precompiler remembers, not the WGSL text."""
        text = f"{self.entry_point}|{self.read_only}|{self.immediate_bytes}|{self.code}"
        return hashlib.blake2b(text.encode(), digest_size=16).digest()


def mesa_disk_cache_enabled(env: dict[str, str] | os._Environ = os.environ) -> bool:
    """Mesa's own rule: MESA_SHADER_CACHE_DISABLE (formerly MESA_GLSL_CACHE_DISABLE) set to
    anything but a false word turns its disk cache off; and its folder (MESA_SHADER_CACHE_DIR,
    else $XDG_CACHE_HOME or ~/.cache) must be one this process can write."""
    for name in ("MESA_SHADER_CACHE_DISABLE", "MESA_GLSL_CACHE_DISABLE"):
        if name in env and env[name].strip().lower() not in _OFF:
            return False
    folder = env.get("MESA_SHADER_CACHE_DIR") or env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    path = os.path.abspath(folder)
    while not os.path.exists(path) and os.path.dirname(path) != path:  # Mesa creates what is missing
        path = os.path.dirname(path)
    return os.access(path, os.W_OK)


def helper_count(env: dict[str, str] | os._Environ = os.environ) -> int:
    """Helpers to start: ONYXIA_PRECOMPILE's number (0: none), else one per core past the first."""
    text = env.get("ONYXIA_PRECOMPILE", "").strip().lower()
    if text in _OFF:
        return 0
    if text.isdigit():
        return min(int(text), _MAX_HELPERS)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores - 1, _MAX_HELPERS))


class Precompiler:
    """Helper devices of one adapter and the kernels they have yet to compile.

    `want(kernels)` hands over the next run's cold kernels in replay order (replacing what was
    waiting); helpers take them from the end. `want(kernels, background=True)` adds kernels no
    run replays yet, which helpers take once that list is empty, however few (the alternatives
    a quick first run stands in for: runtime/ahead.py). `done(kernels)` says the plan's device
    compiled those (a run dispatched them): they leave the lists. `compiled` holds the keys
    (Kernel.key) of what the helpers compiled, `failed` of the kernels a helper could not build
    (the run builds and reports them); `settled(kernels)`: each is one or the other, or ran.
    """

    def __init__(self, adapter: wgpu.GPUAdapter, features: Sequence[str], limits: dict[str, Any], helpers: int):
        self._adapter, self._features, self._limits = adapter, sorted(features), limits
        self._helpers = helpers
        self._threads: list[threading.Thread] = []
        self._cond = threading.Condition()
        self._waiting: list[Kernel] = []
        self._later: list[Kernel] = []  # background kernels: taken once `_waiting` is empty
        self._later_from = 0.0  # ... and not before this time.monotonic()
        self._busy: set[Kernel] = set()
        self._stop = False
        self.compiled: set[bytes] = set()
        self.failed: set[bytes] = set()
        self._known: set[bytes] = set()  # compiled by anyone (the plan's device or a helper)
        self.order: list[bytes] = []  # the helpers' latest compiles in order (tests read it)

    def want(self, kernels: Sequence[Kernel], background: bool = False) -> None:
        with self._cond:
            fresh = [k for k in dict.fromkeys(kernels) if k.key not in self._known and k not in self._busy]
            if background:
                if fresh and not self._later:
                    self._later_from = time.monotonic() + BACKGROUND_DELAY_S
                self._later = list(dict.fromkeys([*self._later, *fresh]))
                if not self._later:
                    return
            else:
                self._waiting = fresh
                if len(self._waiting) < _MIN_KERNELS:
                    self._waiting = []
                    return
            while len(self._threads) < self._helpers:
                thread = threading.Thread(target=self._work, name=f"onyxia-precompile-{len(self._threads)}",
                                          daemon=True)
                self._threads.append(thread)
                thread.start()
            self._cond.notify_all()

    def done(self, kernels: Sequence[Kernel]) -> None:
        with self._cond:
            self._known.update(k.key for k in kernels)
            if self._waiting:
                self._waiting = [k for k in self._waiting if k.key not in self._known]
            if self._later:
                self._later = [k for k in self._later if k.key not in self._known]

    def settled(self, kernels: Sequence[Kernel]) -> bool:
        """Whether every one of `kernels` is compiled (by a helper or a run) or failed in a helper."""
        with self._cond:
            return all(k.key in self._known for k in kernels)

    def idle(self, timeout: float) -> bool:
        """Wait until no kernel waits or is being compiled (tests); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._waiting or self._later or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self) -> None:
        """Stop the helpers after the kernel each has in hand (at interpreter exit)."""
        with self._cond:
            self._stop = True
            self._waiting = []
            self._later = []
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=30)

    def _work(self) -> None:
        try:
            device = self._adapter.request_device_sync(label="onyxia-precompile", required_features=self._features,
                                                       required_limits=self._limits)
        except Exception as exc:  # noqa: BLE001 - only a speed-up: the runs compile for themselves
            log.debug("no helper device: %s", exc)
            return
        buffers: list[Any] = []
        while True:
            with self._cond:
                while not self._stop and not self._waiting:
                    wait = self._later_from - time.monotonic() if self._later else None
                    if wait is not None and wait <= 0:
                        break
                    self._cond.wait(wait)
                if self._stop:
                    return
                kernel = self._waiting.pop() if self._waiting else self._later.pop(0)
                self._busy.add(kernel)
            try:
                while len(buffers) < len(kernel.read_only):  # empty grids read nothing: any size binds
                    buffers.append(device.create_buffer(size=256, usage=wgpu.BufferUsage.STORAGE
                                                        | wgpu.BufferUsage.COPY_SRC))
                _dispatch_empty(device, kernel, buffers)
                ok = True
            except Exception as exc:  # noqa: BLE001 - the run builds it and reports what is wrong
                log.debug("helper could not compile a kernel: %s", exc)
                ok = False
            with self._cond:
                self._busy.discard(kernel)
                (self.compiled if ok else self.failed).add(kernel.key)
                self._known.add(kernel.key)
                self.order.append(kernel.key)
                if len(self.order) > _HISTORY:
                    del self.order[:-_HISTORY]
                self._cond.notify_all()


def _dispatch_empty(device: Any, kernel: Kernel, buffers: list[Any]) -> None:
    """Build `kernel` on `device` and dispatch it with an empty grid; return once the driver
    finished (compiled it)."""
    layout = device.create_bind_group_layout(entries=[
        {"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
         "buffer": {"type": wgpu.BufferBindingType.read_only_storage if ro else wgpu.BufferBindingType.storage}}
        for i, ro in enumerate(kernel.read_only)])
    pipeline = device.create_compute_pipeline(
        layout=device.create_pipeline_layout(bind_group_layouts=[layout], immediate_size=kernel.immediate_bytes),
        compute={"module": device.create_shader_module(code=kernel.code), "entry_point": kernel.entry_point})
    group = device.create_bind_group(layout=layout, entries=[
        {"binding": i, "resource": {"buffer": buffers[i]}} for i in range(len(kernel.read_only))])
    encoder = device.create_command_encoder()
    cpass = encoder.begin_compute_pass()
    cpass.set_pipeline(pipeline)
    cpass.set_bind_group(0, group)
    if kernel.immediate_bytes:
        cpass.set_immediates(0, bytes(kernel.immediate_bytes), 0, kernel.immediate_bytes)
    cpass.dispatch_workgroups(0, 0, 0)
    cpass.end()
    device.queue.submit([encoder.finish()])
    device.queue.read_buffer(buffers[0] if buffers else device.create_buffer(
        size=4, usage=wgpu.BufferUsage.COPY_SRC), 0, 4)  # waits for the queue: the compile done


_BY_ADAPTER: dict[tuple[str, str, frozenset[str]], Precompiler] = {}
_LOCK = threading.Lock()


def for_device(adapter: wgpu.GPUAdapter, device: wgpu.GPUDevice, compiles_at_dispatch: bool) -> Precompiler | None:
    """The process's Precompiler for `device`'s adapter, or None where it would not help: an
    adapter that compiles when the pipeline is built, Mesa's disk cache off, or ONYXIA_PRECOMPILE=0."""
    if not compiles_at_dispatch or not mesa_disk_cache_enabled():
        return None
    helpers = helper_count()
    if not helpers:
        return None
    # One per physical adapter and feature set, whichever GPUAdapter object asks (each Runtime
    # enumerates its own): its helpers' compiles serve every device of that driver alike.
    key = (adapter.summary, str(adapter.info.get("description", "")), frozenset(device.features))
    with _LOCK:
        if key not in _BY_ADAPTER:
            _BY_ADAPTER[key] = Precompiler(adapter, device.features, dict(adapter.limits), helpers)
            atexit.register(_BY_ADAPTER[key].close)
        return _BY_ADAPTER[key]
