"""Element types: the ONNX dtype of a tensor and how it is stored on the device.

Device storage is deliberately narrow — every element is one 4-byte word — so that every
buffer size is ``numel * 4`` and every shader indexes plain ``array<f32|i32|u32>``:

- float32 → f32; float16 → f32 (widened at upload, narrowed at download; computed in f32);
- int32 → i32; int64 → i32 (range-checked at upload, widened at download); int8/int16 → i32;
- uint32 → u32; uint64 → u32 (as int64: range-checked at upload, widened at download);
  uint8/uint16 → u32; bool → u32 (0 or 1).

float64 and the rest have no device representation: a tensor of those types may still be
folded on the host, but one that must live on the GPU raises UnsupportedDtypeError.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from onyxia.errors import InputError, UnsupportedDtypeError

ELEMENT_BYTES = 4  # every device element is one 32-bit word


@dataclass(frozen=True)
class DType:
    """An ONNX element type with its numpy type and (if any) its device storage type."""

    name: str  # ONNX spelling: "float32", "int64", "bool", ...
    onnx: int  # TensorProto.DataType value
    numpy: np.dtype
    device: str | None  # WGSL scalar type in storage: "f32" | "i32" | "u32"; None = host only

    def __str__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return np.issubdtype(self.numpy, np.floating)

    @property
    def is_integer(self) -> bool:
        return np.issubdtype(self.numpy, np.integer)

    @property
    def is_bool(self) -> bool:
        return self.numpy == np.bool_

    @property
    def device_numpy(self) -> np.dtype:
        return _DEVICE_NUMPY[self.require_device()]

    def require_device(self, what: str = "tensor") -> str:
        if self.device is None:
            raise UnsupportedDtypeError(
                f"{what} has dtype {self.name}, which has no GPU representation "
                "(supported: float32, float16, int64, int32, int16, int8, uint64, uint32, uint16, uint8, bool)"
            )
        return self.device


_DEVICE_NUMPY = {"f32": np.dtype(np.float32), "i32": np.dtype(np.int32), "u32": np.dtype(np.uint32)}

_TABLE = [
    DType("float32", TensorProto.FLOAT, np.dtype(np.float32), "f32"),
    DType("float16", TensorProto.FLOAT16, np.dtype(np.float16), "f32"),
    DType("float64", TensorProto.DOUBLE, np.dtype(np.float64), None),
    DType("int64", TensorProto.INT64, np.dtype(np.int64), "i32"),
    DType("int32", TensorProto.INT32, np.dtype(np.int32), "i32"),
    DType("int16", TensorProto.INT16, np.dtype(np.int16), "i32"),
    DType("int8", TensorProto.INT8, np.dtype(np.int8), "i32"),
    DType("uint64", TensorProto.UINT64, np.dtype(np.uint64), "u32"),
    DType("uint32", TensorProto.UINT32, np.dtype(np.uint32), "u32"),
    DType("uint16", TensorProto.UINT16, np.dtype(np.uint16), "u32"),
    DType("uint8", TensorProto.UINT8, np.dtype(np.uint8), "u32"),
    DType("bool", TensorProto.BOOL, np.dtype(np.bool_), "u32"),
    DType("string", TensorProto.STRING, np.dtype(object), None),
]
_BY_ONNX = {d.onnx: d for d in _TABLE}
_BY_NAME = {d.name: d for d in _TABLE}
_BY_NUMPY = {d.numpy: d for d in _TABLE if d.name != "string"}

FLOAT32 = _BY_NAME["float32"]
FLOAT16 = _BY_NAME["float16"]
INT64 = _BY_NAME["int64"]
INT32 = _BY_NAME["int32"]
UINT32 = _BY_NAME["uint32"]
UINT8 = _BY_NAME["uint8"]
BOOL = _BY_NAME["bool"]


def from_onnx(elem_type: int) -> DType:
    try:
        return _BY_ONNX[elem_type]
    except KeyError:
        name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else elem_type
        raise UnsupportedDtypeError(f"ONNX element type {name} is not supported") from None


def from_name(name: str) -> DType:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnsupportedDtypeError(f"unknown dtype '{name}'") from None


def from_numpy(dtype: np.dtype | type) -> DType:
    try:
        return _BY_NUMPY[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise UnsupportedDtypeError(f"numpy dtype {dtype} is not supported") from None


_I32 = np.iinfo(np.int32)
_U32 = np.iinfo(np.uint32)


def to_device(array: np.ndarray, dtype: DType, what: str) -> np.ndarray:
    """Convert a host array of `dtype` into its contiguous device representation."""
    device = dtype.require_device(what)
    if dtype.numpy.itemsize > 4 and array.size:  # int64 / uint64 in one 32-bit word
        lo, hi = int(array.min()), int(array.max())
        word = _I32 if device == "i32" else _U32
        if lo < word.min or hi > word.max:
            raise InputError(
                f"{what}: {dtype.name} values must fit in {word.dtype} on the GPU (got range [{lo}, {hi}])"
            )
    return np.ascontiguousarray(array, dtype=_DEVICE_NUMPY[device])


def from_device(raw: np.ndarray, dtype: DType) -> np.ndarray:
    """Convert a device array back into the tensor's ONNX dtype."""
    if dtype.is_bool:
        return raw != 0
    return raw.astype(dtype.numpy, copy=False)
