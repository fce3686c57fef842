"""Quantized ONNX operators, as exact decompositions into supported ops (operators/functions.py).

Integer products never touch floats: operands are widened to int32 and their zero points
subtracted (Cast, Sub), then multiplied and accumulated in i32 by the MatMul / Conv kernels'
i32 specializations, as onnxruntime does. Only the requantization is float, done the way
onnxruntime does it: the multiplier (a_scale * b_scale) / y_scale in float32 (folded on the
host when the scales are constants), y = saturate(round_half_even(float(acc) * multiplier) + zp).
Every step is a row of an existing family, so constant weights fold to int32 tensors and the
elementwise tails fuse into one kernel.

The com.microsoft ops that onnxruntime's quantization tools emit dequantize, apply the float
op and quantize (x / scale, rounded half to even, plus the zero point, saturated). Where
onnxruntime computes those in fixed point (QLinearAdd's SIMD kernels) results may differ from
it by one unit in the last place.

QuantizeLinear/DequantizeLinear (ai.onnx and the com.microsoft twins that the quantization tools
emit with UseQDQContribOps) are elementwise rows of their own: operators/quantized/quantize_linear.py.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from onnx import TensorProto, helper

from onyxia.operators.base import Operator
from onyxia.operators.functions import BodyBuilder, Call, Decomposition, FunctionOp

MS = "com.microsoft"
OPSET = {"": 21}  # the opset every body here is written against
_RANGE = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767)}
_QUANTIZED = tuple(_RANGE)
_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


class Body(BodyBuilder):
    """A decomposition's nodes plus the quantization steps every op here shares."""

    def __init__(self, call: Call):
        super().__init__(call, OPSET)

    def to_float(self, name: str) -> str:
        return self.op("Cast", name, to=TensorProto.FLOAT)

    def input_float(self, i: int) -> str:
        """Input i (a float scale) in float32: float16 scales widen exactly."""
        return self.call.input(i) if self.call.dtypes[i].name == "float32" else self.to_float(self.call.input(i))

    def per_row(self, name: str, i: int) -> str:
        """A 1-D parameter of more than one element as a column [n, 1]: per row of a matrix."""
        shape = self.call.shapes[i]
        if shape is not None and len(shape) == 1 and shape[0] != 1:
            return self.op("Reshape", name, self.const([-1, 1]))
        return name

    def per_channel(self, name: str, i: int, spatial: int) -> str:
        """A 1-D parameter [M] as [M, 1, ...] to broadcast over a conv output's spatial axes."""
        shape = self.call.shapes[i]
        if shape is not None and len(shape) == 1 and shape[0] != 1:
            return self.op("Reshape", name, self.const([-1] + [1] * spatial))
        return name

    def centered(self, x: int, zp: int | None, layout: Callable[[str, int], str] | None = None) -> str:
        """Input x widened to int32 minus its zero point (input zp, when present)."""
        value = self.op("Cast", self.call.input(x), to=TensorProto.INT32)
        if zp is None or not self.call.has(zp):
            return value
        point = self.op("Cast", self.call.input(zp), to=TensorProto.INT32)
        return self.op("Sub", value, layout(point, zp) if layout else point)

    def dequantize(self, x: int, scale: int, zp: int | None) -> str:
        return self.op("Mul", self.to_float(self.centered(x, zp)), self.input_float(scale))

    def saturate(self, value: str, zp: int | None, dtype: str, out: str) -> str:
        """round_half_even(value) + zero point, saturated to dtype and stored as dtype."""
        rounded = self.op("Round", value)
        if zp is not None and self.call.has(zp):
            rounded = self.op("Add", rounded, self.to_float(self.call.input(zp)))
        lo, hi = _RANGE[dtype]
        clipped = self.op("Clip", rounded, self.const(lo, np.float32), self.const(hi, np.float32))
        return self.op("Cast", clipped, out=out, to=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))

    def quantize(self, value: str, scale: int, zp: int | None, out: str, dtype: str | None = None) -> str:
        """QuantizeLinear's formula: saturate(round(value / scale) + zero point)."""
        dtype = dtype or (self.call.dtypes[zp].name if zp is not None and self.call.has(zp) else "uint8")
        return self.saturate(self.op("Div", value, self.input_float(scale)), zp, dtype, out)


