"""Pointwise (1x1, stride 1, unpadded) convolutions as matrix products.

The conv's Select (conv.py plan_conv) offers them next to the register- and workgroup-tiled
kernels: `plan_pointwise` is the workgroup alternative (Y[n] = W @ X[n], the matmul planner's
variants), `plan_transposed_product` the chunked kernel over symbolic positions (Y^T = X^T @ W^T,
stored transposed).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from onyxia.ir.shapes import Dim, numel
from onyxia.operators.base import PlanCtx
from onyxia.operators.common import contiguous_strides
from onyxia.operators.conv.scale import ChannelScale
from onyxia.operators.conv.window import Window
from onyxia.operators.indexing.indexing import plan_strided_copy
from onyxia.operators.matmul.epilogue import Epilogue
from onyxia.operators.matmul.gemv import MAX_KCHUNK, AWindow
from onyxia.operators.matmul.matmul import Product, plan_product
from onyxia.plan import Step


class ConvSpec(Protocol):
    """What these read of conv.py's ConvSpec (which imports this module; a dataclass)."""

    batch: Dim
    channels: int
    maps: int
    group: int
    spatial: tuple[Dim, ...]
    window: Window
    transposed: bool
    w_kmajor: bool

# A 1x1 Conv over a 1x1 map (squeeze-excite) whose constant weights passes/pooled_conv.py stored
# as [C, M, 1, ...] (W^T: the row-major B the few-rows product kernels read) carries this attribute.
WEIGHTS_KC_ATTR = "onyxia_weights_kc"
PRODUCT_MAX_P = 256  # the transposed product's preferred reach (plan_conv)


def _is_int(d: object) -> bool:
    return isinstance(d, int)


def is_pointwise(spec: ConvSpec) -> bool:
    win = spec.window
    return (not spec.transposed and spec.group == 1 and all(k == 1 for k in win.kernel)
            and all(s == 1 for s in win.strides) and all(_is_int(p) and p == 0 for p in win.begin + win.end))


def plan_pointwise(ctx: PlanCtx, spec: ConvSpec, epilogue: Epilogue, x: str) -> list[Step]:
    """A 1x1 convolution over `x` is a batched matrix product, Y[n] = W[M, C] @ X[n][C, P] (+ bias
    per row): the matmul planner's tiled and decode kernels (gemv when P is small, e.g. the
    squeeze-excite convolutions over a pooled 1x1 map)."""
    has_bias = ctx.has_input(2)
    compute = ctx.compute_type(ctx.input_dtype(0), "input 0")
    if ctx.attr(WEIGHTS_KC_ATTR, 0):  # P = 1: Y[N, M] = X[N, C] @ W^T[C, M] (+ bias per column)
        return plan_product(ctx, Product(
            x, ctx.input(1), ctx.output(0), compute, m=spec.batch, n=spec.maps, k=spec.channels,
            gemm=has_bias, c=ctx.input(2) if has_bias else None, c_shape=(spec.maps,) if has_bias else (),
            epilogue=epilogue, shared_sizes=True))
    return plan_product(ctx, Product(
        ctx.input(1), x, ctx.output(0), compute, m=spec.maps, n=numel(spec.window.out), k=spec.channels,
        trans_a=spec.w_kmajor,
        batch_a=(), batch_b=(spec.batch,), batch=(spec.batch,), gemm=has_bias,
        c=ctx.input(2) if has_bias else None, c_shape=(spec.maps, 1) if has_bias else (), epilogue=epilogue))


def transposed_product_applies(spec: ConvSpec, compute: str) -> bool:
    """The pointwise conv as Y^T = X^T @ W^T fits gemv_chunked.wgsl: k-major weights ([C, M],
    row-major W^T), C and M static multiples of 4, C one pass long; P may be symbolic."""
    return (compute == "f32" and spec.w_kmajor and all(_is_int(d) and d % 4 == 0 for d in (spec.channels, spec.maps))
            and spec.channels <= MAX_KCHUNK)


def plan_transposed_product(ctx: PlanCtx, spec: ConvSpec, compute: str, epilogue: Epilogue,
                            x: str | None = None, scale: ChannelScale | None = None,
                            window: AWindow | None = None) -> list[Step]:
    """A pointwise conv over any P (image sizes are symbolic in exported models) as the chunked
    product Y^T[n] = X^T[n] @ W^T: X [C, P] a batch is A stored k-major (TRANS_A), the k-major
    weights are B [C, M] row-major, and the kernel stores Y [M, P] transposed (TRANS_Y); the
    product's static N (the maps) is what its vec4 columns need, not P. `x`: another tensor of
    the input's layout to read instead (a strided conv's subsampled input); `scale`: a gate over
    the input's channels, A's k (operators/conv/scale.py); `window`: the positions read out of
    `x` through a strided window (plan_window_product)."""
    has_bias = ctx.has_input(2)
    return plan_product(ctx, Product(
        x or ctx.input(0), ctx.input(1), ctx.output(0), compute, m=numel(spec.window.out), n=spec.maps, k=spec.channels,
        trans_a=True, trans_y=True, batch_a=(spec.batch,), batch_b=(), batch=(spec.batch,), gemm=has_bias,
        c=ctx.input(2) if has_bias else None, c_shape=(1, spec.maps) if has_bias else (), epilogue=epilogue,
        a_scale=scale, a_window=window))


def window_product_applies(spec: ConvSpec) -> bool:
    """A one-tap conv over 1-D or 2-D maps (with patch_product(spec) not None: a strided one),
    whose positions the product can read out of the input itself (plan_window_product)."""
    return numel(spec.window.kernel) == 1 and len(spec.spatial) in (1, 2)


