"""Type conversion: Cast, CastLike, BitCast.

A cast between dtypes that share a device representation and whose values all fit (int32 →
int64, uint8 → int32, bool → uint8, float16 → float32, ...) is a view: no steps. Anything else
is one elementwise map whose expression reproduces numpy's astype on the stored 32-bit words.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.map_kernel import plan_map
from onyxia.plan import Step


def convert_expr(src: DType, dst: DType) -> str:
    """WGSL expression converting x0 (in src's device type) to dst's semantics."""
    if dst.is_bool:
        return "select(0u, 1u, x0 != " + ("0.0" if src.device == "f32" else f"{src.device}(0)") + ")"
    if dst.name == "float16":  # stored as f32, but values must round to half precision
        return "unpack2x16float(pack2x16float(vec2<f32>(f32(x0), 0.0))).x"
    if dst.device == "f32":
        return "f32(x0)"
    if src.device == "f32":
        # float → int truncates toward zero; narrow ints wrap like numpy's astype.
        x = "i32(trunc(x0))" if dst.device == "i32" else "u32(max(trunc(x0), 0.0))"
    else:
        x = f"{dst.device}(x0)"  # i32 ↔ u32 reinterprets the bits (two's complement), as astype does
    if dst.name in ("int8", "int16"):
        bits = 32 - 8 * dst.numpy.itemsize
        return f"(({x}) << {bits}u) >> {bits}u"
    if dst.name in ("uint8", "uint16"):
        return f"({x}) & {hex((1 << 8 * dst.numpy.itemsize) - 1)}u"
    return x


def is_view_cast(src: DType, dst: DType) -> bool:
    """True when the stored words of `src` already are those of `dst` for every value."""
    if src == dst or (src.name, dst.name) == ("float16", "float32"):
        return True
    if src.is_float or dst.is_float or dst.is_bool:
        return False
    if src.device == dst.device:
        # int64 is i32 on the device, so int64 → int32 keeps the words too.
        return np.can_cast(src.numpy, dst.numpy, "safe") or {src.name, dst.name} == {"int64", "int32"}
    # bool/uint8/uint16 (u32 words) fit in i32 unchanged.
    return src.device == "u32" and dst.device == "i32" and src.numpy.itemsize <= 2


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

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        return [(self.target(ctx), ctx.input_shape(0))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        value = ctx.input_value(0)
        if value is None:
            return None
        if value.dtype == object:  # symbolic shape values stay symbolic through int casts
            return [value] if self.target(ctx).is_integer else None
        with np.errstate(all="ignore"):
            return [value.astype(self.target(ctx).numpy)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        src, dst = ctx.input_dtype(0), self.target(ctx)
        ctx.device_type(src, "input")
        ctx.device_type(dst, "output")
        if is_view_cast(src, dst):
            return ctx.alias_output(0, 0)
        return plan_map(ctx, convert_expr(src, dst), [0], label="cast")


class CastLike(Cast):
    """Cast to the dtype of input 1 (only its dtype is used)."""

    op_type = "CastLike"

    def target(self, ctx: InferenceCtx) -> DType:
        return ctx.input_dtype(1)


def _bits_expr(src: DType) -> str:
    """x0 (src's compute type) as its raw bits in the low bytes of a u32."""
    width = src.numpy.itemsize * 8
    if src.name == "float16":
        return "(pack2x16float(vec2<f32>(x0, 0.0)) & 0xffffu)"
    if width == 32:
        return "bitcast<u32>(x0)"
    return f"(bitcast<u32>(x0) & {hex((1 << width) - 1)}u)"


def _from_bits_expr(dst: DType, bits: str) -> str:
    """Raw bits (a u32 expression) as a value of dst's device type."""
    width = dst.numpy.itemsize * 8
    if dst.name == "float16":
        return f"unpack2x16float({bits}).x"
    if dst.is_bool:
        return f"select(0u, 1u, {bits} != 0u)"
    if width == 32:
        return f"bitcast<{dst.device}>({bits})"
    if dst.device == "i32":  # sign-extend the narrow value
        return f"(bitcast<i32>({bits}) << {32 - width}u) >> {32 - width}u"
    return bits


class BitCast(Operator):
    """Reinterpret each element's bits as another type of the same width (opset 26).

    Every element is one 32-bit word on the device, so narrow types go through their raw bits:
    an int8 -1 read as uint8 is 255, a float16 is repacked to its 16 bits first. A float16
    result that is a NaN keeps being NaN but not its payload bits (float16 lives in f32 words).
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
        ctx.device_type(src, "input")
        ctx.device_type(dst, "output")
        return plan_map(ctx, _from_bits_expr(dst, _bits_expr(src)), [0], label="bitcast")


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(Cast(), 1), (CastLike(), 15), (BitCast(), 26)]
