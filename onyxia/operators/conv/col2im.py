"""Col2Im as a composition of supported ops: a FunctionOp (operators/functions.py) whose body is
a grouped ConvTranspose with one-hot weights (the conv family's kernels). FunctionExpansionPass
splices the body in before shape inference, so the constant weights fold.
"""

from __future__ import annotations

import itertools

import numpy as np

from onyxia.operators.base import Operator
from onyxia.operators.functions import BODY_OPSET, BodyBuilder, Call, Decomposition, FunctionOp


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
    if len(shape) != 3:
        raise call.fail(f"input must be [N, C * {taps}, L] with a static second dim, got {list(shape)}", 0)
    shape = (shape[0], call.literal(shape[1], "the second dim", 0), shape[2])
    if shape[1] % taps:
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
    b = BodyBuilder(call, BODY_OPSET)
    grid = b.op("Reshape", call.input(0), b.const([0, channels * taps, *counts]))
    b.op("ConvTranspose", grid, b.const(weights, weights.dtype), out=call.output(), group=channels, strides=strides,
         dilations=dilations, pads=pads, output_padding=extra)
    return b.done()


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(FunctionOp("", "Col2Im", col2im), 18)]


__all__ = ["col2im", "operators"]
