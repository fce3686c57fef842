"""com.microsoft MatMulBnb4 (transformers.js' "bnb4" files): A times a 4-bit weight kept packed on
the device, dequantized in the kernel through the FP4 / NF4 16-entry table
(shaders/quantized/matmul_bnb4.wgsl), when K and block_size are multiples of 8 (a word of B is 8
codes of one column and one block). Otherwise it runs as a composition of supported ops (a
FunctionOp body, operators/functions.py, that FunctionExpansionPass splices in before shape
inference): the weight dequantized (folded at compile time when constant, 8x the packed bytes)
and a float MatMul.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onyxia.ir.dtypes import DType
from onyxia.ir.graph import Node
from onyxia.ir.shapes import Shape, numel, shape_str
from onyxia.operators.base import InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import ceil_div
from onyxia.operators.elementwise.fused import FUSED_DOMAIN
from onyxia.operators.functions import BODY_OPSET, BodyBuilder, Call, Decomposition, FunctionOp
from onyxia.operators.quantized.quantized import quantized_epilogue
from onyxia.plan import ALWAYS, Step, adapter, at_most

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


# Longest K the kernel takes: a thread's loop runs K / 8 times (LANES 1), below lavapipe's ~65,535.
BNB4_MAX_K = 8 * 32768


def _attrs(attributes) -> tuple[int, int, int, int]:
    return tuple(int(attributes.get(a, -1)) for a in ("K", "N", "block_size", "quant_type"))  # type: ignore[return-value]


class MatMulBnb4(FunctionOp):
    """com.microsoft MatMulBnb4: the packed kernel where K and block_size are multiples of 8 (and
    the attributes valid), else the body of `matmul_bnb4` (which also names bad attributes)."""

    op_type = "MatMulBnb4"
    domain = "com.microsoft"

    def __init__(self):
        super().__init__(self.domain, self.op_type, matmul_bnb4)

    def runs_as_function(self, node: Node) -> bool:
        k, n, block, kind = _attrs(node.attributes)
        return not (kind in BNB4_CODES and n >= 1 and 8 <= k <= BNB4_MAX_K and k % 8 == 0
                    and block >= 8 and block % 8 == 0)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        k, n, block, _ = _attrs(ctx.node.attributes)
        a = ctx.input_shape(0)
        if not ctx.input_dtype(0).is_float or not a or not ctx.same_dim(a[-1], k):
            raise ctx.fail(f"expects a float A [..., K = {k}], got {ctx.input_dtype(0)}{shape_str(a)}", 0)
        sizes = ((1, n * k // 2, "B (two codes a byte)"), (2, -(-n * k // block), "absmax (one per block)"))
        for i, count, what in sizes:
            if not ctx.same_dim(numel(ctx.input_shape(i)), count):
                raise ctx.fail(f"{what} must hold {count} elements for N = {n}, K = {k}, block_size = {block}, "
                               f"got shape {shape_str(ctx.input_shape(i))}", i)
        if ctx.input_dtype(1).name != "uint8" or not ctx.input_dtype(2).is_float:
            raise ctx.fail(f"B must be uint8 and absmax float, got {ctx.input_dtype(1)} and {ctx.input_dtype(2)}", 1)
        return [(ctx.input_dtype(0), tuple(a[:-1]) + (n,))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        k, n, block, kind = _attrs(ctx.node.attributes)
        m = numel(ctx.input_shape(0)[:-1])
        if isinstance(m, int) and m == 0:
            return []
        defs = {"QUANT": kind, "HALF_W": ctx.input_dtype(0).name == "float16"}
        epilogue_defs, epilogue_reads = quantized_epilogue(ctx)
        defs.update(epilogue_defs)

        def kernel(lanes: int, cols: int, rows: int) -> list[Step]:
            return [ctx.dispatch("quantized/matmul_bnb4.wgsl", label="matmul_bnb4",
                                 defs={**defs, "LANES": lanes, "COLS": cols, "ROWS": rows},
                                 params={"M": m, "N": n, "K": k, "BLOCK": block},
                                 reads={"a": ctx.input(0), "b": ctx.input(1), "absmax": ctx.input(2),
                                        **epilogue_reads},
                                 writes={"y": ctx.output(0)}, workgroups=(ceil_div(n, cols), 1, ceil_div(m, rows)))]

        def variants(rows: int) -> list[Step]:
            # CPU-type adapters: a thread per column streaming its words; GPU-type: 32 threads a
            # column (coalesced words), two columns a workgroup.
            return ctx.select(f"matmul_bnb4/{k}x{n}/rows{rows}",
                              [("register", kernel(1, 8, rows), ALWAYS, adapter("cpu")),
                               ("workgroup", kernel(32, 2, rows), ALWAYS, ALWAYS)], tuned=True, shape=(m, n, k))
        return ctx.select("matmul_bnb4/rows", [("rows1", variants(1), ALWAYS, at_most(m, 1)),
                                               ("rows4", variants(4), ALWAYS, ALWAYS)])


class MatMulBnb4Fused(MatMulBnb4):
    """onyxia::MatMulBnb4: a MatMulBnb4 of the packed kernel whose kernel ends with fused
    elementwise ops (inputs from 3 on: their other operands; passes/epilogue_fusion.py)."""

    domain = FUSED_DOMAIN

    def runs_as_function(self, node: Node) -> bool:
        return False  # made after function expansion, from nodes the kernel takes


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(MatMulBnb4(), 1), (MatMulBnb4Fused(), 1)]


__all__ = ["BNB4_CODES", "MatMulBnb4", "MatMulBnb4Fused", "matmul_bnb4", "operators"]
