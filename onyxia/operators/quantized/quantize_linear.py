"""QuantizeLinear and DequantizeLinear (ai.onnx, and their com.microsoft twins): elementwise rows.

Each is one map kernel (elementwise/map_kernel.py) over x, the scale and the zero point, with the scale and
zero point indexed per tensor, per axis (a [C] vector along `axis`) or per block (`block_size`
elements of `axis` share one value). Quantized outputs are stored in their own packed storage
(8/16-bit integers, int4/uint4/int2/uint2, float8, float4), so the rounding happens exactly
once, as onnx.reference does it:

- QuantizeLinear to an integer type: round(x / scale) half to even, plus the zero point,
  clamped to the type's range. x / scale is computed in the promoted type of x and the scale
  (float16 / bfloat16 quotients are rounded to that type, as numpy does), or in `precision`.
- QuantizeLinear to float8: x / scale rounded to float8 (the zero point is zero by the spec),
  saturated unless `saturate` = 0; to float4: x / scale + zero point, saturated.
- DequantizeLinear: (x - zero point) * scale in f32 (float8 / float4 x: x * scale), stored in
  the scale's type (or `output_dtype`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx.numpy_helper
from onnx import TensorProto

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape, numel
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import contiguous_strides, is_one
from onyxia.operators.elementwise.map_kernel import Operand, map_dispatch
from onyxia.operators.indexing.indexing import coords_code
from onyxia.plan import Step

MS = "com.microsoft"
INTEGER_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
                  "uint4": (0, 15), "int4": (-8, 7), "uint2": (0, 3), "int2": (-2, 1)}
FLOAT8 = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz")
QUANTIZED = (*INTEGER_RANGES, *FLOAT8, "float4e2m1")


def _layout(ctx: InferenceCtx, i: int) -> tuple[str, int, int]:
    """How input i (scale or zero point) maps onto x: ("tensor" | "axis" | "block", axis, block)."""
    x, p = ctx.input_shape(0), ctx.input_shape(i)
    rank = len(x)
    axis, block = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
    if len(p) == 0 or (len(p) == 1 and is_one(p[0])):
        return "tensor", 0, 0
    axis = ctx.axis(axis, rank)
    if block > 0:
        if len(p) != rank:
            raise ctx.fail(f"blocked quantization needs a scale of x's rank {rank}, got {len(p)} axes", i)
        for a, (d, n) in enumerate(zip(x, p)):
            want = (d + block - 1) // block if a == axis else d
            if not ctx.same_dim(n, want):
                raise ctx.fail(f"axis {a} of the scale is {n}, expected {want} (block_size {block})", i)
        return "block", axis, block
    if len(p) != 1 or not ctx.same_dim(p[0], x[axis]):
        raise ctx.fail(f"a per-axis scale must be [{x[axis]}] (axis {axis}), got {list(p)}", i)
    return "axis", axis, 0


def _host_param(value: np.ndarray, x_shape: tuple[int, ...], layout: tuple[str, int, int]) -> np.ndarray:
    """The scale or zero point broadcast to x (for folding)."""
    kind, axis, block = layout
    if kind == "tensor":
        return value.reshape(())
    if kind == "axis":
        return value.reshape((-1,) + (1,) * (len(x_shape) - axis - 1))
    return np.repeat(value, block, axis=axis).take(range(x_shape[axis]), axis=axis)


def _index(ctx: PlanCtx, shape: Shape, params: list[tuple[str, Shape, tuple[str, int, int]]]) -> tuple[dict, str]:
    """map_dispatch's index code: x is read at i; each param per tensor, per axis or per block."""
    code_params, lines = coords_code(shape, "QD")
    out: dict[str, object] = dict(code_params)
    lines.append("let idx_x0 = i;")
    for name, pshape, (kind, axis, block) in params:
        if kind == "tensor":
            lines.append(f"let idx_{name} = 0u;")
            continue
        if kind == "axis":
            lines.append(f"let idx_{name} = c{axis};")
            continue
        terms = []
        for a, s in enumerate(contiguous_strides(pshape)):
            coord = f"(c{a} / {name.upper()}B())" if a == axis else f"c{a}"
            out[f"{name.upper()}S{a}"] = s
            terms.append(f"{coord} * {name.upper()}S{a}()")
        out[f"{name.upper()}B"] = block
        lines.append(f"let idx_{name} = {' + '.join(terms)};")
    return out, "\n    ".join(lines)


def _rounded_to(dtype: DType, value: str) -> str:
    """WGSL rounding an f32 value to float16 / bfloat16 (numpy computes those in their type)."""
    if dtype.name == "float16":
        return f"unpack2x16float(pack2x16float(vec2<f32>({value}, 0.0))).x"
    if dtype.name == "bfloat16":
        return f"bitcast<f32>(onyxia_encode_bf16({value}) << 16u)"
    return value


