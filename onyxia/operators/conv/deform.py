"""DeformConv (opset 19): a 2-D convolution whose taps move by learned offsets (and are scaled
by an optional mask), as torchvision's deform_conv2d.

Planned as im2col and a product: shaders/conv/deform.wgsl samples every (channel, tap) of every
output position bilinearly into a column matrix cols [N, group, CG * kH * kW, OH * OW] (one
thread per element), then the matmul planner multiplies W [group, M/group, CG * kH * kW] by it,
batched over (N, group), into y [N, M, OH, OW]; the bias is the product's epilogue (one group)
or one more element kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, shape_str
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.conv.window import int_list
from onyxia.operators.matmul.matmul import Product, plan_product
from onyxia.plan import Step

SHADER = "conv/deform.wgsl"


@dataclass(frozen=True)
class DeformSpec:
    batch: Dim
    channels: int
    height: Dim
    width: Dim
    maps: int
    group: int
    offset_group: int
    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads: tuple[int, int, int, int]
    out: tuple[Dim, Dim]

    @property
    def taps(self) -> int:
        return self.kernel[0] * self.kernel[1]


class DeformConv(Operator):
    """DeformConv: X [N, C, H, W], W [M, C/group, kH, kW], offset [N, offset_group * kH * kW * 2,
    OH, OW] (y, x per tap), optional B [M] and mask [N, offset_group * kH * kW, OH, OW]."""

    op_type = "DeformConv"

    def spec(self, ctx: InferenceCtx) -> DeformSpec:
        x, w = ctx.input_shape(0), ctx.input_shape(1)
        if len(x) != 4:
            raise ctx.fail(f"expects a 2-D image X [N, C, H, W], got {shape_str(x)}", 0)
        if len(w) != 4:
            raise ctx.fail(f"W must be a static [M, C/group, kH, kW] and C static, got W {shape_str(w)}", 1)
        w = tuple(ctx.literals(w, "W's shape", 1))
        x = (x[0], ctx.literal(x[1], "the channel axis", 0, expected=w[1] * int(ctx.attr("group", 1))), *x[2:])
        if not ctx.input_dtype(0).is_float:
            raise ctx.fail(f"expects float X, got {ctx.input_dtype(0)}", 0)
        group = int(ctx.attr("group", 1))
        offset_group = int(ctx.attr("offset_group", 1))
        c, m = x[1], w[0]
        if group < 1 or c % group or m % group or w[1] != c // group:
            raise ctx.fail(f"attribute 'group' {group} does not fit C = {c}, W {shape_str(w)}")
        if offset_group < 1 or c % offset_group:
            raise ctx.fail(f"attribute 'offset_group' {offset_group} must divide the {c} input channels")
        kernel = int_list(ctx, "kernel_shape", 2, 0) if ctx.attr("kernel_shape", None) else (w[2], w[3])
        if tuple(kernel) != (w[2], w[3]):
            raise ctx.fail(f"attribute 'kernel_shape' {list(kernel)} does not match W {shape_str(w)}")
        strides = int_list(ctx, "strides", 2, 1, minimum=1)
        dilations = int_list(ctx, "dilations", 2, 1, minimum=1)
        pads = int_list(ctx, "pads", 4, 0, minimum=0)
        out = tuple((s + pads[a] + pads[a + 2] - (k - 1) * d - 1) // st + 1
                    for a, (s, k, d, st) in enumerate(zip(x[2:], kernel, dilations, strides)))
        if any(isinstance(o, int) and o <= 0 for o in out):
            raise ctx.fail(f"the kernel {list(kernel)} (dilations {list(dilations)}, pads {list(pads)}) does not fit "
                           f"the image {shape_str(x[2:])}", 0)
        spec = DeformSpec(x[0], c, x[2], x[3], m, group, offset_group, tuple(kernel), strides, dilations,
                          tuple(pads), out)  # type: ignore[arg-type]
        want = (x[0], offset_group * spec.taps * 2, *out)
        if not ctx.same_shape(ctx.input_shape(2), want):
            raise ctx.fail(f"offset must be {shape_str(want)}, got {shape_str(ctx.input_shape(2))}", 2)
        if ctx.has_input(3) and not ctx.same_shape(ctx.input_shape(3), (m,)):
            raise ctx.fail(f"B must be [{m}], got {shape_str(ctx.input_shape(3))}", 3)
        if ctx.has_input(4):
            want = (x[0], offset_group * spec.taps, *out)
            if not ctx.same_shape(ctx.input_shape(4), want):
                raise ctx.fail(f"mask must be {shape_str(want)}, got {shape_str(ctx.input_shape(4))}", 4)
        return spec

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        spec = self.spec(ctx)
        return [(ctx.input_dtype(0), (spec.batch, spec.maps, *spec.out))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        spec = self.spec(ctx)
        mask = vals[4].astype(np.float64) if ctx.has_input(4) else None
        cols = _host_columns(spec, vals[0].astype(np.float64), vals[2].astype(np.float64), mask)
        mg = spec.maps // spec.group
        weights = vals[1].astype(np.float64).reshape(spec.group, mg, -1)
        y = np.einsum("gmk,ngkp->ngmp", weights, cols).reshape(spec.batch, spec.maps, *spec.out)
        if ctx.has_input(3):
            y = y + vals[3].astype(np.float64).reshape(1, -1, 1, 1)
        return [ctx.cast_output(y)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        spec = self.spec(ctx)
        device = ctx.compute_type(ctx.input_dtype(0), "input 0")
        p = spec.out[0] * spec.out[1]
        cg, mg = spec.channels // spec.group, spec.maps // spec.group
        k = cg * spec.taps
        total = spec.batch * spec.group * k * p
        if isinstance(total, int) and total == 0:
            return []
        cols = ctx.scratch(total, hint="deform_cols")
        has_mask = ctx.has_input(4)
        reads = {"x": ctx.input(0), "offset": ctx.input(2), **({"mask": ctx.input(4)} if has_mask else {})}
        params = {"TOTAL": total, "C": spec.channels, "CG": cg, "G": spec.group,
                  "OGC": spec.channels // spec.offset_group, "H": spec.height, "W": spec.width, "KH": spec.kernel[0],
                  "KW": spec.kernel[1], "OH": spec.out[0], "OW": spec.out[1], "SH": spec.strides[0],
                  "SW": spec.strides[1], "DH": spec.dilations[0], "DW": spec.dilations[1],
                  "PH": (spec.pads[0], "i32"), "PW": (spec.pads[1], "i32")}
        steps = [ctx.dispatch(SHADER, label="deform_im2col", reads=reads, writes={"cols": cols}, params=params,
                              defs={"STAGE": "im2col", "HAS_MASK": has_mask}, workgroups=ctx.grid(total))]
        has_bias = ctx.has_input(3)
        epilogue = has_bias and spec.group == 1
        steps += plan_product(ctx, Product(
            ctx.input(1), cols, ctx.output(0), device, m=mg, n=p, k=k, batch_a=(spec.group,),
            batch_b=(spec.batch, spec.group), batch=(spec.batch, spec.group), gemm=epilogue,
            c=ctx.input(3) if epilogue else None, c_shape=(mg, 1) if epilogue else ()))
        if has_bias and not epilogue:
            count = spec.batch * spec.maps * p
            steps.append(ctx.dispatch(SHADER, label="deform_bias", reads={"b": ctx.input(3)},
                                      writes={"y": ctx.output(0)}, params={"TOTAL": count, "M": spec.maps, "P": p},
                                      defs={"STAGE": "bias"}, workgroups=ctx.grid(count)))
        return steps


def _host_columns(spec: DeformSpec, x: np.ndarray, offset: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """cols [N, group, CG * taps, OH * OW] as the im2col kernel computes them (folding)."""
    n, c, h, w = x.shape
    (kh, kw), (oh, ow) = spec.kernel, spec.out
    taps, groups = spec.taps, spec.offset_group
    off = offset.reshape(n, groups, kh, kw, 2, oh, ow)
    base_y = (np.arange(oh) * spec.strides[0] - spec.pads[0])[None, :, None] + \
        (np.arange(kh) * spec.dilations[0])[:, None, None]
    base_x = (np.arange(ow) * spec.strides[1] - spec.pads[1])[None, None, :] + \
        (np.arange(kw) * spec.dilations[1])[:, None, None]
    cols = np.zeros((n, c, kh, kw, oh, ow))
    for ni in range(n):
        for ci in range(c):
            og = ci // (c // groups)
            y = base_y[:, None, :, :] + off[ni, og, :, :, 0]  # [kh, kw, oh, ow]
            xx = base_x[None, :, :, :] + off[ni, og, :, :, 1]
            y0, x0 = np.floor(y), np.floor(xx)
            for dy in (0, 1):
                for dx in (0, 1):
                    yi, xi = (y0 + dy).astype(np.int64), (x0 + dx).astype(np.int64)
                    inside = (yi >= 0) & (yi < h) & (xi >= 0) & (xi < w)
                    weight = np.where(dy, y - y0, 1 - (y - y0)) * np.where(dx, xx - x0, 1 - (xx - x0))
                    cols[ni, ci] += np.where(inside, weight * x[ni, ci, yi.clip(0, h - 1), xi.clip(0, w - 1)], 0.0)
            if mask is not None:
                cols[ni, ci] *= mask.reshape(n, groups, kh, kw, oh, ow)[ni, og]
    return cols.reshape(n, spec.group, (c // spec.group) * taps, oh * ow)


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(DeformConv(), 19)]
