"""Ops that are compositions of supported ops without an ONNX function body: LRN, Col2Im,
Multinomial, com.microsoft MatMulBnb4. Each registers a FunctionOp (operators/functions.py) whose `decompose` builds the
body; FunctionExpansionPass splices it in before shape inference, so the body's kernels (pooling,
ConvTranspose, the random and scan kernels) do the work and constant parts fold.
"""

from __future__ import annotations

import itertools

import numpy as np
from onnx import TensorProto

from onyxia.operators.base import Operator
from onyxia.operators.functions import BodyBuilder, Call, Decomposition, FunctionOp

OPSET = {"": 21}  # the opset every body here is written against


def _static(call: Call, i: int, axes: range | list[int], what: str) -> list[int]:
    shape = call.shapes[i]
    dims = [shape[a] for a in axes]
    if not all(isinstance(d, int) for d in dims):
        raise call.fail(f"{what} must be static, got {dims}", i)
    return dims


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
    b = BodyBuilder(call, OPSET)
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


def col2im(call: Call) -> Decomposition:
    """Col2Im(input [N, C * prod(block), L], image_shape, block_shape): the blocks summed back
    into an image [N, C, *image_shape], as torch.nn.Fold does.

    It is a transposed convolution: the L columns form a grid of block positions, each of the
    C * prod(block) rows a (channel, tap) pair, and ConvTranspose with group C and one-hot
    weights (row c*K + t has a 1 at tap t) adds every tap to its image position."""
    image = [int(v) for v in call.require_value(1, "image_shape").reshape(-1)]
    block = [int(v) for v in call.require_value(2, "block_shape").reshape(-1)]
    n = len(image)
    if len(block) != n or n < 1 or min(block) < 1:
        raise call.fail(f"image_shape {image} and block_shape {block} must have the same length >= 1", 2)
    strides = list(call.attr("strides", [1] * n))
    dilations = list(call.attr("dilations", [1] * n))
    pads = list(call.attr("pads", [0] * 2 * n))
    if len(strides) != n or len(dilations) != n or len(pads) != 2 * n:
        raise call.fail(f"attributes 'strides', 'dilations' ({n} values) and 'pads' ({2 * n}) do not fit "
                        f"{n} spatial dims")
    extent = [d * (k - 1) + 1 for d, k in zip(dilations, block)]
    counts = [(i + pads[a] + pads[a + n] - e) // s + 1 for a, (i, e, s) in enumerate(zip(image, extent, strides))]
    shape = call.shapes[0]
    taps = int(np.prod(block))
    if len(shape) != 3 or not isinstance(shape[1], int) or shape[1] % taps:
        raise call.fail(f"input must be [N, C * {taps}, L] with a static second dim, got {list(shape)}", 0)
    if isinstance(shape[2], int) and shape[2] != int(np.prod(counts)):
        raise call.fail(f"input has {shape[2]} blocks, image_shape/block_shape/pads/strides give "
                        f"{int(np.prod(counts))}", 0)
    channels = shape[1] // taps
    weights = np.zeros((channels * taps, 1, *block), call.dtypes[0].numpy)
    for c, (t, tap) in itertools.product(range(channels), enumerate(itertools.product(*map(range, block)))):
        weights[(c * taps + t, 0, *tap)] = 1
    extra = [i - ((c - 1) * s + e - pads[a] - pads[a + n])
             for a, (i, c, s, e) in enumerate(zip(image, counts, strides, extent))]
    b = BodyBuilder(call, OPSET)
    grid = b.op("Reshape", call.input(0), b.const([0, channels * taps, *counts]))
    b.op("ConvTranspose", grid, b.const(weights, weights.dtype), out=call.output(), group=channels, strides=strides,
         dilations=dilations, pads=pads, output_padding=extra)
    return b.done()


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
    b = BodyBuilder(call, OPSET)
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
    b = BodyBuilder(call, OPSET)
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
    return [(FunctionOp("", "LRN", lrn), 1), (FunctionOp("", "Col2Im", col2im), 18),
            (FunctionOp("", "Multinomial", multinomial), 7),
            (FunctionOp("com.microsoft", "MatMulBnb4", matmul_bnb4), 1)]


__all__ = ["operators"]