class QuantizeLinear(Operator):
    op_type = "QuantizeLinear"

    def __init__(self, domain: str = ""):
        self.domain = domain

    def target(self, ctx: InferenceCtx) -> DType:
        if ctx.has_input(2):
            dtype = ctx.input_dtype(2)
        else:
            dtype = dtypes.from_onnx(int(ctx.attr("output_dtype", 0)) or TensorProto.UINT8)
        if dtype.name not in QUANTIZED:
            raise ctx.fail(f"cannot quantize to {dtype} (supported: {', '.join(QUANTIZED)})")
        return dtype

    def quotient_dtype(self, ctx: InferenceCtx) -> DType:
        """The type x / scale is computed in (numpy's promotion of the two, or `precision`)."""
        precision = int(ctx.attr("precision", 0))
        if precision:
            return dtypes.from_onnx(precision)
        x, s = ctx.input_dtype(0), ctx.input_dtype(1)
        return x if x == s else dtypes.FLOAT32

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        if not ctx.input_dtype(0).is_float or not ctx.input_dtype(1).is_float:
            raise ctx.fail(f"x and y_scale must be floats, got {ctx.input_dtype(0)} and {ctx.input_dtype(1)}")
        for i in (1, 2):
            if ctx.has_input(i):
                _layout(ctx, i)
        return [(self.target(ctx), ctx.input_shape(0))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        x, target = vals[0], self.target(ctx)
        scale = _host_param(vals[1], x.shape, _layout(ctx, 1))
        zp = _host_param(vals[2], x.shape, _layout(ctx, 2)) if ctx.has_input(2) else None
        if int(ctx.attr("precision", 0)):
            p = self.quotient_dtype(ctx).numpy
            x, scale = x.astype(p), scale.astype(p)
        with np.errstate(all="ignore"):
            q = x / scale  # numpy's promotion: float16 / float16 stays float16, as the kernel rounds it
            if target.name in INTEGER_RANGES:
                y = np.clip(np.rint(q).astype(np.float64) + (0 if zp is None else zp), *INTEGER_RANGES[target.name])
            elif target.name in FLOAT8:
                y = onnx.numpy_helper.saturate_cast(q, target.numpy) if ctx.attr("saturate", 1) else q
            else:
                y = q if zp is None else q + zp.astype(np.float32)
            return [np.asarray(y).astype(target.numpy)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        target, quotient = self.target(ctx), self.quotient_dtype(ctx)
        x_shape = ctx.input_shape(0)
        if int(ctx.attr("precision", 0)):  # both operands rounded to the precision's type first
            q = f"{_rounded_to(quotient, 'x0')} / {_rounded_to(quotient, 'x1')}"
        else:
            q = "x0 / x1"
        q = _rounded_to(quotient, q)
        has_zp = ctx.has_input(2)
        raw = False
        if target.name in INTEGER_RANGES:
            lo, hi = INTEGER_RANGES[target.name]
            zp = " + x2" if has_zp else ""
            expr = f"i32(clamp(round({q}){zp}, {float(lo)}, {float(hi)}))"
        elif target.name in FLOAT8:  # the zero point is 0 by the spec; the store rounds (and saturates)
            expr = q
            if not ctx.attr("saturate", 1):
                expr, raw = f"onyxia_encode_{target.storage}({q}, false)", True
        else:  # float4e2m1: the zero point is added as a float; the store rounds and saturates
            expr = f"{q}{' + x2' if has_zp else ''}"
        operands = [Operand(ctx.input(0), x_shape, "f32"), Operand(ctx.input(1), ctx.input_shape(1), "f32")]
        names = [("x1", ctx.input_shape(1), _layout(ctx, 1))]
        if has_zp:
            operands.append(Operand(ctx.input(2), ctx.input_shape(2), "f32"))
            names.append(("x2", ctx.input_shape(2), _layout(ctx, 2)))
        return map_dispatch(ctx, expr, operands, index=_index(ctx, x_shape, names), raw_output=raw,
                            label="quantize_linear")


class DequantizeLinear(Operator):
    op_type = "DequantizeLinear"

    def __init__(self, domain: str = ""):
        self.domain = domain

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        x = ctx.input_dtype(0)
        if x.name not in (*QUANTIZED, "int32"):
            raise ctx.fail(f"cannot dequantize {x} (supported: {', '.join((*QUANTIZED, 'int32'))})", 0)
        if not ctx.input_dtype(1).is_float:
            raise ctx.fail(f"x_scale must be a float, got {ctx.input_dtype(1)}", 1)
        for i in (1, 2):
            if ctx.has_input(i):
                _layout(ctx, i)
        out = int(ctx.attr("output_dtype", 0))
        return [(dtypes.from_onnx(out) if out else ctx.input_dtype(1), ctx.input_shape(0))]

    def uses_zero_point(self, ctx: InferenceCtx) -> bool:
        """float8 / float4 x ignore the zero point (it is 0 by the spec)."""
        return ctx.has_input(2) and not ctx.input_dtype(0).is_float

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        x = vals[0].astype(np.float32)
        if self.uses_zero_point(ctx):
            x = x - _host_param(vals[2], x.shape, _layout(ctx, 2)).astype(np.float32)
        y = x * _host_param(vals[1], x.shape, _layout(ctx, 1)).astype(np.float32)
        return [ctx.cast_output(y)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        x_shape = ctx.input_shape(0)
        operands = [Operand(ctx.input(0), x_shape, "f32"), Operand(ctx.input(1), ctx.input_shape(1), "f32")]
        names = [("x1", ctx.input_shape(1), _layout(ctx, 1))]
        expr = "x0 * x1"
        if self.uses_zero_point(ctx):
            operands.append(Operand(ctx.input(2), ctx.input_shape(2), "f32"))
            names.append(("x2", ctx.input_shape(2), _layout(ctx, 2)))
            expr = "(x0 - x2) * x1"
        if isinstance(numel(x_shape), int) and numel(x_shape) == 0:
            return []
        return map_dispatch(ctx, expr, operands, index=_index(ctx, x_shape, names), label="dequantize_linear")


def operators() -> list[tuple[Operator, Any]]:
    """(operator, since_version) pairs this module registers."""
    return [(QuantizeLinear(), 10), (DequantizeLinear(), 10), (QuantizeLinear(MS), 1), (DequantizeLinear(MS), 1)]
