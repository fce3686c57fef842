"""onyxia::PhaseInterleave: the four output phases of an upsampled convolution, interleaved.

compiler/passes/upsample_conv.py rewrites a nearest 2x Resize followed by a 3x3 Conv (pads 1,
stride 1) into a 2x2 Conv over the Resize's input that computes each output phase (a, b) of the
upsampled image as its own block of channels, then this op. Input Z [N, 4M, H + 1, W + 1]:
channel block p = 2a + b holds phase (a, b), phase a's rows shifted by a (the 2x2 conv pads one
row on each side, and phase 0 reads rows i - 1, i where phase 1 reads i, i + 1). Output
Y [N, M, 2H, 2W] with

    Y[n, m, 2i + a, 2j + b] = Z[n, (2a + b) M + m, i + a, j + b],

an affine view of Z: one strided copy (operators/indexing plan_strided_copy).
"""

from __future__ import annotations

import numpy as np

from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape, shape_str
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.elementwise.fused import FUSED_DOMAIN
from onyxia.operators.indexing.indexing import plan_strided_copy
from onyxia.plan import Step


def interleave(z: np.ndarray) -> np.ndarray:
    """The op on a numpy array (the fold, and the tests' reference for the layout)."""
    n, c4, h1, w1 = z.shape
    m, h, w = c4 // 4, h1 - 1, w1 - 1
    y = np.empty((n, m, 2 * h, 2 * w), z.dtype)
    for a in (0, 1):
        for b in (0, 1):
            p = 2 * a + b
            y[:, :, a::2, b::2] = z[:, p * m:(p + 1) * m, a:a + h, b:b + w]
    return y


class PhaseInterleave(Operator):
    """onyxia::PhaseInterleave: Z [N, 4M, H + 1, W + 1] -> Y [N, M, 2H, 2W] (module doc)."""

    op_type = "PhaseInterleave"
    domain = FUSED_DOMAIN

    def shapes(self, ctx: InferenceCtx) -> tuple[Shape, Shape]:
        z = ctx.input_shape(0)
        if len(z) != 4 or not isinstance(z[1], int) or z[1] % 4:
            raise ctx.fail(f"expects [N, 4M, H + 1, W + 1] with a static channel count divisible by 4, got "
                           f"{shape_str(z)}", 0)
        n, c4, h1, w1 = z
        return z, (n, c4 // 4, 2 * (h1 - 1), 2 * (w1 - 1))

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        return [(ctx.input_dtype(0), self.shapes(ctx)[1])]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        z = ctx.input_value(0)
        return None if z is None or z.dtype == object else [interleave(z)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        (n, c4, h1, w1), _ = self.shapes(ctx)
        m, h, w = c4 // 4, h1 - 1, w1 - 1
        plane = h1 * w1
        # Y viewed as [N, M, H, 2 (a), W, 2 (b)], each index's step through Z
        view = (n, m, h, 2, w, 2)
        strides = (c4 * plane, plane, w1, 2 * m * plane + w1, 1, m * plane + 1)
        return plan_strided_copy(ctx, view, strides)


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(PhaseInterleave(), 1)]
