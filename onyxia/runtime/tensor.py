"""DeviceTensor: a tensor that lives in a GPU buffer (e.g. a KV cache between runs)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from onyxia.errors import InputError
from onyxia.ir import dtypes
from onyxia.ir.shapes import SymDim
from onyxia.runtime.commands import value

if TYPE_CHECKING:  # the replay core and the null backend run without wgpu
    import wgpu


@dataclass(frozen=True)
class DeviceTensor:
    buffer: Any  # the backend's buffer (a wgpu.GPUBuffer on a GPU)
    shape: tuple[int, ...]
    dtype: str  # ONNX dtype name

    @property
    def count(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return int(dtypes.from_name(self.dtype).nbytes(self.count))

    def numpy(self, device: wgpu.GPUDevice) -> np.ndarray:
        """Read back (costs a GPU drain; meant for debugging and tests)."""
        dtype = dtypes.from_name(self.dtype)
        if not self.nbytes:
            return np.zeros(self.shape, dtype.numpy)
        raw = device.queue.read_buffer(self.buffer, 0, self.nbytes)
        return dtypes.from_device(raw, dtype, self.count).reshape(self.shape)


@dataclass(eq=False)
class TensorSlot:
    """A tensor the caller sees (feed, output, device tensor): shape and bytes for the dims."""

    name: str
    root: str
    dtype: dtypes.DType
    exprs: tuple[Any, ...]  # the shape as the plan has it
    symbols: frozenset[str]
    shape: tuple[int, ...] = ()
    nbytes: int = 0

    def refresh(self, dims: Mapping[str, int]) -> None:
        self.shape = tuple(int(value(d, dims)) for d in self.exprs)
        self.nbytes = int(self.dtype.nbytes(math.prod(self.shape)))

    def check_feed(self, feed: Any) -> np.ndarray | DeviceTensor:
        """`feed` as this input takes it (an array or a DeviceTensor), or an InputError."""
        name, expected, dtype = self.name, self.shape, self.dtype
        # The common case first: an array of exactly the shape and dtype this slot takes now
        # (what a call in a loop feeds); anything else goes through the checks below.
        if type(feed) is np.ndarray and feed.shape == expected and feed.dtype == dtype.numpy:
            return feed
        if isinstance(feed, DeviceTensor):
            if feed.dtype != dtype.name or feed.shape != expected:
                raise InputError(f"input '{name}': device tensor is {feed.dtype}{list(feed.shape)}, "
                                 f"expected {dtype.name}{list(expected)}")
            return feed
        array = np.asarray(feed)
        if array.dtype != dtype.numpy:
            raise InputError(f"input '{name}' has dtype {array.dtype}, expected {dtype.name}")
        if array.ndim != len(expected):
            raise InputError(f"input '{name}' has rank {array.ndim}, expected {len(expected)} "
                             f"(shape {[str(d) for d in self.exprs]})")
        for axis, (got, want, sym) in enumerate(zip(array.shape, expected, self.exprs)):
            if got != want:
                hint = f" ({sym} = {want}; call update_dimensions to change it)" if isinstance(sym, SymDim) else ""
                raise InputError(f"input '{name}' dim {axis} is {got}, expected {want}{hint}")
        return array
