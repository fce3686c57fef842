"""Multinomial as a composition of supported ops: a FunctionOp (operators/functions.py) whose
body draws RandomUniformLike numbers (generators.py's counter-based generator) and counts the
classes below each draw on the softmax's cumulative sum. FunctionExpansionPass splices the body
in before shape inference.
"""

from __future__ import annotations

from onnx import TensorProto

from onyxia.operators.base import Operator
from onyxia.operators.functions import BODY_OPSET, BodyBuilder, Call, Decomposition, FunctionOp


def multinomial(call: Call) -> Decomposition:
    """Multinomial(input [B, C] unnormalized log-probabilities): sample_size draws per row.

    Draw j of row b is the number of classes whose cumulative probability is at most u * total,
    u uniform in [0, 1) (RandomUniformLike: seeded by `seed`, else by the node's name), which
    picks class k with probability p_k."""
    shape = call.shapes[0]
    if len(shape) != 2 or not call.dtypes[0].is_float:
        raise call.fail(f"expects float logits [batch, classes], got {call.dtypes[0]} of rank {len(shape)}", 0)
    samples = int(call.attr("sample_size", 1))
    to = int(call.attr("dtype", TensorProto.INT32))
    if to not in (TensorProto.INT32, TensorProto.INT64) or samples < 1:
        raise call.fail(f"attributes 'dtype' = {to} must be int32/int64 and 'sample_size' = {samples} positive")
    b = BodyBuilder(call, BODY_OPSET)
    x = b.op("Cast", call.input(0), to=TensorProto.FLOAT)
    cdf = b.op("CumSum", b.op("Softmax", x, axis=1), b.const(1))
    total = b.op("Slice", cdf, b.const([-1]), b.const([2**31 - 1]), b.const([1]))  # [B, 1]
    draws_shape = b.op("Concat", b.op("Shape", x, end=1), b.const([samples]), axis=0)
    seed = {} if call.attr("seed") is None else {"seed": float(call.attr("seed"))}
    uniform = b.op("RandomUniformLike", b.op("Expand", total, draws_shape), **seed)
    target = b.op("Unsqueeze", b.op("Mul", uniform, total), b.const([2]))  # [B, S, 1]
    below = b.op("LessOrEqual", b.op("Unsqueeze", cdf, b.const([1])), target)  # [B, S, C]
    count = b.op("ReduceSum", b.op("Cast", below, to=TensorProto.INT32), b.const([2]), keepdims=0)
    last = b.op("Sub", b.op("Shape", x, start=1, end=2), b.const([1]))  # rounding never picks past C - 1
    b.op("Cast", b.op("Min", count, b.op("Cast", last, to=TensorProto.INT32)), out=call.output(), to=to)
    return b.done()


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(FunctionOp("", "Multinomial", multinomial), 7)]


__all__ = ["multinomial", "operators"]
