"""FusedAttention (domain "onyxia"): the attention AttentionFusionPass finds spelled out in torch
exports (MatMul, scale, mask Add, Softmax, MatMul), run without the [B, H, S, T] scores (but by
the `products` alternative, offered where the keys are many; a CPU-type adapter prefers the
register tiles, `tiles`, where they apply).

Each operand is read in place through a view: the operand tensor (4-D, or 3-D [B, S, H * D]
whose last axis is split into heads of `split` elements) and the permutation taking the view's
axes to the logical [batch, heads, rows, head] ones. So the head-splitting Reshape + Transpose
chains the exporters write before attention, and the Transpose + Reshape after it, cost nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, shape_str
from onyxia.operators.attention.gqa import require_float
from onyxia.operators.attention.onnx_attention import _mask_strides
from onyxia.operators.attention.split_kv import (
    ATTENTION_WG,
    CPU_ATTENTION_WG,
    SPLIT_TRIPS,
    combine_splits,
    split_by,
    split_keys,
)
from onyxia.operators.base import Buf, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import ceil_div, is_zero
from onyxia.operators.elementwise.fused import FUSED_DOMAIN
from onyxia.operators.indexing.indexing import plan_strided_copy
from onyxia.operators.matmul.matmul import Product, plan_product
from onyxia.operators.normalization.rowstats import plan_rows
from onyxia.plan import ALWAYS, NEVER, Step, adapter, at_least, at_most
from onyxia.plan.select import Guard, has_trait, limit_at_least

ROWS_WG = 8  # threads (of four query rows each) per workgroup of the register kernel
FLASH_MAX_HEAD = 128  # head sizes the flash kernel takes (four slices of 8 vec4s)
# Head sizes the heuristic takes the flash kernel for (the tuner times it for any it takes):
# past 64 its four slices compile for long while the register kernel runs about as fast.
# lavapipe, vae_decoder_small at 32x32 (a head of 128, 1024 keys; first dispatch / whole model):
# Mesa 25 flash ~4.8 s / 807 ms, rows ~1.6 s / 819 ms; Mesa 22.3 ~1.1 s / 2174, ~0.4 s / 2275.
# At 64 flash is the faster one (Whisper's encoder, 1500 keys: Mesa 25 2332 vs 3264 ms, Mesa 22.3
# 5952 vs 11791; vit_tiny 179 vs 210, 402 vs 564) and compiles about as fast (Mesa 25 ~1.5 / ~1.3 s).
FLASH_PREFERRED_HEAD = 64
# keys it walks, 4 a loop trip; its other loops take a few hundred (as gqa.py's flash kernel)
FLASH_MAX_KEYS = 4 * (SPLIT_TRIPS - 1024)
# Where a CPU-type adapter prefers the products alternative (the scores as two batched
# register-tiled products around a softmax) to the flash kernel, whose 150-odd live floats an
# invocation spill: static keys from PRODUCTS_MIN_KEYS with heads from PRODUCTS_MIN_HEAD, and past
# FLASH_PREFERRED_HEAD (where the register rows kernel would run) from PRODUCTS_WIDE_MIN_KEYS.
# lavapipe, q = k = v [1, H, T, D], flash / products / rows ms, Mesa 25 | Mesa 22.3 (each
# alternative chosen in turn, medians of 5): D 64 x 6 heads, T 256: 8.1-11.4 / 7.8-9.0 |
# 18.6-27.8 / 18.0-21.0; T 512: 28.6 / 21.4 | 91.4 / 62.2; T 1024: 118 / 80 | 371 / 259;
# D 16, T 512: 6.7 / 7.9-9.7 / 12 | 25-30 / 24.5 / 44; D 32, T 512: 8.7 / 9.3 / 21 | 31-35 / 28 /
# 87; D 128, T 128: 2.5-3.4 / 2.5 / 5.3 | 5.6-8.5 / 5.6 / 22; T 256: 6.7-12 / 7.3 / 20 | 18-30 / 18
# / 86; T 512: 52 / 23 / 77 | 128 / 72 / 349. Whole models: Whisper's encoder (6 heads of 64, 1500
# static keys; flash before) Mesa 25 1860 -> 1490 ms, Mesa 22.3 5860 -> 4750; vae_decoder_small at
# 32x32 (a head of 128 over 1024 symbolic keys; rows before) Mesa 25 817 -> 765, Mesa 22.3 ~2400 ->
# ~1980. Symbolic keys take it where they are whole vec4s (its guard: the register kernels read
# them as such, Product.quads).
PRODUCTS_MIN_KEYS = 512
PRODUCTS_MIN_HEAD = 32
PRODUCTS_WIDE_MIN_KEYS = 128
_OPERANDS = ("q", "k", "v", "y")
_MASK_PARAMS = ("MT", "MB", "MH", "MS")
# The register-tile kernel (shaders/attention/sdpa_tiles.wgsl): 16 query rows a workgroup, keys
# in blocks of 32, heads of 32 or 64; preferred on a CPU-type adapter before the products and the
# flash kernel. FusedAttention's GPU time on lavapipe, forced alternately, medians of 7-9, Mesa 25
# | Mesa 22.3: Whisper's encoder (6 heads of 64 over 1500 keys) 377 vs 473 ms for the products
# | 493 vs 743 (whole encoder 913 vs 1032 | 1271 vs 1611); vit_tiny (3 heads of 64 over 197)
# 12.3 vs 19.6 for flash | 24.1 vs 27.1; q = k = v [1, 6, T, D]: D 64, T 256 3.9 vs 7.7 (flash) |
# 5.2 vs 6.0; D 32, T 256 2.1 vs 2.9 (flash) | 2.7 vs 3.1; T 1024 23.2 vs 41.9 (products), 33.0
# (flash) | 38.2 vs 70.6. Its first dispatch compiles in ~0.85 s on Mesa 25 (its row maxima and
# sums as shuffle butterflies: subgroupMax / subgroupAdd took 1.3 s), 0.34 s on Mesa 22.3.
TILES_ROWS = 16
TILES_KEYS = 32  # keys a block
TILES_HEADS = (32, 64)
# Loop trips a block takes beyond the D / 4 of its scores: the 8 lanes' values, and where the
# lanes share through workgroup memory the probabilities' 4 and the four maxima's 7 each.
TILES_BLOCK_TRIPS = 8 + 4 + 4 * 7


@dataclass(frozen=True)
class View:
    """How an operand's elements sit on logical [B, H, S, D] axes: logical axis i is axis
    perm[i] of the operand seen as 4-D (a 3-D operand's last axis split into (-1, split)). With
    `parts` > 1 the operand's head axis holds `parts` operands' heads one after another (a fused
    QKV projection's [B, S, 3 * H * D] output, timm's ViT) and this one is part `part`: its H
    heads start `part` x H heads in (offset)."""

    split: int  # 0: the operand is 4-D
    perm: tuple[int, int, int, int]
    part: int = 0
    parts: int = 1

    @staticmethod
    def of(attr: list[int]) -> View:
        parts = (int(attr[5]), int(attr[6])) if len(attr) > 5 else (0, 1)
        return View(int(attr[0]), (int(attr[1]), int(attr[2]), int(attr[3]), int(attr[4])), *parts)

    def encode(self) -> list[int]:
        return [self.split, *self.perm, *((self.part, self.parts) if self.parts > 1 else ())]

    def offset(self, shape: Shape) -> Dim:
        """Where the operand's first element is: part x its heads x the head stride."""
        if self.parts == 1:
            return 0
        return self.part * self.logical(shape)[1] * self.strides(shape)[1]

    def dims4(self, shape: Shape) -> list[Dim]:
        """The operand's shape seen as 4-D."""
        if self.split:
            return [shape[0], shape[1], shape[2] // self.split, self.split]
        return list(shape)

    def logical(self, shape: Shape) -> list[Dim]:
        dims = self.dims4(shape)
        logical = [dims[p] for p in self.perm]
        logical[1] = logical[1] // self.parts
        return logical

    def shape_of(self, logical: list[Dim]) -> Shape:
        """The operand shape holding logical dims `logical` (the output's inference)."""
        dims: list[Dim] = [0] * 4
        for i, p in enumerate(self.perm):
            dims[p] = logical[i]
        return (dims[0], dims[1], dims[2] * dims[3]) if self.split else tuple(dims)

    def strides(self, shape: Shape) -> tuple[Dim, Dim, Dim]:
        """Element strides of the logical batch, head and row axes (the head axis is contiguous)."""
        dims = self.dims4(shape)
        contiguous: list[Dim] = [1] * 4
        for i in (2, 1, 0):
            contiguous[i] = contiguous[i + 1] * dims[i + 1]
        return contiguous[self.perm[0]], contiguous[self.perm[1]], contiguous[self.perm[2]]


@dataclass(frozen=True)
class FusedAttentionSpec:
    dtype: DType
    batch: Dim
    heads: int
    seq: Dim
    keys: Dim
    head: int
    v_head: int
    views: dict[str, View]
    mask: Shape | None


class FusedAttention(Operator):
    """softmax(scale * Q K^T + mask) V over [B, H, S, D] views (see the module docstring).

    Inputs: q, k, v (k's logical layout is [B, H, T, D], not K^T), optional float mask
    broadcastable to [B, H, S, T] over its first three axes. Attributes: scale, q_view, k_view,
    v_view, y_view ([split, perm...], View). A row whose every key is masked (-inf or the float
    minimum) gives zeros, as the sdpa exports' NaN guard makes it."""

    op_type = "FusedAttention"
    domain = FUSED_DOMAIN

    def spec(self, ctx: InferenceCtx) -> FusedAttentionSpec:
        dtype = require_float(ctx, 0)
        views = {name: View.of(ctx.attr(f"{name}_view")) for name in _OPERANDS}
        dims = {}
        for i, name in enumerate(_OPERANDS[:3]):
            require_float(ctx, i)
            shape = ctx.input_shape(i)
            view = views[name]
            heads = view.dims4(shape)[view.perm[1]] if len(shape) == (3 if view.split else 4) else 0
            if (len(shape) != (3 if view.split else 4) or view.perm[3] != 3 or sorted(view.perm) != [0, 1, 2, 3]
                    or not 0 <= view.part < view.parts or not isinstance(heads, int) or heads % view.parts):
                raise ctx.fail(f"{name} of shape {shape_str(shape)} does not fit view {view.encode()}", i)
            dims[name] = view.logical(shape)
        (b, h, s, d), (kb, kh, t, kd), (vb, vh, vt, dv) = dims["q"], dims["k"], dims["v"]
        for what, x, y, i in (("batch", kb, b, 1), ("heads", kh, h, 1), ("head size", kd, d, 1),
                              ("batch", vb, b, 2), ("heads", vh, h, 2), ("keys", vt, t, 2)):
            if not ctx.same_dim(x, y):
                raise ctx.fail(f"{what} {x} differs from {y}", i)
        heads = ctx.literal(h, "the head count", 0)
        head, v_head = ctx.literal(d, "the head size", 0), ctx.literal(dv, "V's head size", 2)
        mask = None
        if ctx.has_input(3):
            mask = ctx.input_shape(3)
            if not ctx.input_dtype(3).is_float or not 1 <= len(mask) <= 4 or not ctx.same_dim(mask[-1], t):
                raise ctx.fail(f"the mask must be float [.., {t}] of rank <= 4, got {ctx.input_dtype(3)} "
                               f"{shape_str(mask)}", 3)
        return FusedAttentionSpec(dtype, b, heads, s, t, head, v_head, views, mask)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        c = self.spec(ctx)
        return [(c.dtype, c.views["y"].shape_of([c.batch, c.heads, c.seq, c.v_head]))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        c = self.spec(ctx)
        b, h, s, t, d, dv = c.batch, c.heads, c.seq, c.keys, c.head, c.v_head
        params: dict = {"H": h, "S": s, "T": t, "D": d, "DV": dv, "GROUP": 1, "P": 0,
                        "SCALE": float(ctx.attr("scale", 1.0 / math.sqrt(d))), "MT": 0, "MB": 0, "MH": 0, "MS": 0}
        shapes = [ctx.input_shape(i) for i in range(3)] + [ctx.output_shape(0)]
        for name, shape in zip(_OPERANDS, shapes):
            sb, sh, ss = c.views[name].strides(shape)
            params.update({f"{name.upper()}B": sb, f"{name.upper()}H": sh, f"{name.upper()}S": ss})
        reads: dict[str, str | Buf] = {"q": ctx.input(0), "k": ctx.input(1), "v": ctx.input(2)}
        defs: dict[str, object] = {"DIM": d}
        offsets = {f"{name.upper()}0": c.views[name].offset(shape) for name, shape in zip(_OPERANDS[:3], shapes)}
        if any(not is_zero(o) for o in offsets.values()):  # parts of one fused projection's output
            defs["OFFSETS"] = True
            params.update(offsets)
        if c.mask is not None:
            defs["MASK_FLOAT"] = True
            reads["mask"] = ctx.input(3)
            mb, mh, ms = _mask_strides(c.mask)
            params.update(MT=c.mask[-1], MB=mb, MH=mh, MS=ms)
        y = ctx.output(0)
        rows = b * h * s
        y_strides = (params["YB"], params["YH"], params["YS"])
        variants = []
        tiles = _tiles(ctx, c)
        if tiles is not None:  # 16 query rows x 32 keys a workgroup in register tiles
            variants.append(("tiles", [ctx.dispatch(
                "attention/sdpa_tiles.wgsl", label="fused_attention_tiles", defs=defs,
                params={k: v for k, v in params.items() if k not in _MASK_PARAMS + ("D", "DV", "GROUP", "P")},
                reads={"q": Buf(ctx.input(0), vector=True), "k": Buf(ctx.input(1), vector=True),
                       "v": Buf(ctx.input(2), vector=True)},
                writes={"y": Buf(y, vector=True)}, workgroups=(ceil_div(s, TILES_ROWS), h, b))], *tiles))
        products = _products(ctx, c)
        if products is not None:  # many keys: two register-tiled products around a softmax
            variants.append(("products", _plan_products(ctx, c), *products))
        if d == dv and d % 4 == 0 and d <= FLASH_MAX_HEAD:
            # Flash-style (shaders/attention/sdpa_flash.wgsl): 8 query rows of one head per
            # workgroup walk the keys once, K and V rows loaded once per workgroup where it is
            # one subgroup; preferred on a CPU-type adapter for heads of 16 or more (it computes
            # 32 columns a slice: `onyxia tune` on diffusers' UNet, heads of 8 over 1024 keys 41.1
            # ms vs 33.8 for the register kernel, heads of 16 over 256 keys 2.3 vs 4.6). One
            # trip per 4 keys: the guard bounds the keys (longer rows take the kernels below,
            # which split them). lavapipe (Mesa 22.3; whole models, alternating): Whisper's
            # encoder (6 heads of 64, 1500 keys, fused now) 1472 -> 1201 ms, vae_decoder_small
            # at 32x32 (1024 keys, a head of 128) ~780 -> ~650 ms, vit_tiny ~110 -> ~85 ms. Its
            # first dispatch compiles for 0.5 s at heads of 64, 1.1 s at 128 on Mesa 22.3 (2.4 and
            # 6.7 s on Mesa 25; 1.2 / 4.6 and 14 / 56 s before the plain path was left out where
            # the lanes are known to share).
            flash = [ctx.dispatch(
                "attention/sdpa_flash.wgsl", label="fused_attention_flash",
                defs={**defs, "CPL": math.ceil(d / 32)},
                params={k: v for k, v in params.items() if k not in ("D", "DV", "GROUP", "P")},
                reads={**reads, "q": Buf(ctx.input(0), vector=True), "k": Buf(ctx.input(1), vector=True),
                       "v": Buf(ctx.input(2), vector=True)},
                writes={"y": y}, workgroups=(h, ceil_div(s, 8), b))]
            # Under 16 where the adapter guards its loads (runtime/device.py GUARDED_LOADS_MESA):
            # the register kernel's load sites compile for seconds there and run slower.
            prefer = (adapter("cpu") if 16 <= d <= FLASH_PREFERRED_HEAD
                      else adapter("cpu") & has_trait("guarded-loads") if d < 16 else NEVER)
            variants.append(("flash", flash, at_most(t, FLASH_MAX_KEYS), prefer))
        # The register kernel (shaders/attention/sdpa_rows.wgsl): four query rows per invocation,
        # q and the accumulators in registers, for head sizes that are multiples of 4 (every
        # stride is a multiple of the head size, the views' last axis: rows start on a vec4).
        if d % 4 == 0 and dv % 4 == 0:
            # eight keys an iteration: D4 + DV4 + 12 iterations of the inner loops
            split = split_by(ctx, t, rows, dv, 8 * max(1, SPLIT_TRIPS // (d // 4 + dv // 4 + 16)))
            vec = {"q": Buf(ctx.input(0), vector=True), "k": Buf(ctx.input(1), vector=True),
                   "v": Buf(ctx.input(2), vector=True)}
            threads = b * h * ((s + 3) // 4) * (split.splits if split else 1)  # a thread per 4 rows
            # the accumulators: 4 rows x DV floats per thread, whole workgroups
            acc = ctx.scratch(ceil_div(threads, ROWS_WG) * ROWS_WG * 4 * dv, "float32", "accumulators")
            split_defs, split_params = ({"SPLIT_KV": True}, {**split.params(), "KPS": split.kps}) if split else ({}, {})
            rows_defs = {k: v for k, v in defs.items() if k != "DIM"}
            kernel = [ctx.dispatch(
                "attention/sdpa_rows.wgsl", label="fused_attention_rows",
                defs={**rows_defs, "WG_SIZE": ROWS_WG, **split_defs},
                params={**params, "N": threads, **split_params},
                reads={**reads, **vec}, writes={"y": y, "acc": Buf(acc, vector=True),
                                                **({"partial": split.partial} if split else {})},
                workgroups=ctx.grid(threads, ROWS_WG))]
            if split is not None:
                kernel += combine_splits(ctx, split, y, b, h, s, y_strides)
            variants.append(("rows", kernel, ALWAYS, adapter("cpu")))
        # The workgroup kernel (shaders/attention/sdpa.wgsl): one query row per workgroup, a key
        # per thread; 8 threads on a CPU-type adapter, 64 on a GPU.
        lanes = {wg: max(1, math.ceil(dv / wg)) for wg in (ATTENTION_WG, CPU_ATTENTION_WG)}
        split = split_keys(ctx, t, rows, dv, d, lanes)
        for label, wg, prefer in (("workgroup8", CPU_ATTENTION_WG, adapter("cpu")),
                                  ("workgroup64", ATTENTION_WG, ALWAYS)):
            kernel = [ctx.dispatch(
                "attention/sdpa.wgsl", label="fused_attention",
                defs={**defs, "ATT_WG": wg, "DPT": lanes[wg], **(split.defs() if split else {})},
                params={**params, **(split.params() if split else {})}, reads=reads,
                writes={"y": y, **({"partial": split.partial} if split else {})},
                workgroups=(h, s, b * (split.splits if split else 1)))]
            if split is not None:
                kernel += combine_splits(ctx, split, y, b, h, s, y_strides)
            variants.append((label, kernel, ALWAYS, prefer))
        return ctx.select("fused_attention", variants, tuned=True, shape=(rows, t, d))


def _tiles(ctx: PlanCtx, c: FusedAttentionSpec) -> tuple[Guard, Guard] | None:
    """(guard, prefer) of the register-tile alternative (shaders/attention/sdpa_tiles.wgsl), None
    where it is not offered: float32 operands, no mask, equal heads of 32 or 64 (an invocation owns
    one or two of the head's vec4 column groups over 8 lanes). The guard bounds the keys (the one
    loop growing with them: T / 32 blocks of D / 4 + TILES_BLOCK_TRIPS trips at most) to SPLIT_TRIPS
    trips; preferred on a CPU-type adapter."""
    d = c.head
    if not (c.mask is None and d == c.v_head and d in TILES_HEADS
            and all(ctx.input_dtype(i).name == "float32" for i in range(3)) and ctx.output_dtype(0).name == "float32"):
        return None
    return at_most(c.keys, TILES_KEYS * (SPLIT_TRIPS // (d // 4 + TILES_BLOCK_TRIPS))), adapter("cpu")


def _products(ctx: PlanCtx, c: FusedAttentionSpec) -> tuple[Guard, Guard] | None:
    """(guard, prefer) of the products alternative, None where it is not offered: float32
    operands, no mask (Softmax would give a fully masked row NaN, not zeros), equal head sizes in
    whole vec4s, keys in whole vec4s (the register kernels' N and K: checked here when static, by
    the guard when symbolic) and the [B, H, S, T] scores in one storage binding; where the CPU
    heuristic prefers it (PRODUCTS_MIN_KEYS: static keys decide here, symbolic ones in the guard)."""
    t, d = c.keys, c.head
    if not (c.mask is None and d == c.v_head and d % 4 == 0 and d >= PRODUCTS_MIN_HEAD
            and all(ctx.input_dtype(i).name == "float32" for i in range(3)) and ctx.output_dtype(0).name == "float32"):
        return None
    least = PRODUCTS_WIDE_MIN_KEYS if d > FLASH_PREFERRED_HEAD else PRODUCTS_MIN_KEYS
    fits = limit_at_least("maxStorageBufferBindingSize", 4 * c.batch * c.heads * c.seq * t)
    if isinstance(t, int):
        return (fits, adapter("cpu")) if t % 4 == 0 and t >= least else None
    return fits & at_most(t % 4, 0) & at_least(t, least), adapter("cpu")


def _plan_products(ctx: PlanCtx, c: FusedAttentionSpec) -> list[Step]:
    """softmax(scale * Q K^T) V as matmul's products: Q and V copied to contiguous [B, H, rows, D]
    (unless they are), K to [B, H, D, T]; scores = Q K^T, probabilities = Softmax(scale * scores) in place
    (rownorm.wgsl's X_SCALE: as the product's epilogue the scale cost that product ~15 %, Whisper's
    67 vs 58.5 ms on Mesa 25), then probabilities V, stored through y's view (a copy unless y is
    contiguous [B, H, S, D]). Each product is matmul's own Select."""
    b, h, s, t, d = c.batch, c.heads, c.seq, c.keys, c.head
    steps: list[Step] = []

    def heads(name: str, i: int, rows: Dim) -> str:
        """Operand i as contiguous [B, H, rows, D]: itself where it is, else a copy."""
        strides = c.views[name].strides(ctx.input_shape(i))
        offset = c.views[name].offset(ctx.input_shape(i))
        contiguous = all(isinstance(x, int) and x == y for x, y in zip(strides, (h * rows * d, rows * d, d)))
        if contiguous and is_zero(offset):
            return ctx.input(i)
        dst = ctx.scratch(b * h * rows * d, "float32", f"{name}_heads")
        steps.extend(plan_strided_copy(ctx, (b, h, rows, d), (*strides, 1), offset, x=ctx.input(i), y=dst))
        return dst

    q, v = heads("q", 0, s), heads("v", 2, t)
    kt = ctx.scratch(b * h * d * t, "float32", "k_transposed")
    kb, kh, ks = c.views["k"].strides(ctx.input_shape(1))
    steps += plan_strided_copy(ctx, (b, h, d, t), (kb, kh, 1, ks), c.views["k"].offset(ctx.input_shape(1)),
                               x=ctx.input(1), y=kt)
    scores = ctx.scratch(b * h * s * t, "float32", "scores")
    scale = float(ctx.attr("scale", 1.0 / math.sqrt(d)))
    batch = (b, h)
    steps += plan_product(ctx, Product(q, kt, scores, "f32", s, t, d, batch, batch, batch, quads=True))
    # The probabilities over the scores in place: one [B, H, S, T] buffer, not two (Whisper's
    # encoder: 51.5 MiB less at batch 1, 103 at batch 2; a new batch's first run faults in that
    # much less fresh memory).
    probabilities = scores
    steps += plan_rows(ctx, "softmax", b * h * s, t, x=scores, y=probabilities, x_scale=scale, long_rows=True)
    y_view, y_shape = c.views["y"], ctx.output_shape(0)
    direct = all(isinstance(x, int) and x == y for x, y in zip(y_view.strides(y_shape), (h * s * d, s * d, d)))
    out = ctx.output(0) if direct else ctx.scratch(b * h * s * d, "float32", "heads_out")
    steps += plan_product(ctx, Product(probabilities, v, out, "f32", s, d, t, batch, batch, batch, quads=True))
    if not direct:  # y stored through its view: iterate y's own axes, reading out's logical ones
        logical = (h * s * d, s * d, d, 1)
        steps += plan_strided_copy(ctx, y_view.dims4(y_shape), [logical[y_view.perm.index(a)] for a in range(4)],
                                   x=out, y=ctx.output(0))
    return steps


def operators() -> list[tuple[Operator, int]]:
    return [(FusedAttention(), 1)]


__all__ = ["FusedAttention", "View"]
