"""RoiAlign and MaxRoiPool: pooling each region of interest into a fixed grid of bins
(shaders/image/roi.wgsl).

How many samples a bin pools depends on the rois, data the plan does not know (RoiAlign's
adaptive sampling_ratio 0 takes ceil(roi size / output size) per axis). The kernel bounds it by
construction: only samples within a pixel of the image can count, at most NY_MAX x NX_MAX of
them per bin (2H + 5 rows for an adaptive grid, whose samples are at least half a pixel apart;
sampling_ratio rows for a fixed one; H for MaxRoiPool's pixels), and LANES threads share them.
Where a lane could still get more than LIMIT, each bin is split into CHUNKS parts, pooled into a
scratch buffer and combined by a second dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape, numel, shape_str
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import ceil_div
from onyxia.plan import Step

SHADER = "image/roi.wgsl"
LIMIT = 4096  # samples one lane pools at most
LANES = 16  # threads per bin (a fixed sampling_ratio may take fewer)


@dataclass(frozen=True)
class RoiSpec:
    mode: str  # align_avg | align_max | max_pool
    out: Shape  # [rois, C, OH, OW]
    scale: float
    ratio: int = 0
    half_pixel: bool = False


def plan_roi(ctx: PlanCtx, spec: RoiSpec, reads: dict[str, str]) -> list[Step]:
    """The pool dispatch (and, for chunked bins, the finish dispatch) reading `reads` (the
    kernel's buffer names -> tensors)."""
    x = ctx.input_shape(0)
    bins = numel(spec.out)
    if isinstance(bins, int) and bins == 0:
        return []
    ctx.compute_type(ctx.input_dtype(0), "input")
    n, c, h, w = x
    if spec.mode == "max_pool":
        ny, nx = h, w
    elif spec.ratio > 0:
        ny = nx = spec.ratio
    else:
        ny, nx = 2 * h + 5, 2 * w + 5
    lanes = LANES if spec.ratio == 0 else min(LANES, 1 << max(spec.ratio * spec.ratio - 1, 0).bit_length())
    chunks = ceil_div(ny * nx, lanes * LIMIT)
    single = isinstance(chunks, int) and chunks == 1
    params = {"ROWS": bins * chunks, "CHUNKS": chunks, "N": n, "C": c, "H": h, "W": w, "OH": spec.out[2],
              "OW": spec.out[3], "SCALE": (spec.scale, "f32"), "RATIO": spec.ratio, "NY_MAX": ny, "NX_MAX": nx}
    defs = {"MODE": spec.mode, "HALF_PIXEL": spec.half_pixel, "LANES": lanes, "RED_INNER": 1}
    target = ctx.output(0) if single else ctx.scratch(2 * bins * chunks, hint="roi_partial")
    pool = ctx.dispatch(SHADER, label=f"roi_{spec.mode}", reads=reads, writes={"y" if single else "partial": target},
                        params=params, defs={**defs, "STAGE": "pool", "SINGLE": single},
                        workgroups=ctx.grid(bins * chunks, 256 // lanes))
    if single:
        return [pool]
    finish = ctx.dispatch(SHADER, label=f"roi_{spec.mode}_finish", reads={"partial": target},
                          writes={"y": ctx.output(0)}, params={"ROWS": bins * chunks, "CHUNKS": chunks},
                          defs={**defs, "STAGE": "finish"}, workgroups=ctx.grid(bins))
    return [pool, finish]


def _image(ctx: InferenceCtx) -> Shape:
    x = ctx.input_shape(0)
    if len(x) != 4:
        raise ctx.fail(f"expects X [N, C, H, W], got {shape_str(x)}", 0)
    if not ctx.input_dtype(0).is_float:
        raise ctx.fail(f"expects float X, got {ctx.input_dtype(0)}", 0)
    return x


def _positive(ctx: InferenceCtx, name: str, default: int | None) -> int:
    value = int(ctx.attr(name, default))
    if value < 1:
        raise ctx.fail(f"attribute '{name}' must be positive, got {value}")
    return value


# ---- RoiAlign -----------------------------------------------------------------------------

class RoiAlign(Operator):
    """RoiAlign (opset 10; 16 adds coordinate_transformation_mode, default half_pixel): X
    [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R] -> [R, C, output_height,
    output_width]; each bin averages (mode avg) or takes the max (mode max, of each sample's
    largest weighted tap, as the reference does) of a grid of bilinear samples."""

    op_type = "RoiAlign"

    def spec(self, ctx: InferenceCtx) -> RoiSpec:
        x = _image(ctx)
        rois, idx = ctx.input_shape(1), ctx.input_shape(2)
        if len(rois) != 2 or not ctx.same_dim(rois[1], 4):
            raise ctx.fail(f"rois must be [num_rois, 4], got {shape_str(rois)}", 1)
        if len(idx) != 1 or not ctx.same_dim(idx[0], rois[0]):
            raise ctx.fail(f"batch_indices must be [num_rois] = [{rois[0]}], got {shape_str(idx)}", 2)
        if not ctx.input_dtype(2).is_integer:
            raise ctx.fail(f"batch_indices must be integers, got {ctx.input_dtype(2)}", 2)
        mode = ctx.attr("mode", "avg")
        if mode not in ("avg", "max"):
            raise ctx.fail(f"attribute 'mode' {mode!r} is not avg or max")
        coord = ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel")
        if coord not in ("half_pixel", "output_half_pixel"):
            raise ctx.fail(f"attribute 'coordinate_transformation_mode' {coord!r} is not half_pixel or "
                           "output_half_pixel")
        ratio = int(ctx.attr("sampling_ratio", 0))
        if ratio < 0:
            raise ctx.fail(f"attribute 'sampling_ratio' must be 0 (adaptive) or positive, got {ratio}")
        out = (rois[0], x[1], _positive(ctx, "output_height", 1), _positive(ctx, "output_width", 1))
        return RoiSpec(f"align_{mode}", out, float(ctx.attr("spatial_scale", 1.0)), ratio, coord == "half_pixel")

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        return [(ctx.input_dtype(0), self.spec(ctx).out)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        from onnx.reference.ops.op_roi_align import RoiAlign as Reference  # the spec's own algorithm

        spec = self.spec(ctx)
        y = np.empty(spec.out, np.float64).reshape(-1)
        x = vals[0].astype(np.float64)
        Reference.roi_align_forward(spec.out, x.reshape(-1), spec.scale, x.shape[2], x.shape[3], spec.ratio,
                                    vals[1].astype(np.float64).reshape(-1), 4, y, spec.mode[6:], spec.half_pixel,
                                    vals[2].reshape(-1))
        return [ctx.cast_output(y.reshape(spec.out))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        ctx.compute_type(ctx.input_dtype(2), "batch_indices")
        return plan_roi(ctx, self.spec(ctx), {"x": ctx.input(0), "rois": ctx.input(1),
                                              "batch_indices": ctx.input(2)})


# ---- MaxRoiPool ---------------------------------------------------------------------------

class MaxRoiPool(Operator):
    """MaxRoiPool (opset 1): X [N, C, H, W], rois [R, 5] (batch index, x1, y1, x2, y2) ->
    [R, C, *pooled_shape]: the roi (scaled, rounded) splits into pooled_shape bins, each the
    max of its pixels (0 for an empty bin)."""

    op_type = "MaxRoiPool"

    def spec(self, ctx: InferenceCtx) -> RoiSpec:
        x = _image(ctx)
        rois = ctx.input_shape(1)
        if len(rois) != 2 or not ctx.same_dim(rois[1], 5):
            raise ctx.fail(f"rois must be [num_rois, 5] (batch index, x1, y1, x2, y2), got {shape_str(rois)}", 1)
        pooled = [int(v) for v in ctx.attr("pooled_shape")]
        if len(pooled) != 2 or min(pooled) < 1:
            raise ctx.fail(f"attribute 'pooled_shape' must be two positive sizes, got {pooled}")
        return RoiSpec("max_pool", (rois[0], x[1], *pooled), float(ctx.attr("spatial_scale", 1.0)))

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        return [(ctx.input_dtype(0), self.spec(ctx).out)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        spec = self.spec(ctx)
        x, rois = vals[0], vals[1].astype(np.float32)
        _, _, h, w = x.shape
        y = np.zeros(spec.out, np.float64)
        for r, roi in enumerate(rois):
            n = int(roi[0])
            if not 0 <= n < x.shape[0]:
                continue
            sw, sh, ew, eh = (_round_away(np.float32(v) * np.float32(spec.scale)) for v in roi[1:])
            bh = np.float32(max(eh - sh + 1, 1)) / np.float32(spec.out[2])
            bw = np.float32(max(ew - sw + 1, 1)) / np.float32(spec.out[3])
            for ph in range(spec.out[2]):
                hs, he = _edges(ph, bh, sh, h)
                for pw in range(spec.out[3]):
                    ws, we = _edges(pw, bw, sw, w)
                    if he > hs and we > ws:
                        y[r, :, ph, pw] = x[n, :, hs:he, ws:we].max(axis=(1, 2))
        return [ctx.cast_output(y)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        return plan_roi(ctx, self.spec(ctx), {"x": ctx.input(0), "rois": ctx.input(1)})


def _round_away(v: np.float32) -> int:
    """std::round: halves away from zero."""
    return int(np.sign(v) * np.floor(abs(v) + np.float32(0.5)))


def _edges(p: int, size: np.float32, start: int, length: int) -> tuple[int, int]:
    """Bin p's [begin, end) in pixels, clamped to the image."""
    begin = int(np.floor(np.float32(p) * size)) + start
    end = int(np.ceil(np.float32(p + 1) * size)) + start
    return min(max(begin, 0), length), min(max(end, 0), length)


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(RoiAlign(), 10), (MaxRoiPool(), 1)]


__all__ = ["MaxRoiPool", "RoiAlign", "RoiSpec", "plan_roi"]
