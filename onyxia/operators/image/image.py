"""Image operators besides Resize: GridSample and AffineGrid, DepthToSpace and SpaceToDepth.

DepthToSpace and SpaceToDepth are a reshape-transpose-reshape: one strided copy.
"""

from __future__ import annotations

import numpy as np

from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, numel, shape_str
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import contiguous_strides
from onyxia.operators.image.resize import TAPS
from onyxia.operators.indexing.indexing import plan_strided_copy
from onyxia.plan import Step


def _is_int(d: object) -> bool:
    return isinstance(d, int)


# ---- GridSample ---------------------------------------------------------------------------

GRID_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic", "cubic": "cubic"}
GRID_PADDING = ("zeros", "border", "reflection")


class GridSample(Operator):
    """GridSample (opset 16: 2-D, bilinear/nearest/bicubic; 20: 1-D to 3-D, linear/nearest/cubic),
    PyTorch's grid_sample: X [N, C, *in] sampled at the normalized coordinates of grid
    [N, *out, rank] (last axis first) -> [N, C, *out]. shaders/image/grid_sample.wgsl, one thread
    per output element; padding_mode zeros / border / reflection, align_corners."""

    op_type = "GridSample"

    def attrs(self, ctx: InferenceCtx) -> tuple[str, str]:
        mode = ctx.attr("mode", "bilinear" if ctx.opset < 20 else "linear")
        if mode not in GRID_MODES:
            raise ctx.fail(f"attribute 'mode' {mode!r} is not one of {', '.join(GRID_MODES)}")
        padding = ctx.attr("padding_mode", "zeros")
        if padding not in GRID_PADDING:
            raise ctx.fail(f"attribute 'padding_mode' {padding!r} is not one of {', '.join(GRID_PADDING)}")
        return GRID_MODES[mode], padding

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        x, grid = ctx.input_shape(0), ctx.input_shape(1)
        rank = len(x) - 2
        if not 1 <= rank <= 3:
            raise ctx.fail(f"expects [N, C, *spatial] with 1 to 3 spatial axes, got rank {len(x)}", 0)
        if len(grid) != rank + 2 or not ctx.same_dim(grid[-1], rank):
            raise ctx.fail(f"grid must be [N, *out, {rank}] for {rank} spatial axes, got {shape_str(grid)}", 1)
        if not (ctx.input_dtype(0).is_float and ctx.input_dtype(1).is_float):
            raise ctx.fail("expects float input and grid", 0)
        self.attrs(ctx)
        return [(ctx.input_dtype(0), (x[0], x[1], *grid[1:-1]))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        mode, padding = self.attrs(ctx)
        x = ctx.input_shape(0)
        rank = len(x) - 2
        total = numel(ctx.output_shape(0))
        if _is_int(total) and total == 0:
            return []
        ctx.compute_type(ctx.input_dtype(0), "input")
        taps = TAPS[mode]
        idp, ih, iw = (1,) * (3 - rank) + tuple(x[2:])
        params = {"TOTAL": total, "C": x[1], "P": numel(ctx.output_shape(0)[2:]), "ID": idp, "IH": ih, "IW": iw}
        defs = {"MODE": mode, "PADDING": padding, "ALIGN": bool(ctx.attr("align_corners", 0)), "RANK": rank,
                "TAPS": taps, "TZ": taps if rank == 3 else 1, "TY": taps if rank >= 2 else 1}
        return [ctx.dispatch("image/grid_sample.wgsl", label=f"grid_sample_{mode}", defs=defs, params=params,
                             reads={"x": ctx.input(0), "grid": ctx.input(1)}, writes={"y": ctx.output(0)},
                             workgroups=ctx.grid(total))]


class AffineGrid(Operator):
    """AffineGrid (opset 20): the sampling grid [N, *spatial, r] of an affine map theta
    [N, r, r + 1] over `size` = [N, C, *spatial] (2-D or 3-D; dims may be symbolic), in
    GridSample's normalized coordinates, last axis first."""

    op_type = "AffineGrid"

    def layout(self, ctx: InferenceCtx) -> tuple[list[Dim], int]:
        size = ctx.require_dims(1, "size")
        rank = len(size) - 2
        if rank not in (2, 3):
            raise ctx.fail(f"size must be [N, C, H, W] or [N, C, D, H, W], got {len(size)} entries", 1)
        theta = ctx.input_shape(0)
        if len(theta) != 3 or not ctx.same_shape(theta[1:], (rank, rank + 1)):
            raise ctx.fail(f"theta must be [N, {rank}, {rank + 1}] for {rank} spatial axes, got "
                           f"{shape_str(theta)}", 0)
        if not ctx.input_dtype(0).is_float:
            raise ctx.fail(f"expects float theta, got {ctx.input_dtype(0)}", 0)
        return size, rank

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        size, rank = self.layout(ctx)
        return [(ctx.input_dtype(0), (ctx.input_shape(0)[0], *size[2:], rank))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        size, rank = self.layout(ctx)
        total = numel(ctx.output_shape(0))
        if _is_int(total) and total == 0:
            return []
        ctx.compute_type(ctx.input_dtype(0), "theta")
        od, oh, ow = (1,) * (3 - rank) + tuple(size[2:])
        return [ctx.dispatch("image/affine_grid.wgsl", defs={"RANK": rank, "ALIGN": bool(ctx.attr("align_corners", 0))},
                             params={"TOTAL": total, "OD": od, "OH": oh, "OW": ow}, reads={"theta": ctx.input(0)},
                             writes={"grid": ctx.output(0)}, workgroups=ctx.grid(total))]


# ---- DepthToSpace / SpaceToDepth ------------------------------------------------------------

class DepthToSpace(Operator):
    """[N, C, H, W] -> [N, C / b², H * b, W * b]; DCR (depth-column-row, default) or CRD."""

    op_type = "DepthToSpace"

    def layout(self, ctx: InferenceCtx) -> tuple[Shape, list[int], Shape]:
        """(input viewed as 6-D, permutation, output shape)."""
        x = ctx.input_shape(0)
        if len(x) != 4:
            raise ctx.fail(f"expects a 4-D input [N, C, H, W], got rank {len(x)}", 0)
        b = int(ctx.attr("blocksize"))
        n, c, h, w = x
        if b < 1 or (_is_int(c) and c % (b * b)):
            raise ctx.fail(f"attribute 'blocksize' {b}: its square must divide the {c} channels")
        mode = ctx.attr("mode", "DCR")
        if mode == "DCR":
            view, perm = (n, b, b, c // (b * b), h, w), [0, 3, 4, 1, 5, 2]
        elif mode == "CRD":
            view, perm = (n, c // (b * b), b, b, h, w), [0, 1, 4, 2, 5, 3]
        else:
            raise ctx.fail(f"attribute 'mode' {mode!r} is not DCR or CRD")
        return view, perm, (n, c // (b * b), h * b, w * b)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        return [(ctx.input_dtype(0), self.layout(ctx)[2])]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        x = ctx.input_value(0)
        if x is None or x.dtype == object:
            return None
        view, perm, out = self.layout(ctx)
        return [np.transpose(x.reshape(view), perm).reshape(out)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        view, perm, _ = self.layout(ctx)
        strides = contiguous_strides(view)
        return plan_strided_copy(ctx, tuple(view[p] for p in perm), [strides[p] for p in perm])


class SpaceToDepth(DepthToSpace):
    """[N, C, H, W] -> [N, C * b², H / b, W / b], the inverse of DepthToSpace (DCR, or CRD from
    opset 25)."""

    op_type = "SpaceToDepth"

    def layout(self, ctx: InferenceCtx) -> tuple[Shape, list[int], Shape]:
        x = ctx.input_shape(0)
        if len(x) != 4:
            raise ctx.fail(f"expects a 4-D input [N, C, H, W], got rank {len(x)}", 0)
        b = int(ctx.attr("blocksize"))
        n, c, h, w = x
        if b < 1 or any(_is_int(d) and d % b for d in (h, w)):
            raise ctx.fail(f"attribute 'blocksize' {b} must divide the spatial dims {h} x {w}")
        mode = ctx.attr("mode", "DCR")
        if mode not in ("DCR", "CRD"):
            raise ctx.fail(f"attribute 'mode' {mode!r} is not DCR or CRD")
        perm = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
        return (n, c, h // b, b, w // b, b), perm, (n, c * b * b, h // b, w // b)


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(GridSample(), 16), (AffineGrid(), 20), (DepthToSpace(), 1), (SpaceToDepth(), 1)]
