"""Pointwise (1x1, stride 1, unpadded) convolutions as matrix products.

The conv's Select (conv.py plan_conv) offers them next to the register- and workgroup-tiled
kernels: `plan_pointwise` is the workgroup alternative (Y[n] = W @ X[n], the matmul planner's
variants), `plan_transposed_product` the chunked kernel over symbolic positions (Y^T = X^T @ W^T,
stored transposed).
"""

from __future__ import annotations

from typing import Protocol

from onyxia.ir.shapes import Dim, numel
from onyxia.operators.base import PlanCtx
from onyxia.operators.conv.window import Window
from onyxia.operators.matmul.epilogue import Epilogue
from onyxia.operators.matmul.gemv import MAX_KCHUNK
from onyxia.operators.matmul.matmul import Product, plan_product
from onyxia.plan import Step


class ConvSpec(Protocol):
    """What these read of conv.py's ConvSpec (which imports this module)."""

    batch: Dim
    channels: int
    maps: int
    group: int
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


def plan_pointwise(ctx: PlanCtx, spec: ConvSpec, epilogue: Epilogue) -> list[Step]:
    """A 1x1 convolution is a batched matrix product, Y[n] = W[M, C] @ X[n][C, P] (+ bias per
    row): the matmul planner's tiled and decode kernels (gemv when P is small, e.g. the
    squeeze-excite convolutions over a pooled 1x1 map)."""
    has_bias = ctx.has_input(2)
    compute = ctx.compute_type(ctx.input_dtype(0), "input 0")
    if ctx.attr(WEIGHTS_KC_ATTR, 0):  # P = 1: Y[N, M] = X[N, C] @ W^T[C, M] (+ bias per column)
        return plan_product(ctx, Product(
            ctx.input(0), ctx.input(1), ctx.output(0), compute, m=spec.batch, n=spec.maps, k=spec.channels,
            gemm=has_bias, c=ctx.input(2) if has_bias else None, c_shape=(spec.maps,) if has_bias else (),
            epilogue=epilogue))
    return plan_product(ctx, Product(
        ctx.input(1), ctx.input(0), ctx.output(0), compute, m=spec.maps, n=numel(spec.window.out), k=spec.channels,
        trans_a=spec.w_kmajor,
        batch_a=(), batch_b=(spec.batch,), batch=(spec.batch,), gemm=has_bias,
        c=ctx.input(2) if has_bias else None, c_shape=(spec.maps, 1) if has_bias else (), epilogue=epilogue))


def transposed_product_applies(spec: ConvSpec, compute: str) -> bool:
    """The pointwise conv as Y^T = X^T @ W^T fits gemv_chunked.wgsl: k-major weights ([C, M],
    row-major W^T), C and M static multiples of 4, C one pass long; P may be symbolic."""
    return (compute == "f32" and spec.w_kmajor and all(_is_int(d) and d % 4 == 0 for d in (spec.channels, spec.maps))
            and spec.channels <= MAX_KCHUNK)


def plan_transposed_product(ctx: PlanCtx, spec: ConvSpec, compute: str, epilogue: Epilogue) -> list[Step]:
    """A pointwise conv over any P (image sizes are symbolic in exported models) as the chunked
    product Y^T[n] = X^T[n] @ W^T: X [C, P] a batch is A stored k-major (TRANS_A), the k-major
    weights are B [C, M] row-major, and the kernel stores Y [M, P] transposed (TRANS_Y); the
    product's static N (the maps) is what its vec4 columns need, not P."""
    has_bias = ctx.has_input(2)
    return plan_product(ctx, Product(
        ctx.input(0), ctx.input(1), ctx.output(0), compute, m=numel(spec.window.out), n=spec.maps, k=spec.channels,
        trans_a=True, trans_y=True, batch_a=(spec.batch,), batch_b=(), batch=(spec.batch,), gemm=has_bias,
        c=ctx.input(2) if has_bias else None, c_shape=(1, spec.maps) if has_bias else (), epilogue=epilogue))


__all__ = ["PRODUCT_MAX_P", "WEIGHTS_KC_ATTR", "is_pointwise", "plan_pointwise", "plan_transposed_product",
           "transposed_product_applies"]
