"""Staging buffers and their mapping: how WgpuBackend reads device buffers back.

A read is a copy into a MAP_READ staging buffer, encoded into the run's own command encoder
(no submission of its own), then a map of the staging buffer once the submission is done.
Staging buffers are kept per output (grown past their capacity only) and reused run after run.

The map goes through wgpu-native's own calls where wgpu-py has them (`_RAW_MAP`), waiting for
it with a blocking device poll in the calling thread. wgpu-py's `map_sync` costs ~90 µs a
buffer on lavapipe against ~6 µs for this (measured: a 16-byte output, 300 runs): it submits an
empty command buffer before every read map (a workaround for data written through a mapping at
creation, which staging buffers never are), then wakes its poll thread and waits for that
thread to signal back, two thread switches on a busy machine. A read that fails (device lost)
raises DeviceError either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import wgpu

from onyxia.errors import DeviceError

_PENDING = -1
_POLLS = 1000  # blocking polls before a map that never completes counts as a lost device


def _raw_map_calls() -> Any:
    """(ffi, lib, the map callback) of wgpu-py 0.32's wgpu-native bindings, or None."""
    try:
        from wgpu.backends.wgpu_native._ffi import ffi, lib
        for name in ("wgpuBufferMapAsync", "wgpuDevicePoll", "wgpuBufferGetConstMappedRange", "wgpuBufferUnmap",
                     "WGPUMapAsyncStatus_Success", "WGPUCallbackMode_AllowProcessEvents", "WGPUMapMode_Read"):
            getattr(lib, name)
    except (ImportError, AttributeError):
        return None

    # One callback for every map: userdata1 points at the int the status goes to.
    @ffi.callback("void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)")
    def on_mapped(status: int, message: Any, status_slot: Any, _: Any) -> None:
        ffi.cast("int *", status_slot)[0] = status

    return ffi, lib, on_mapped


_RAW_MAP = _raw_map_calls()


class StagingReads:
    """Staging buffers by name and the map that reads them after a submission."""

    def __init__(self, device: wgpu.GPUDevice) -> None:
        self.device = device
        self._staging: dict[str, wgpu.GPUBuffer] = {}
        self._status: Any = None  # the raw map's status slots (a cffi int array)

    def staging(self, name: str, nbytes: int, capacity: int) -> wgpu.GPUBuffer:
        """The staging buffer of `name` (at least `nbytes`; a new one is `capacity` bytes)."""
        buf = self._staging.get(name)
        if buf is None or buf.size < nbytes:
            if buf is not None:
                buf.destroy()
            buf = self.device.create_buffer(label=f"{name}/readback", size=max(capacity, nbytes),
                                            usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
            self._staging[name] = buf
        return buf

    def release(self, name: str) -> None:
        """Drop the staging buffer of `name` (one-off reads of large buffers do not keep theirs)."""
        buf = self._staging.pop(name, None)
        if buf is not None:
            buf.destroy()

    def read(self, reads: Sequence[tuple[wgpu.GPUBuffer, int]]) -> list[bytes | memoryview]:
        """The first `nbytes` of each staging buffer, once the work submitted so far is done
        (the copies into them were submitted before)."""
        if _RAW_MAP is None:
            out: list[bytes | memoryview] = []
            for buf, nbytes in reads:
                buf.map_sync(wgpu.MapMode.READ, 0, nbytes)
                out.append(buf.read_mapped(0, nbytes, copy=True))
                buf.unmap()
            return out
        ffi, lib, on_mapped = _RAW_MAP
        if self._status is None or len(self._status) < len(reads):
            self._status = ffi.new("int[]", max(len(reads), 4))
        status = self._status
        info = ffi.new("WGPUBufferMapCallbackInfo *")
        info.mode = lib.WGPUCallbackMode_AllowProcessEvents
        info.callback = on_mapped
        for i, (buf, nbytes) in enumerate(reads):
            status[i] = _PENDING
            info.userdata1 = status + i
            lib.wgpuBufferMapAsync(buf._internal, lib.WGPUMapMode_Read, 0, nbytes, info[0])
        device = self.device._internal
        for _ in range(_POLLS):
            if all(status[i] != _PENDING for i in range(len(reads))):
                break
            lib.wgpuDevicePoll(device, True, ffi.NULL)  # blocks until the queue's work is done
        out = []
        failed = [i for i in range(len(reads)) if status[i] != lib.WGPUMapAsyncStatus_Success]
        for i, (buf, nbytes) in enumerate(reads):
            if status[i] == lib.WGPUMapAsyncStatus_Success:
                out.append(bytes(ffi.buffer(lib.wgpuBufferGetConstMappedRange(buf._internal, 0, nbytes), nbytes)))
                lib.wgpuBufferUnmap(buf._internal)
        if failed:
            states = sorted({int(status[i]) for i in failed})
            raise DeviceError(f"reading {len(failed)} buffer(s) back failed (map status {states}; device lost?)")
        return out
