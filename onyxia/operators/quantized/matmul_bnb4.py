"""com.microsoft MatMulBnb4 as a composition of supported ops: a FunctionOp
(operators/functions.py) whose body dequantizes the 4-bit weight (folded at compile time when it
is constant) and multiplies with a float MatMul (the matmul family's kernels).
FunctionExpansionPass splices the body in before shape inference.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onyxia.operators.base import Operator
from onyxia.operators.functions import BODY_OPSET, BodyBuilder, Call, Decomposition, FunctionOp

# MatMulBnb4's 4-bit codes (bitsandbytes' FP4 with bias 3, and NormalFloat4), quant_type 0 and 1.
BNB4_CODES = {
    0: np.array([0.0, 0.0052083333, 0.6666666667, 1.0, 0.3333333333, 0.5, 0.1666666667, 0.25,
                 -0.0, -0.0052083333, -0.6666666667, -1.0, -0.3333333333, -0.5, -0.1666666667, -0.25], np.float32),
    1: np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                 -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                 0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                 0.7229568362236023, 1.0], np.float32),
}


def matmul_bnb4(call: Call) -> Decomposition:
    """com.microsoft MatMulBnb4(A [..., K], B uint8 [ceil(N K / 2)], absmax [ceil(N K / block)]):
    A times a [K, N] weight that onnxruntime's MatMulBnb4Quantizer (transformers.js' "bnb4"
    files) stored transposed: element j of the flattened [N, K] is code c (the high nibble of
    byte j / 2 first) of the FP4 or NF4 table times its block's absmax, rounded to A's dtype.

    The weight is dequantized by the body (folded at compile time when B and absmax are
    constant, as the quantizer writes them): a float MatMul then does the product."""
    k, n, block, kind = (int(call.attr(a, -1)) for a in ("K", "N", "block_size", "quant_type"))
    if k < 1 or n < 1 or block < 2 or block % 2 or kind not in BNB4_CODES:
        raise call.fail(f"attributes K = {k}, N = {n}, block_size = {block} (even, >= 2) and quant_type = {kind} "
                        "(0: FP4, 1: NF4) are required")
    a_dtype, a_shape = call.dtypes[0], call.shapes[0]
    if a_dtype is None or not a_dtype.is_float or not a_shape or (isinstance(a_shape[-1], int) and a_shape[-1] != k):
        raise call.fail(f"expects a float A [..., K = {k}], got {a_dtype} {a_shape}", 0)
    size, blocks = n * k, -(-n * k // block)
    for i, count, what in ((1, (size + 1) // 2, "B (two codes a byte)"), (2, blocks, "absmax (one per block)")):
        shape = call.shapes[i] if call.has(i) else None
        if shape is None or (all(isinstance(d, int) for d in shape) and int(np.prod(shape)) != count):
            raise call.fail(f"{what} must hold {count} elements for N = {n}, K = {k}, block_size = {block}, "
                            f"got shape {shape}", i)
    b = BodyBuilder(call, BODY_OPSET)
    packed = call.input(1)
    high = b.op("BitShift", packed, b.const(4, np.uint8), direction="RIGHT")
    low = b.op("BitwiseAnd", packed, b.const(15, np.uint8))
    pairs = b.op("Concat", b.op("Unsqueeze", high, b.const([1])), b.op("Unsqueeze", low, b.const([1])), axis=1)
    codes = b.op("Cast", b.op("Reshape", pairs, b.const([-1])), to=TensorProto.INT32)
    if blocks * block > 2 * ((size + 1) // 2):  # whole blocks (zero codes past N K)
        codes = b.op("Pad", codes, b.const([0, blocks * block - 2 * ((size + 1) // 2)]))
    values = b.op("Reshape", b.op("Gather", b.const(BNB4_CODES[kind], np.float32), codes), b.const([blocks, block]))
    scales = b.op("Unsqueeze", b.op("Cast", call.input(2), to=TensorProto.FLOAT), b.const([1]))
    flat = b.op("Reshape", b.op("Mul", values, scales), b.const([-1]))
    weight = b.op("Slice", flat, b.const([0]), b.const([size]))
    if a_dtype.onnx != TensorProto.FLOAT:
        weight = b.op("Cast", weight, to=a_dtype.onnx)
    transposed = b.op("Transpose", b.op("Reshape", weight, b.const([n, k])), perm=[1, 0])
    b.op("MatMul", call.input(0), transposed, out=call.output())
    return b.done()


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(FunctionOp("com.microsoft", "MatMulBnb4", matmul_bnb4), 1)]


__all__ = ["BNB4_CODES", "matmul_bnb4", "operators"]
