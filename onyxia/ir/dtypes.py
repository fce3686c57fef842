"""Element types: the ONNX dtype of a tensor, how it is stored on the device, how kernels compute it.

Each device dtype has a *storage* codec (the bytes in its buffer) and a *compute* type (the WGSL
scalar kernels compute in, through the accessors codegen/storage.py generates):

| storage         | bits | dtypes                                    | compute |
|-----------------|------|-------------------------------------------|---------|
| f32 / i32 / u32 | 32   | float32; int32, int64; uint32, uint64     | same    |
| f16             | 16   | float16 (native `f16` with shader-f16)    | f32     |
| bf16            | 16   | bfloat16                                  | f32     |
| s16 / u16       | 16   | int16 / uint16                            | i32/u32 |
| s8 / u8 / bool  | 8    | int8 / uint8 / bool                       | i32/u32 |
| e4m3fn ... e8m0 | 8    | the float8 types                          | f32     |
| s4 / u4 / e2m1  | 4    | int4 / uint4 / float4e2m1                 | i32/u32/f32 |
| s2 / u2         | 2    | int2 / uint2                              | i32/u32 |

Everything below 32 bits is packed little-endian into u32 words, so a tensor's device bytes are
exactly its ONNX raw bytes (2 and 4-bit values low bits first), padded to a whole word: uploads
and readbacks are byte copies. int64 and uint64 are the exception: they are stored as i32 / u32
(range-checked at upload, widened at download). int64 holds ±(2^31 - 1) exactly and -2^31
marks a value lost to that range (a Cast of NaN/±inf/|x| >= 2^31, a sum past it): kernels carry
the mark instead of wrapping, and a run refuses it where it reaches an output, an index or a read
(codegen/storage.py's CHECKED_I32 says which). float64 and strings have no
device representation: a tensor of those types may still be folded on the host, but one that
must live on the GPU raises UnsupportedDtypeError.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from onnx import TensorProto

from onyxia.errors import InputError, UnsupportedDtypeError

WORD_BYTES = 4  # WebGPU buffers, copies and bindings are sized in whole 4-byte words
WORD_STORAGE = frozenset({"f32", "i32", "u32"})  # one element per word, stored as its compute type
_COMPUTE = {"float": "f32", "int": "i32", "uint": "u32", "bool": "u32"}


@dataclass(frozen=True)
class DType:
    """An ONNX element type: its numpy type, storage codec on the device and compute type."""

    name: str  # ONNX spelling: "float32", "int64", "bool", ...
    onnx: int  # TensorProto.DataType value
    numpy: np.dtype
    kind: str  # "float" | "int" | "uint" | "bool" | "string"
    storage: str | None = None  # device storage codec (table above); None = host only
    bits: int = 0  # bits per element in device storage

    def __str__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        return self.kind == "int"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def on_device(self) -> bool:
        return self.storage is not None

    @property
    def compute(self) -> str:
        """The WGSL scalar type kernels compute this dtype in: f32, i32 or u32."""
        self.require_device()
        return _COMPUTE[self.kind]

    @property
    def packed(self) -> bool:
        """Stored below 32 bits (several elements per word; f16 may still be native)."""
        return self.bits < 32

    @property
    def per_word(self) -> int:
        """Elements per 32-bit word."""
        return 32 // self.require_bits()

    def require_bits(self) -> int:
        self.require_device()
        return self.bits

    def nbytes(self, count: object) -> object:
        """Device bytes of `count` elements (an int or a symbolic dim), padded to whole words."""
        bits = self.require_bits()
        if bits == 32:
            return count * WORD_BYTES  # type: ignore[operator]
        per = 32 // bits
        return (count + per - 1) // per * WORD_BYTES  # type: ignore[operator]

    def require_device(self, what: str = "tensor") -> str:
        """The storage codec, or an UnsupportedDtypeError naming `what`."""
        if self.storage is None:
            supported = ", ".join(d.name for d in _TABLE if d.storage is not None)
            raise UnsupportedDtypeError(f"{what} has dtype {self.name}, which has no GPU representation "
                                        f"(supported: {supported})")
        return self.storage


def _d(name: str, onnx: int, numpy: object, kind: str, storage: str | None = None, bits: int = 0) -> DType:
    return DType(name, onnx, np.dtype(numpy), kind, storage, bits)  # type: ignore[arg-type]


_TABLE = [
    _d("float32", TensorProto.FLOAT, np.float32, "float", "f32", 32),
    _d("float16", TensorProto.FLOAT16, np.float16, "float", "f16", 16),
    _d("bfloat16", TensorProto.BFLOAT16, ml_dtypes.bfloat16, "float", "bf16", 16),
    _d("float8e4m3fn", TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn, "float", "e4m3fn", 8),
    _d("float8e4m3fnuz", TensorProto.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz, "float", "e4m3fnuz", 8),
    _d("float8e5m2", TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2, "float", "e5m2", 8),
    _d("float8e5m2fnuz", TensorProto.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz, "float", "e5m2fnuz", 8),
    _d("float8e8m0", TensorProto.FLOAT8E8M0, ml_dtypes.float8_e8m0fnu, "float", "e8m0", 8),
    _d("float4e2m1", TensorProto.FLOAT4E2M1, ml_dtypes.float4_e2m1fn, "float", "e2m1", 4),
    _d("float64", TensorProto.DOUBLE, np.float64, "float"),
    _d("int64", TensorProto.INT64, np.int64, "int", "i32", 32),
    _d("int32", TensorProto.INT32, np.int32, "int", "i32", 32),
    _d("int16", TensorProto.INT16, np.int16, "int", "s16", 16),
    _d("int8", TensorProto.INT8, np.int8, "int", "s8", 8),
    _d("int4", TensorProto.INT4, ml_dtypes.int4, "int", "s4", 4),
    _d("int2", TensorProto.INT2, ml_dtypes.int2, "int", "s2", 2),
    _d("uint64", TensorProto.UINT64, np.uint64, "uint", "u32", 32),
    _d("uint32", TensorProto.UINT32, np.uint32, "uint", "u32", 32),
    _d("uint16", TensorProto.UINT16, np.uint16, "uint", "u16", 16),
    _d("uint8", TensorProto.UINT8, np.uint8, "uint", "u8", 8),
    _d("uint4", TensorProto.UINT4, ml_dtypes.uint4, "uint", "u4", 4),
    _d("uint2", TensorProto.UINT2, ml_dtypes.uint2, "uint", "u2", 2),
    _d("bool", TensorProto.BOOL, np.bool_, "bool", "bool", 8),
    _d("string", TensorProto.STRING, object, "string"),
]
_BY_ONNX = {d.onnx: d for d in _TABLE}
_BY_NAME = {d.name: d for d in _TABLE}
_BY_NUMPY = {d.numpy: d for d in _TABLE if d.name != "string"}

FLOAT32 = _BY_NAME["float32"]
FLOAT16 = _BY_NAME["float16"]
INT64 = _BY_NAME["int64"]
# The int64 word that marks a value the GPU could not hold (codegen/storage.py): a valid int64
# on the device lies in ±(2^31 - 1).
INT64_LOST = -(2**31)
UINT64 = _BY_NAME["uint64"]
INT32 = _BY_NAME["int32"]
UINT32 = _BY_NAME["uint32"]
UINT8 = _BY_NAME["uint8"]
BOOL = _BY_NAME["bool"]
# The dtype whose storage is each word codec: scratch buffers and host writes name these.
WORD_DTYPES = {"f32": FLOAT32, "i32": INT32, "u32": UINT32}


def all_dtypes() -> list[DType]:
    return list(_TABLE)


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


_WORD_RANGE = {"i32": np.iinfo(np.int32), "u32": np.iinfo(np.uint32)}
_WORD_NUMPY = {"f32": np.dtype(np.float32), "i32": np.dtype(np.int32), "u32": np.dtype(np.uint32)}


def to_device(array: np.ndarray, dtype: DType, what: str) -> np.ndarray:
    """The device bytes of a host array of `dtype` (a contiguous array, padded to whole words): a
    view of `array` itself where it is contiguous in its storage type already (uploads copy)."""
    storage = dtype.require_device(what)
    if storage in WORD_STORAGE:
        if dtype.numpy.itemsize > 4 and array.size:  # int64 / uint64 in one 32-bit word
            lo, hi = int(array.min()), int(array.max())
            word = _WORD_RANGE[storage]
            if lo < word.min + (storage == "i32") or hi > word.max:  # int64's -2^31 marks lost values
                but = " except -2^31, which marks a lost value," if storage == "i32" else ""
                raise InputError(f"{what}: {dtype.name} values must fit in {word.dtype}{but} on the GPU "
                                 f"(got range [{lo}, {hi}])")
        return np.ascontiguousarray(array, dtype=_WORD_NUMPY[storage]).reshape(-1)
    values = np.ascontiguousarray(array, dtype=dtype.numpy).reshape(-1)
    if dtype.bits >= 8:
        raw = values.view(np.uint8)
        if not raw.size % WORD_BYTES:  # whole words already: the array itself, no copy
            return raw
    else:  # 4 and 2-bit values: several per byte, the first in the low bits (ONNX's raw layout)
        per = 8 // dtype.bits
        codes = values.view(np.uint8) & np.uint8((1 << dtype.bits) - 1)
        codes = np.concatenate([codes, np.zeros(-codes.size % per, np.uint8)]).reshape(-1, per)
        raw = np.zeros(codes.shape[0], np.uint8)
        for lane in range(per):
            raw |= codes[:, lane] << np.uint8(lane * dtype.bits)
    return np.concatenate([raw, np.zeros(-raw.size % WORD_BYTES, np.uint8)])


def from_device(raw: bytes | memoryview | np.ndarray, dtype: DType, count: int) -> np.ndarray:
    """`count` elements of `dtype` from device bytes (a flat array in the ONNX dtype)."""
    storage = dtype.require_device()
    data = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw.view(np.uint8).reshape(-1)
    if storage in WORD_STORAGE:
        return data[:4 * count].view(_WORD_NUMPY[storage]).astype(dtype.numpy)
    if dtype.bits >= 8:
        values = data[:count * dtype.bits // 8].view(dtype.numpy)
        return values != 0 if dtype.is_bool else values.copy()
    per, mask = 8 // dtype.bits, (1 << dtype.bits) - 1
    codes = np.stack([(data >> np.uint8(lane * dtype.bits)) & np.uint8(mask) for lane in range(per)], axis=1)
    codes = codes.reshape(-1)[:count]
    if dtype.is_signed:  # sign-extend the field, then convert the small integers
        shift = np.uint8(8 - dtype.bits)
        return ((codes << shift).view(np.int8) >> shift).astype(dtype.numpy)
    if dtype.is_float:
        return codes.view(dtype.numpy).copy()
    return codes.astype(dtype.numpy)
