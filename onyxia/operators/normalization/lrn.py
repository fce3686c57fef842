"""LRN (local response normalization) as a composition of supported ops: a FunctionOp
(operators/functions.py) whose body averages the squares over neighbouring channels with an
AveragePool (shaders/pooling/pool.wgsl), then scales x by it. FunctionExpansionPass splices the
body in before shape inference, so constant parts fold.
"""

from __future__ import annotations

from onyxia.operators.base import Operator
from onyxia.operators.functions import BODY_OPSET, BodyBuilder, Call, Decomposition, FunctionOp


def _static(call: Call, i: int, axes: range | list[int], what: str) -> list[int]:
    shape = call.shapes[i]
    return [call.literal(shape[a], what, i) for a in axes]


def lrn(call: Call) -> Decomposition:
    """LRN: y = x / (bias + alpha / size * sum of x^2 over `size` neighbouring channels)^beta.

    The channel window is an average pool over [N, 1, C, rest] with kernel [size, 1], zero
    padding floor((size-1)/2) before and ceil((size-1)/2) after, counting the padding (the
    average times size is the sum)."""
    if len(call.shapes[0]) < 3 or not call.dtypes[0].is_float:
        raise call.fail(f"expects a float tensor [N, C, ...], got {call.dtypes[0]} of rank {len(call.shapes[0])}", 0)
    size = int(call.attr("size", 0))
    if size < 1:
        raise call.fail(f"attribute 'size' = {size} must be a positive integer")
    (channels,) = _static(call, 0, [1], "the channel axis")
    b = BodyBuilder(call, BODY_OPSET)
    x = call.input(0)
    squares = b.op("Reshape", b.op("Mul", x, x), b.const([0, 1, channels, -1]))
    before = (size - 1) // 2
    window = b.op("AveragePool", squares, kernel_shape=[size, 1], pads=[before, 0, size - 1 - before, 0],
                  count_include_pad=1)
    mean = b.op("Reshape", window, b.op("Shape", x))
    scaled = b.op("Mul", mean, b.const(float(call.attr("alpha", 1e-4)), call.dtypes[0].numpy))
    base = b.op("Add", scaled, b.const(float(call.attr("bias", 1.0)), call.dtypes[0].numpy))
    denominator = b.op("Pow", base, b.const(float(call.attr("beta", 0.75)), call.dtypes[0].numpy))
    b.op("Div", x, denominator, out=call.output())
    return b.done()


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(FunctionOp("", "LRN", lrn), 1)]


__all__ = ["lrn", "operators"]