def _quantized(call: Call, *inputs: int) -> None:
    for i in inputs:
        if call.has(i) and call.dtypes[i].name not in _QUANTIZED[:2]:
            raise call.fail(f"expects int8 or uint8, got {call.dtypes[i]}", i)


def _conv_attrs(call: Call) -> dict[str, Any]:
    if call.attr("channels_last", 0):
        raise call.fail("attribute 'channels_last' = 1 is not supported by onyxia (NCHW only)")
    return {k: call.attr(k) for k in _CONV_ATTRS if call.attr(k) is not None}


# ---- integer products -------------------------------------------------------------------------

def matmul_integer(call: Call) -> Decomposition:
    """MatMulInteger(A, B, a_zero_point?, b_zero_point?) -> int32 (a's zero point per row)."""
    _quantized(call, 0, 1, 2, 3)
    b = Body(call)
    b.op("MatMul", b.centered(0, 2, b.per_row), b.centered(1, 3), out=call.output())
    return b.done()


def qlinear_matmul(call: Call) -> Decomposition:
    """QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)."""
    _quantized(call, 0, 2, 3, 5, 7)
    b = Body(call)
    acc = b.op("MatMul", b.centered(0, 2, b.per_row), b.centered(3, 5))
    scale = b.op("Div", b.op("Mul", b.per_row(b.input_float(1), 1), b.input_float(4)), b.input_float(6))
    b.saturate(b.op("Mul", b.to_float(acc), scale), 7, call.dtypes[7].name, call.output())
    return b.done()


def conv_integer(call: Call) -> Decomposition:
    """ConvInteger(x, w, x_zero_point?, w_zero_point?) -> int32 (w's zero point per channel)."""
    _quantized(call, 0, 1, 2, 3)
    b = Body(call)
    spatial = len(call.shapes[0]) - 2
    w = b.centered(1, 3, lambda name, i: b.per_channel(name, i, spatial + 1))
    b.op("Conv", b.centered(0, 2), w, out=call.output(), **_conv_attrs(call))
    return b.done()


def qlinear_conv(call: Call) -> Decomposition:
    """QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B?): B is int32."""
    _quantized(call, 0, 2, 3, 5, 7)
    b = Body(call)
    spatial = len(call.shapes[0]) - 2
    w = b.centered(3, 5, lambda name, i: b.per_channel(name, i, spatial + 1))
    inputs = [b.centered(0, 2), w] + ([call.input(8)] if call.has(8) else [])
    acc = b.op("Conv", *inputs, **_conv_attrs(call))
    w_scale = b.per_channel(b.input_float(4), 4, spatial)
    scale = b.op("Div", b.op("Mul", b.input_float(1), w_scale), b.input_float(6))
    b.saturate(b.op("Mul", b.to_float(acc), scale), 7, call.dtypes[7].name, call.output())
    return b.done()


def _product_to_float(b: Body, acc: str, a_scale: str, b_scale: str, bias: int | None) -> None:
    """y = float(acc) * (a_scale * b_scale) (+ bias), as onnxruntime's scale-bias output."""
    y = b.op("Mul", b.to_float(acc), b.op("Mul", a_scale, b_scale))
    if bias is not None and b.call.has(bias):
        y = b.op("Add", y, b.call.input(bias))
    b.op("Identity", y, out=b.call.output())


def matmul_integer_to_float(call: Call) -> Decomposition:
    """MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zp?, b_zp?, bias?) (com.microsoft)."""
    _quantized(call, 0, 1, 4, 5)
    b = Body(call)
    acc = b.op("MatMul", b.centered(0, 4, b.per_row), b.centered(1, 5))
    _product_to_float(b, acc, b.per_row(b.input_float(2), 2), b.input_float(3), 6)
    return b.done()


def dynamic_quantize(b: Body, x: str) -> tuple[str, str, str]:
    """DynamicQuantizeLinear's body on tensor x: (uint8 q, scale, uint8 zero point).

    As onnxruntime computes it: the range [min(x, 0), max(x, 0)] over 255 steps (scale 1 when the
    range is empty), the zero point rounded half to even, x / scale rounded half to even."""
    zero, steps = b.const(0.0, np.float32), b.const(255.0, np.float32)
    lo = b.op("Min", b.op("ReduceMin", x, keepdims=0), zero)
    hi = b.op("Max", b.op("ReduceMax", x, keepdims=0), zero)
    span = b.op("Sub", hi, lo)
    scale = b.op("Where", b.op("Equal", span, zero), b.const(1.0, np.float32), b.op("Div", span, steps))
    zp_float = b.op("Round", b.op("Clip", b.op("Sub", zero, b.op("Div", lo, scale)), zero, steps))
    zp = b.op("Cast", zp_float, to=TensorProto.UINT8)
    shifted = b.op("Add", b.op("Round", b.op("Div", x, scale)), zp_float)
    q = b.op("Cast", b.op("Clip", shifted, zero, steps), to=TensorProto.UINT8)
    return q, scale, zp


