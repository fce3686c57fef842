"""DeviceTensor: a tensor that lives in a GPU buffer (e.g. a KV cache between runs)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from onyxia.ir import dtypes
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
