"""Type conversion: Cast, CastLike, BitCast.

A cast between dtypes whose device bytes already agree for every value (int32 → int64, int8 →
uint8, bool → uint8, ...) is a view: no steps. Anything else is one elementwise map: the value
is loaded in its source's compute type, converted as numpy's astype (ml_dtypes for the narrow
float and integer types) converts it, and rounded once when stored in the target's storage
(round to nearest even; float8 saturates unless `saturate` = 0; float8e8m0 rounds as
`round_mode` says). Conversions to int64 check the ±(2^31 - 1) range the GPU holds int64 in
(a value outside it is lost, codegen/storage.py); conversions from int64 refuse a lost value.
"""

from __future__ import annotations

import numpy as np
import onnx.numpy_helper
from onnx import TensorProto

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.elementwise.elementwise import INT64_OVERFLOW, INT64_READ
from onyxia.operators.elementwise.map_kernel import plan_map
from onyxia.plan import Step

FLOAT8 = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz")
ROUND_MODES = {"up": 0, "down": 1, "nearest": 2}  # float8e8m0 encoder's mode numbers


# float → int32 as x86's cvttss2si (what onnxruntime's CPU Cast and numpy's astype run on x86-64):
# NaN and values outside [-2^31, 2^31) give the "integer indefinite" value -2^31. WGSL's i32()
# clamps instead (2147483520 for 3e9), so the range is tested here. Elsewhere (ARM's fcvtzs
# saturates) onnxruntime's result is platform-defined; onyxia matches x86 on every adapter.
X86_I32 = "select(-2147483647i - 1i, i32(trunc({v})), {v} >= -2147483648.0 && {v} < 2147483648.0)"
# The narrow integer targets that take the low bits of that int32 (uint32: x86_float_to_int).
X86_TARGETS = ("int8", "int16", "int32", "uint8", "uint16", "uint32")