def dynamic_quantize_linear(call: Call) -> Decomposition:
    if call.dtypes[0].name != "float32":
        raise call.fail(f"expects float32, got {call.dtypes[0]}", 0)
    b = Body(call)
    q, scale, zp = dynamic_quantize(b, call.input(0))
    for name, out in zip((q, scale, zp), call.node.outputs):
        b.op("Identity", name, out=out)
    return b.done()


def dynamic_quantize_matmul(call: Call) -> Decomposition:
    """DynamicQuantizeMatMul(A float, B, b_scale, b_zp?, bias?): A quantized as
    DynamicQuantizeLinear does, an integer product, scaled back (com.microsoft)."""
    _quantized(call, 1, 3)
    b = Body(call)
    q, a_scale, a_zp = dynamic_quantize(b, call.input(0))
    a = b.op("Sub", b.op("Cast", q, to=TensorProto.INT32), b.op("Cast", a_zp, to=TensorProto.INT32))
    acc = b.op("MatMul", a, b.centered(1, 3))
    _product_to_float(b, acc, a_scale, b.input_float(2), 4)
    return b.done()


def qgemm(call: Call) -> Decomposition:
    """QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?) (com.microsoft): acc = C +
    op(A') @ op(B') in int32; scale = alpha * a_scale * b_scale (/ y_scale); quantized to y_zp's
    type when y_zp is given (as onnxruntime decides), else float."""
    _quantized(call, 0, 2, 3, 5, 8)
    b = Body(call)
    # B's zero point is per column of op(B): per row of B itself when B is transposed
    a, w = b.centered(0, 2), b.centered(3, 5, b.per_row if call.attr("transB", 0) else None)
    if call.attr("transA", 0):
        a = b.op("Transpose", a, perm=[1, 0])
    if call.attr("transB", 0):
        w = b.op("Transpose", w, perm=[1, 0])
    acc = b.op("MatMul", a, w)
    if call.has(6):
        acc = b.op("Add", acc, call.input(6))
    alpha = b.const(float(call.attr("alpha", 1.0)), np.float32)
    scale = b.op("Mul", b.op("Mul", alpha, b.input_float(1)), b.input_float(4))
    if call.has(7):
        scale = b.op("Div", scale, b.input_float(7))
    y = b.op("Mul", b.to_float(acc), scale)
    if call.has(8):
        b.saturate(y, 8, call.dtypes[8].name, call.output())
    else:
        b.op("Identity", y, out=call.output())
    return b.done()


# ---- dequantize, float op, quantize (com.microsoft) ---------------------------------------------

def _unary(op_type: str, **fixed: Any) -> Callable[[Call], Decomposition]:
    """(X, X_scale, X_zp?, Y_scale, Y_zp?) -> quantize(op(dequantize(X)))."""
    def build(call: Call) -> Decomposition:
        _quantized(call, 0, 2, 4)
        b = Body(call)
        attrs = {k: call.attr(k, v) for k, v in fixed.items()}
        b.quantize(b.op(op_type, b.dequantize(0, 1, 2), **attrs), 3, 4, call.output(), call.dtypes[0].name)
        return b.done()
    return build


def _binary(op_type: str) -> Callable[[Call], Decomposition]:
    """(A, A_scale, A_zp?, B, B_scale, B_zp?, C_scale, C_zp?) -> quantize(dequant(A) op dequant(B))."""
    def build(call: Call) -> Decomposition:
        _quantized(call, 0, 2, 3, 5, 7)
        b = Body(call)
        value = b.op(op_type, b.dequantize(0, 1, 2), b.dequantize(3, 4, 5))
        b.quantize(value, 6, 7, call.output(), call.dtypes[0].name)
        return b.done()
    return build