def plan_window_product(ctx: PlanCtx, spec: ConvSpec, point: ConvSpec, compute: str, epilogue: Epilogue,
                        scale: ChannelScale | None = None) -> list[Step]:
    """A one-tap strided conv (ResNet's 1x1 stride-2 downsample shortcuts) as the transposed
    product over its output positions, each read where it lies in the input (gemv.py AWindow):
    no gathered copy of the subsampled input first (plan_patch_product). Lavapipe (Mesa 25, 2-core
    EPYC, one-conv models, both alternating, medians of 15): ResNet-18's three downsamples 0.67 /
    0.71 / 0.78 ms against 1.23 / 0.98 / 0.96 for the copy and the product; in resnet18 (profile)
    0.60 / 0.51 / 0.51 against 0.85 / 0.68 / 0.64 ms. Four scalar loads a lane and 4 k where the
    copy's product loads a vec4 (where M is a multiple of 4): the product alone runs ~10-20 %
    slower, the copy it spares cost more."""
    win = spec.window
    rowstep = win.strides[0] * spec.spatial[1] if len(spec.spatial) == 2 else 0
    window = AWindow(plane=numel(spec.spatial), ow=win.out[-1], rowstep=rowstep, colstep=win.strides[-1])
    return plan_transposed_product(ctx, point, compute, epilogue, x=ctx.input(0), scale=scale, window=window)


def patch_attrs(kernel: tuple[int, ...], attrs: dict) -> bool:
    """Whether a Conv node with these weights' `kernel` and attributes reads its input as
    non-overlapping patches (kernel = strides, several taps, no padding or dilation, group 1):
    compiler/passes/conv_weights.py then stores its weights plainly k-major, the [C * taps, M]
    matrix patch_product() multiplies."""
    rank = len(kernel)
    strides = tuple(attrs.get("strides") or (1,) * rank)
    pads = tuple(attrs.get("pads") or (0,) * (2 * rank))
    dilations = tuple(attrs.get("dilations") or (1,) * rank)
    return (int(attrs.get("group", 1)) == 1 and tuple(strides) == tuple(kernel) and numel(kernel) > 1
            and not any(pads) and all(d == 1 for d in dilations)
            and (attrs.get("auto_pad") or "NOTSET") in ("NOTSET", "VALID"))


def patch_product(spec: ConvSpec) -> ConvSpec | None:
    """A convolution whose windows do not overlap and that reads no padding, as the pointwise one
    over its patches ([N, C * taps, *out], im2col by a strided copy): ResNet's strided 1x1
    downsample shortcuts (one tap, stride > 1) and the patch embeddings of vision transformers
    and ConvNeXt (kernel = stride, weights plainly k-major: patch_attrs). None for any other."""
    win = spec.window
    taps = numel(win.kernel)
    one_tap = taps == 1 and any(s > 1 for s in win.strides)
    patches = (taps > 1 and win.strides == win.kernel and all(d == 1 for d in win.dilations)
               and spec.w_strip in (0, spec.mg))
    if (spec.transposed or spec.group != 1 or not (one_tap or patches)
            or not all(_is_int(p) and p == 0 for p in win.begin + win.end)):
        return None
    rank = len(win.out)
    unit = (1,) * rank
    return dataclasses.replace(spec, channels=spec.channels * taps, spatial=win.out,  # type: ignore[type-var]
                               window=Window(unit, unit, unit, (0,) * rank, (0,) * rank, win.out))


def plan_patch_product(ctx: PlanCtx, spec: ConvSpec, point: ConvSpec, compute: str,
                       epilogue: Epilogue, x: str) -> list[Step]:
    """`spec` as its patches (`point` = patch_product(spec)) gathered by a strided copy into a
    scratch [N, C, *kernel, *out] (the weights' k order) and the transposed product over them.
    Lavapipe (Mesa 22.3, 2-core EPYC, one-conv models, median ms): ResNet-18's three stride-2 1x1
    downsample shortcuts (12.8 Mflop each) 7.1 / 7.6 / 10.1 with the register tiles, whose
    strided rows read twice the quads of a pointwise row, 3.4 / 2.5 / 2.3 as the copy and the
    product. A ViT's 16x16 patch embedding compiles as one more chunked product (Mesa 25, first
    dispatch ~0.8 s) where its register tile's unrolled 16-tap rows took ~4-6 s (CLIP's cold
    first result 6.8 -> 4.4 s). `x`: the input (or its channel-scaled copy)."""
    win = spec.window
    shape = (spec.batch, spec.channels, *win.kernel, *win.out)
    sub = ctx.scratch(numel(shape), ctx.tensor_dtype(x).name, "patches")
    inner = contiguous_strides((spec.batch, spec.channels, *spec.spatial))
    axes = inner[2:]
    strides = (*inner[:2], *(a * d for a, d in zip(axes, win.dilations)),
               *(a * s for a, s in zip(axes, win.strides)))
    return (plan_strided_copy(ctx, shape, strides, x=x, y=sub)
            + plan_transposed_product(ctx, point, compute, epilogue, x=sub))


__all__ = ["PRODUCT_MAX_P", "WEIGHTS_KC_ATTR", "is_pointwise", "plan_pointwise", "patch_attrs", "patch_product",
           "plan_patch_product", "plan_transposed_product", "plan_window_product", "transposed_product_applies",
           "window_product_applies"]