def x86_float_to_int(value: np.ndarray, target: DType) -> np.ndarray:
    """Float → integer `target` (X86_TARGETS) as the kernel computes it, on any platform: the
    x86 int32 conversion (X86_I32) keeping its low bits; uint32 as compilers vectorize it for
    AVX2, the int32 conversion below 2^31 and that of x - 2^31 with the top bit flipped above
    (NaN, < -2^31 and >= 2^32 give 2^31 or 0, as onnxruntime 1.32 and numpy 2.4 do on x86-64).
    float16 → uint32 takes the scalar path instead, the low bits of a 64-bit conversion: every
    finite half fits it, NaN and ±inf give 0."""
    v = value.astype(np.float64)
    if target == dtypes.UINT32 and value.dtype == np.float16:
        finite = np.isfinite(v)
        return np.where(finite, np.trunc(np.where(finite, v, 0.0)), 0.0).astype(np.int64).astype(np.uint32)

    def cvt(w: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            ok = (w >= -2.0**31) & (w < 2.0**31)
            return np.where(ok, np.trunc(np.where(ok, w, 0.0)), -2.0**31).astype(np.int64)

    out = cvt(v)
    if target == dtypes.UINT32:
        with np.errstate(invalid="ignore"):
            out = np.where(v >= 2.0**31, cvt(v - 2.0**31) ^ -(2**31), out)
    return out.astype(target.numpy)


def convert_expr(src: DType, dst: DType, saturate: bool = True, round_mode: str = "up") -> tuple[str, bool, str | None]:
    """(WGSL converting x0 (in src's compute type) to dst, raw: the expression gives dst's
    storage code, what a report means (None: it never reports))."""
    if src == dtypes.INT64 and dst != dtypes.INT64:  # a lost int64 (-2^31) has no value to convert
        expr, raw, _ = convert_expr(dtypes.INT32, dst, saturate, round_mode)
        return expr.replace("x0", "onyxia_known(x0)"), raw, INT64_READ
    zero = {"f32": "0.0", "i32": "0i", "u32": "0u"}[src.compute]
    if dst.is_bool:
        return f"select(0u, 1u, x0 != {zero})", False, None
    if dst.storage == "e8m0":
        return f"onyxia_encode_e8m0(f32(x0), {str(saturate).lower()}, {ROUND_MODES[round_mode]}u)", True, None
    if dst.name in FLOAT8 and not saturate:
        return f"onyxia_encode_{dst.storage}(f32(x0), false)", True, None
    if dst.is_float:
        return "f32(x0)", False, None  # rounded (and float8 saturated) by the store
    if dst == dtypes.INT64:
        if src.is_float:
            return "onyxia_checked_f32_to_i32(x0)", False, INT64_OVERFLOW
        if src.compute == "u32" and src.bits == 32:
            return "onyxia_checked_u32_to_i32(x0)", False, INT64_OVERFLOW
        return "i32(x0)", False, None
    if src.is_float:
        # float → int truncates toward zero, then as x86 does it (x86_float_to_int): narrower
        # targets keep the low bits of the int32 (the store wraps). uint64 (kept in u32 on the
        # device) stays clamped at 0: its x86 results past the u32 range have no storage.
        if dst == dtypes.UINT32 and src == dtypes.FLOAT16:  # the scalar 64-bit conversion's low bits
            return "select(0u, bitcast<u32>(i32(trunc(x0))), abs(x0) < 2147483648.0)", False, None
        if dst == dtypes.UINT32:
            return (f"select(bitcast<u32>({X86_I32.format(v='x0')}), "
                    f"bitcast<u32>({X86_I32.format(v='(x0 - 2147483648.0)')}) ^ 0x80000000u, "
                    "x0 >= 2147483648.0)"), False, None
        if dst.compute == "u32" and dst.bits == 32:
            return "u32(max(trunc(x0), 0.0))", False, None
        return f"{dst.compute}({X86_I32.format(v='x0')})", False, None
    # i32 ↔ u32 reinterprets the bits (two's complement) and the store wraps, as astype does
    return f"{dst.compute}(x0)", False, None


def is_view_cast(src: DType, dst: DType) -> bool:
    """True when the stored bytes of `src` already are those of `dst` for every value."""
    if src == dst:
        return True
    if src.is_float or dst.is_float or dst.is_bool or src.bits != dst.bits:
        return False
    # Same width between integer types (and bool 0/1 codes): astype keeps the bits. uint32 →
    # int64 is the exception: values above 2^31 do not fit the i32 the device keeps int64 in;
    # and int64 → 32 bits, whose -2^31 marks a lost value (checked by the kernel instead).
    return not (dst == dtypes.INT64 and src.compute == "u32") and src != dtypes.INT64


class Cast(Operator):
    op_type = "Cast"

    def target(self, ctx: InferenceCtx) -> DType:
        to = ctx.attr("to")
        try:
            if isinstance(to, str):  # Cast-1 named the type ("FLOAT")
                return dtypes.from_onnx(TensorProto.DataType.Value(to.upper()))
            return dtypes.from_onnx(int(to))
        except Exception as exc:
            raise ctx.fail(f"attribute 'to': {exc}") from None

    def modes(self, ctx: InferenceCtx) -> tuple[bool, str]:
        """(saturate, round_mode): how float8 targets treat out-of-range values and round."""
        mode = ctx.attr("round_mode", "up")
        if mode not in ROUND_MODES:
            raise ctx.fail(f"attribute 'round_mode' is '{mode}', expected one of {', '.join(ROUND_MODES)}")
        return bool(ctx.attr("saturate", 1)), mode

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        self.modes(ctx)
        return [(self.target(ctx), ctx.input_shape(0))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        value = ctx.input_value(0)
        if value is None:
            return None
        target = self.target(ctx)
        if value.dtype == object:  # symbolic shape values stay symbolic through int casts
            return [value] if target.is_integer else None
        saturate, mode = self.modes(ctx)
        with np.errstate(all="ignore"):
            if target.storage == "e8m0":
                return [onnx.numpy_helper.to_float8e8m0(value, saturate, mode)]
            if target.name in FLOAT8 and saturate:
                return [onnx.numpy_helper.saturate_cast(value, target.numpy)]
            if value.dtype.kind == "f" and target.name in X86_TARGETS:
                return [x86_float_to_int(value, target)]
            return [value.astype(target.numpy)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        src, dst = ctx.input_dtype(0), self.target(ctx)
        ctx.compute_type(src, "input")
        ctx.compute_type(dst, "output")
        if is_view_cast(src, dst):
            return ctx.alias_output(0, 0)
        expr, raw, reports = convert_expr(src, dst, *self.modes(ctx))
        return plan_map(ctx, expr, [0], label="cast", raw_output=raw, reports=reports)


class CastLike(Cast):
    """Cast to the dtype of input 1 (only its dtype is used)."""

    op_type = "CastLike"

    def target(self, ctx: InferenceCtx) -> DType:
        return ctx.input_dtype(1)


class BitCast(Operator):
    """Reinterpret each element's bits as another type of the same width (opset 26).

    Device bytes are the ONNX raw bytes for every device dtype of the same width (int64 aside,
    whose same-width partners float64 and uint64 have no device storage): a view, no steps, and
    every bit (NaN payloads included) stays where it was.
    """

    op_type = "BitCast"

    def target(self, ctx: InferenceCtx) -> DType:
        try:
            return dtypes.from_onnx(int(ctx.attr("to")))
        except Exception as exc:
            raise ctx.fail(f"attribute 'to': {exc}") from None

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        src, dst = ctx.input_dtype(0), self.target(ctx)
        if src.numpy.itemsize != dst.numpy.itemsize or src.name == "string" or dst.name == "string":
            raise ctx.fail(f"attribute 'to' = {dst} must have the bit width of the input's {src}")
        return [(dst, ctx.input_shape(0))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        value = ctx.input_value(0)
        if value is None or value.dtype == object:
            return None
        return [np.ascontiguousarray(value).view(self.target(ctx).numpy)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        src, dst = ctx.input_dtype(0), self.target(ctx)
        ctx.compute_type(src, "input")
        ctx.compute_type(dst, "output")
        return ctx.alias_output(0, 0)


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(Cast(), 1), (CastLike(), 15), (BitCast(), 26)]