def qlinear_softmax(call: Call) -> Decomposition:
    """QLinearSoftmax(X, X_scale, x_zp?, y_scale, y_zp; axis, opset) (com.microsoft): softmax of the
    dequantized input, over `axis` (opset >= 13) or over the dims from `axis` on (before 13)."""
    _quantized(call, 0, 2, 4)
    b = Body(call)
    rank = len(call.shapes[0])
    axis = int(call.attr("axis", -1 if int(call.attr("opset", 13)) >= 13 else 1)) % max(rank, 1)
    x = b.dequantize(0, 1, 2)
    if int(call.attr("opset", 13)) >= 13:
        y = b.op("Softmax", x, axis=axis)
    else:  # coerced to [N, D] at `axis`, as Softmax-1..12 does
        flat = b.op("Flatten", x, axis=axis)
        y = b.op("Reshape", b.op("Softmax", flat, axis=1), b.op("Shape", x))
    b.quantize(y, 3, 4, call.output(), call.dtypes[0].name)
    return b.done()


def _pool(op_type: str, attrs: tuple[str, ...]) -> Callable[[Call], Decomposition]:
    def build(call: Call) -> Decomposition:
        _quantized(call, 0, 2, 4)
        if call.attr("channels_last", 0):
            raise call.fail("attribute 'channels_last' = 1 is not supported by onyxia (NCHW only)")
        b = Body(call)
        kept = {k: call.attr(k) for k in attrs if call.attr(k) is not None}
        b.quantize(b.op(op_type, b.dequantize(0, 1, 2), **kept), 3, 4, call.output(), call.dtypes[0].name)
        return b.done()
    return build


def qlinear_concat(call: Call) -> Decomposition:
    """QLinearConcat(Y_scale, Y_zp, (X, X_scale, X_zp) * n, axis): each input requantized to Y's
    parameters, then concatenated (com.microsoft)."""
    if (len(call.node.inputs) - 2) % 3 or len(call.node.inputs) < 5:
        raise call.fail(f"expects Y_scale, Y_zero_point and (X, X_scale, X_zero_point) triples, got "
                        f"{len(call.node.inputs)} inputs")
    _quantized(call, 1, *range(2, len(call.node.inputs), 3))
    b = Body(call)
    parts = []
    for x in range(2, len(call.node.inputs), 3):
        parts.append(b.quantize(b.dequantize(x, x + 1, x + 2), 0, 1, f"part{x}", call.dtypes[1].name))
    b.op("Concat", *parts, out=call.output(), axis=call.attr("axis"))
    return b.done()


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    ops: list[tuple[Operator, int]] = [
        (FunctionOp("", "MatMulInteger", matmul_integer), 10),
        (FunctionOp("", "QLinearMatMul", qlinear_matmul), 10),
        (FunctionOp("", "ConvInteger", conv_integer), 10),
        (FunctionOp("", "QLinearConv", qlinear_conv), 10),
        (FunctionOp("", "DynamicQuantizeLinear", dynamic_quantize_linear), 11),
        (FunctionOp(MS, "QLinearConv", qlinear_conv), 1),
        (FunctionOp(MS, "MatMulIntegerToFloat", matmul_integer_to_float), 1),
        (FunctionOp(MS, "DynamicQuantizeMatMul", dynamic_quantize_matmul), 1),
        (FunctionOp(MS, "QGemm", qgemm), 1),
        (FunctionOp(MS, "QLinearAdd", _binary("Add")), 1),
        (FunctionOp(MS, "QLinearMul", _binary("Mul")), 1),
        (FunctionOp(MS, "QLinearSigmoid", _unary("Sigmoid")), 1),
        (FunctionOp(MS, "QLinearLeakyRelu", _unary("LeakyRelu", alpha=0.01)), 1),
        (FunctionOp(MS, "QLinearAveragePool", _pool("AveragePool", ("auto_pad", "ceil_mode", "count_include_pad",
                                                                     "kernel_shape", "pads", "strides"))), 1),
        (FunctionOp(MS, "QLinearGlobalAveragePool", _pool("GlobalAveragePool", ())), 1),
        (FunctionOp(MS, "QLinearConcat", qlinear_concat), 1),
        (FunctionOp(MS, "QLinearSoftmax", qlinear_softmax), 1),
    ]
    return ops


__all__ = ["operators"]
