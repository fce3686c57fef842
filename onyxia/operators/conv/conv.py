"""Conv and ConvTranspose (1-D, 2-D and 3-D) over the window geometry of operators/conv/window.py.

A float Conv is one tuned Select (plan_conv): the register-tiled kernels of
operators/conv/cpu.py (no shared memory, no barriers; preferred on a CPU-type adapter such as
lavapipe) and the workgroup-tiled kernels below (everything else, and ConvTranspose and integer
convolutions alone). Every kernel applies a fused elementwise epilogue where it stores, and reads
the weights k-major where compiler/passes/conv_weights.py stored them so (def W_KMAJOR).

The workgroup-tiled kernels share one patch addressing (shaders/conv/window.wgsl):

- `conv/conv_gemm.wgsl`, an implicit GEMM: per group, Y[MG, N*P] = W[MG, K] x patches[K, N*P]
  with K = C/group * kernel size and P the output's spatial size. The patch matrix is never
  stored; each tile of it is gathered from the input into shared memory (im2col on the fly)
  and multiplied with register blocking as in matmul/gemm.wgsl.
- `conv/conv_direct.wgsl`, one thread per output element, for products too thin to tile:
  depthwise and other convolutions with few channels per group (and a K short enough for one
  invocation to walk).

A reduction K longer than gemm_variants.TILED_KCHUNK is split: partial sums per K range, added
with the bias by `matmul/splitk.wgsl` (lavapipe stops an invocation's loops after ~65,535).

Every spatial rank is computed as 3-D with leading unit axes (static: the compiler drops them).
Batch and spatial dims may be symbolic; they reach the kernels as params. Kernel shape,
strides, pads, dilations and group are attributes and static. ConvTranspose uses the same
kernels with the gather form of the transposed convolution: output position o takes input
position i wherever o + pad = i * stride + tap * dilation.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np

from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, numel, shape_str
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import ceil_div
from onyxia.operators.conv.cpu import (
    KMAJOR_ATTR,
    STRIP_ATTR,
    from_kmajor,
    plan_register,
    register_applies,
    register_tiles,
)
from onyxia.operators.conv.depthwise import (
    DW_TILES,
    PREFERRED_TAPS,
    WALK_MAX_QUADS,
    WALK_MIN_WIDTH,
    WALK_ROWS,
    depthwise_applies,
    plan_depthwise,
    plan_walk,
    walk_applies,
)
from onyxia.operators.conv.pointwise import (
    PRODUCT_MAX_P,
    WEIGHTS_KC_ATTR,
    is_pointwise,
    patch_product,
    plan_patch_product,
    plan_pointwise,
    plan_transposed_product,
    plan_window_product,
    transposed_product_applies,
    window_product_applies,
)
from onyxia.operators.conv.scale import CHANNEL_SCALE_ATTR, channel_scale, plan_scaled_input
from onyxia.operators.conv.window import (
    MAX_SPATIAL,
    Window,
    auto_pad_of,
    int_list,
    padded_windows,
    window_of,
    window_params,
)
from onyxia.operators.matmul.epilogue import Epilogue
from onyxia.operators.matmul.gemm_variants import BK, SCRATCH_DTYPE, TILED_KCHUNK, k_splits, plan_finish
from onyxia.plan import ALWAYS, NEVER, Step, adapter, at_least, at_most

# Below these many output channels per group or products per output, a tile would be mostly
# idle: the direct kernel (one thread per output) is faster.
MIN_GEMM_ROWS = 8
MIN_GEMM_K = 8
SMALL_GRID = 32  # prefer a smaller column tile until there are this many workgroups
# The direct kernel walks all of K in one invocation (lavapipe stops an invocation's loops after
# ~65,535 iterations): a longer reduction takes the GEMM kernel, which splits K.
DIRECT_MAX_K = 16384


def _is_int(d: object) -> bool:
    return isinstance(d, int)


# ---- Conv / ConvTranspose -------------------------------------------------------------------

@dataclass(frozen=True)
class ConvSpec:
    batch: Dim
    channels: int  # input channels C
    maps: int  # output channels M
    group: int
    spatial: tuple[Dim, ...]
    window: Window
    transposed: bool
    w_kmajor: bool = False  # weights stored k-major (operators/conv/cpu.py to_kmajor)
    w_strip: int = 0  # ... in strips of this many output channels (0: MG, one strip)

    @property
    def cg(self) -> int:
        return self.channels // self.group

    @property
    def mg(self) -> int:
        return self.maps // self.group

    @property
    def out_shape(self) -> Shape:
        return (self.batch, self.maps, *self.window.out)


class Conv(Operator):
    """Conv: X [N, C, *spatial], W [M, C/group, *kernel], optional B [M]."""

    op_type = "Conv"

    def spec(self, ctx: InferenceCtx) -> ConvSpec:
        x, w = ctx.input_shape(0), ctx.input_shape(1)
        if not 3 <= len(x) <= 2 + MAX_SPATIAL:
            raise ctx.fail(f"expects [N, C, *spatial] with 1 to {MAX_SPATIAL} spatial axes, got shape "
                           f"{shape_str(x)}", 0)
        if len(w) != len(x):
            raise ctx.fail(f"weights must have a static shape of rank {len(x)}, got {shape_str(w)}", 1)
        w = tuple(ctx.literals(w, "the weights' shape", 1))
        if ctx.attr(WEIGHTS_KC_ATTR, 0):
            w = (w[1], w[0], *w[2:])
        for i in (0, 1, 2):
            # int32: the integer convolutions ConvInteger/QLinearConv decompose to (i32 kernels)
            if ctx.has_input(i) and not (ctx.input_dtype(i).is_float or ctx.input_dtype(i).name == "int32"):
                raise ctx.fail(f"expects float tensors, got {ctx.input_dtype(i)}", i)
            if ctx.has_input(i) and ctx.input_dtype(i).is_float != ctx.input_dtype(0).is_float:
                raise ctx.fail(f"dtype {ctx.input_dtype(i)} does not match input 0's {ctx.input_dtype(0)}", i)
        group = int(ctx.attr("group", 1))
        kernel = tuple(w[2:])
        if tuple(int_list(ctx, "kernel_shape", len(kernel), 0)) not in (kernel, (0,) * len(kernel)):
            raise ctx.fail(f"attribute 'kernel_shape' {ctx.attr('kernel_shape')} differs from the weights' "
                           f"{list(kernel)}", 1)
        # The kernels bake C: a symbol given a value (num_channels) stands for its literal.
        channels = ctx.literal(x[1], "the channel axis", 0, expected=self.weight_channels(w, group))
        x = (x[0], channels, *x[2:])
        if group < 1 or channels % group:
            raise ctx.fail(f"attribute 'group' {group} must divide the {channels} input channels", 0)
        spec = self.geometry(ctx, x, w, group, kernel)
        if ctx.attr(KMAJOR_ATTR, 0):
            strip = int(ctx.attr(STRIP_ATTR, 0)) or spec.mg
            if spec.mg % strip or strip % 4 and strip != spec.mg:
                raise ctx.fail(f"attribute '{STRIP_ATTR}' {strip} does not cut {spec.mg} channels per group into "
                               "strips of a multiple of 4")
            spec = dataclasses.replace(spec, w_kmajor=True, w_strip=strip)
        if ctx.has_input(2) and not ctx.same_shape(ctx.input_shape(2), (spec.maps,)):
            raise ctx.fail(f"bias must have shape [{spec.maps}], got {shape_str(ctx.input_shape(2))}", 2)
        channel_scale(ctx, x, channels)  # its checks
        return spec

    @staticmethod
    def weight_channels(w: Shape, group: int) -> Dim:
        """The input channels the weights take."""
        return w[1] * group

    def geometry(self, ctx: InferenceCtx, x: Shape, w: Shape, group: int, kernel: tuple[int, ...]) -> ConvSpec:
        if w[1] * group != x[1]:
            raise ctx.fail(f"weights {shape_str(w)} need C/group = {x[1]}/{group} input channels per group", 1)
        if w[0] % group:
            raise ctx.fail(f"attribute 'group' {group} must divide the {w[0]} output channels", 1)
        return ConvSpec(x[0], x[1], w[0], group, tuple(x[2:]), window_of(ctx, tuple(x[2:]), kernel), False)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        return [(ctx.input_dtype(0), self.spec(ctx).out_shape)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        spec = self.spec(ctx)
        x, w = vals[0].astype(np.float64), vals[1].astype(np.float64)
        if ctx.attr(CHANNEL_SCALE_ATTR, 0):
            x = x * vals[int(ctx.attr(CHANNEL_SCALE_ATTR))]
        if ctx.attr(WEIGHTS_KC_ATTR, 0):
            w = w.swapaxes(0, 1)
        elif spec.w_kmajor:
            w = from_kmajor(w, spec.group, spec.w_strip)
        y = self.fold_values(spec, x, w)
        if ctx.has_input(2):
            y += vals[2].reshape((1, -1) + (1,) * len(spec.spatial))
        return [ctx.cast_output(y)]

    @staticmethod
    def fold_values(spec: ConvSpec, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        n = len(spec.spatial)
        windows = padded_windows(x, spec.window, 0.0)  # [N, C, *out, *kernel]
        axes, kern = "abc"[:n], "xyz"[:n]
        parts = []
        for g in range(spec.group):
            xs = windows[:, g * spec.cg:(g + 1) * spec.cg]
            ws = w[g * spec.mg:(g + 1) * spec.mg]
            parts.append(np.einsum(f"nc{axes}{kern},mc{kern}->nm{axes}", xs, ws))
        return np.concatenate(parts, axis=1)

    def plan(self, ctx: PlanCtx) -> list[Step]:
        return plan_conv(ctx, self.spec(ctx), self.epilogue(ctx))

    def epilogue(self, ctx: PlanCtx) -> Epilogue:
        """Fused elementwise ops after the convolution (operators/conv/fused.py): none here."""
        return Epilogue()


class ConvTranspose(Conv):
    """ConvTranspose: X [N, C, *spatial], W [C, M/group, *kernel], optional B [M].

    Output size from pads and output_padding, or from `output_shape` (pads then derived as the
    ONNX spec says: SAME_UPPER puts the odd pad at the end, anything else at the beginning).
    """

    op_type = "ConvTranspose"

    @staticmethod
    def weight_channels(w: Shape, group: int) -> Dim:
        return w[0]

    def geometry(self, ctx: InferenceCtx, x: Shape, w: Shape, group: int, kernel: tuple[int, ...]) -> ConvSpec:
        if w[0] != x[1]:
            raise ctx.fail(f"weights {shape_str(w)} need {x[1]} input channels on axis 0", 1)
        n = len(kernel)
        spatial = tuple(x[2:])
        strides = int_list(ctx, "strides", n, 1, minimum=1)
        dilations = int_list(ctx, "dilations", n, 1, minimum=1)
        extra = int_list(ctx, "output_padding", n, 0, minimum=0)
        extent = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilations))
        # Size without any pads: every input position's full footprint.
        full = [s * (i - 1) + e + op for s, i, e, op in zip(strides, spatial, extent, extra)]
        mode = auto_pad_of(ctx)
        shape_attr = ctx.attr("output_shape", None)
        if shape_attr:
            target = [int(v) for v in shape_attr][-n:]
            if len(target) != n:
                raise ctx.fail(f"attribute 'output_shape' {list(shape_attr)} needs {n} spatial sizes")
        elif mode in ("SAME_UPPER", "SAME_LOWER"):
            target = [i * s for i, s in zip(spatial, strides)]
        else:
            target = None
        if target is None:
            pads = (0,) * 2 * n if mode == "VALID" else int_list(ctx, "pads", 2 * n, 0)
            begin, end = list(pads[:n]), list(pads[n:])
            out = [f - b - e for f, b, e in zip(full, begin, end)]
        else:
            begin, end = [], []
            for f, t in zip(full, target):
                total = f - t  # negative: the output extends past the last tap (zeros and bias there)
                small = total // 2
                begin.append(small if mode == "SAME_UPPER" else total - small)
                end.append(total - begin[-1])
            out = target
        for axis, o in enumerate(out):
            if _is_int(o) and o <= 0:
                raise ctx.fail(f"output size {o} on spatial axis {axis} is not positive (pads too large)")
        win = Window(tuple(kernel), strides, dilations, tuple(begin), tuple(end), tuple(out))
        return ConvSpec(x[0], x[1], w[1] * group, group, spatial, win, True)

    @staticmethod
    def fold_values(spec: ConvSpec, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        win = spec.window
        # Scatter form on a canvas big enough for every tap and the output window (which a
        # negative pad may start before the first tap), then crop the pads.
        full = [s * (i - 1) + e for s, i, e in zip(win.strides, spec.spatial, win.extent)]
        lead = [max(-b, 0) for b in win.begin]
        size = [max(f, b + o) + a for f, b, o, a in zip(full, win.begin, win.out, lead)]
        canvas = np.zeros((x.shape[0], spec.maps, *size))
        for g in range(spec.group):
            xs = x[:, g * spec.cg:(g + 1) * spec.cg]
            ws = w[g * spec.cg:(g + 1) * spec.cg]  # [CG, MG, *kernel]
            for taps in itertools.product(*(range(k) for k in win.kernel)):
                contrib = np.einsum("nc...,cm->nm...", xs, ws[(slice(None), slice(None)) + taps])
                where = tuple(slice(a + t * d, a + t * d + s * (i - 1) + 1, s)
                              for a, t, d, s, i in zip(lead, taps, win.dilations, win.strides, spec.spatial))
                canvas[(slice(None), slice(g * spec.mg, (g + 1) * spec.mg)) + where] += contrib
        crop = tuple(slice(a + b, a + b + o) for a, b, o in zip(lead, win.begin, win.out))
        return canvas[(slice(None), slice(None)) + crop]


def plan_conv(ctx: PlanCtx, spec: ConvSpec, epilogue: Epilogue = Epilogue()) -> list[Step]:
    """The conv's steps: one tuned Select of the register-tiled kernels (operators/conv/cpu.py,
    preferred on a CPU-type adapter) and the workgroup-tiled ones (GPU-type adapters), each
    applying `epilogue` (fused elementwise ops over the output, f32 compute) wherever it stores
    the output: the kernel itself or the split-K finish."""
    compute = ctx.compute_type(ctx.input_dtype(0), "input 0")
    if epilogue and compute != "f32":
        raise ctx.fail(f"a fused epilogue needs f32 compute, got {compute}")
    win = spec.window
    p = numel(win.out)
    if _is_int(spec.batch * p) and spec.batch * p == 0:
        return []
    scale = channel_scale(ctx, (spec.batch, spec.channels, *spec.spatial), spec.channels)
    # the kernels that do not read a channel scale (operators/conv/scale.py) run x * scale first
    prelude, scaled = plan_scaled_input(ctx) if scale is not None else ([], ctx.input(0))
    workgroup = prelude + _plan_workgroup(ctx, spec, compute, epilogue, scaled)
    if ctx.attr(WEIGHTS_KC_ATTR, 0):  # a pooled map's W^T (passes/pooled_conv.py): a matrix product
        return workgroup
    bias = ctx.input(2) if ctx.has_input(2) else None
    pointwise = is_pointwise(spec)
    # A pointwise conv is one row of P positions: no padding lanes at a row's end.
    spatial, flat = ((p,), Window((1,), (1,), (1,), (0,), (0,), (p,))) if pointwise else (spec.spatial, win)
    alternatives = []
    row4 = at_most(spatial[-1] % 4, 0) if _is_int(flat.begin[-1]) else NEVER
    tiles = register_tiles(spec.mg, flat.kernel[-1], flat.out[-1], flat.strides[-1], len(spatial))
    # the 8-wide segment with the fewest channel rows (8x8; 1x8 depthwise)
    narrow = min(((rm, rp) for rm, rp, _, _ in tiles if rp == 8), default=None)
    # Where the input's element count is a multiple of 4 (its channels are), rows of any width
    # and pad are read as vec4s ("q": the kernel picks each element out of the vec4s that cover
    # its span), as fast as the aligned form where that applies (lavapipe, 3x3 at 56x56 and
    # 28x28, pointwise at 112x112: within 2 %) and faster than one element a load elsewhere (32x8
    # tile: 256 -> 256 at 14x14 12.4 -> 11.9 ms, stride 2 from 14x14 6.8 -> 5.9; wav2vec2's 512
    # -> 512 k3 s2 Conv1d over 3199 frames, 8x8, 166 -> 127 ms); one kernel at every row width,
    # so a new input size needs no kernel the first size did not run (yolo_style 320x320 ->
    # 256x416 waited 440 ms for two). Else aligned vec4s where rows are a multiple of 4 wide (and
    # the leading pad static), one element a load otherwise.
    if spec.channels % 4 == 0:
        modes = [("q", *t) for t in tiles]
    else:
        modes = [("4", *t) for t in tiles] + [("", *t) for t in tiles]
    for mode, rm, rp, lo, hi in modes:
        x4 = mode == "4"
        guard = row4 if x4 else ALWAYS
        if register_applies(compute, spec.transposed, flat, rm, rp, spec.w_kmajor) and not guard.never:
            steps = plan_register(ctx, x=ctx.input(0), w=ctx.input(1), bias=bias, y=ctx.output(0), batch=spec.batch,
                                  channels=spec.channels, maps=spec.maps, group=spec.group, spatial=spatial,
                                  win=flat, rm=rm, rp=rp, kmajor=spec.w_kmajor, x4=x4, epilogue=epilogue,
                                  eow=win.out[-1], xa=mode == "q", strip=spec.w_strip, scale=scale)
            # preferred on a CPU-type adapter where the output row is lo to hi positions wide;
            # a strided 1-D row of several taps not read as aligned vec4s takes `narrow` at any
            # width (wav2vec2's 512 -> 512 k3 s2 Conv1d over 1599 positions, lavapipe: 8x8 180
            # ms, 16x8 454 ms, 8x16 473 ms; a 2-D one keeps 32x8: 256 -> 512 s2 from 14x14
            # 10.8 ms, 8x8 16.2); one tap: cpu.py STRIDED_POINT_TILES
            prefer = adapter("cpu")
            if not x4 and flat.strides[-1] > 1 and flat.kernel[-1] > 1 and len(spatial) == 1:
                lo, hi = (None, None) if (rm, rp) == narrow else (1, 0)
            prefer &= at_least(flat.out[-1], lo) if lo is not None else ALWAYS
            prefer &= at_most(flat.out[-1], hi) if hi is not None else ALWAYS
            alternatives.append((f"register{mode}/{rm}x{rp}", steps, guard, prefer))
    rows = []  # depthwise over row tiles (operators/conv/depthwise.py): first where it applies
    for x4, (rh, rp) in [(x4, t) for x4 in (True, False) for t in DW_TILES]:
        guard = row4 if x4 else ALWAYS
        if not pointwise and not guard.never and depthwise_applies(compute, spec.transposed, spec.spatial, win,
                                                                   spec.mg, spec.cg, spec.channels, rh, rp):
            steps = prelude + plan_depthwise(ctx, x=scaled, w=ctx.input(1), bias=bias, y=ctx.output(0),
                                             batch=spec.batch, channels=spec.channels, spatial=spec.spatial, win=win,
                                             rh=rh, rp=rp, x4=x4, epilogue=epilogue)
            # preferred for 3x3 over rows more than 8 wide (operators/conv/depthwise.py has the
            # figures); the tuner may take it elsewhere
            prefer = adapter("cpu") & at_least(win.out[-1], 9) if numel(win.kernel) <= PREFERRED_TAPS else NEVER
            rows.append((f"rows{'4' if x4 else ''}/{rh}x{rp}", steps, guard, prefer))
    walks = []  # depthwise walking output rows (operators/conv/depthwise.py plan_walk)
    floats = all(ctx.tensor_dtype(t).name == "float32" for t in (ctx.input(0), ctx.output(0)))
    in_store = not epilogue or bool(epilogue.in_store(ctx, ctx.output(0), {"T": "f32"}))
    if (not pointwise and floats and not row4.never
            and walk_applies(compute, spec.transposed, spec.spatial, win, spec.mg, spec.cg, spec.channels, in_store)):
        walkable = row4 & at_most(win.out[-1] % 4, 0) & at_most(win.out[-1], 4 * WALK_MAX_QUADS)
        for rh in WALK_ROWS:
            steps = prelude + plan_walk(ctx, x=scaled, w=ctx.input(1), bias=bias, y=ctx.output(0), batch=spec.batch,
                                        channels=spec.channels, spatial=spec.spatial, win=win, rh=rh,
                                        epilogue=epilogue)
            # preferred on a CPU-type adapter over rows at least WALK_MIN_WIDTH wide, 2 rows an
            # invocation at stride 1, 1 at stride 2 (operators/conv/depthwise.py has the figures)
            prefer = (adapter("cpu") & at_least(win.out[-1], WALK_MIN_WIDTH)
                      if rh == (2 if win.strides[0] == 1 else 1) else NEVER)
            walks.append((f"walk/{rh}", steps, walkable, prefer))
    alternatives = walks + rows + alternatives
    if pointwise and transposed_product_applies(spec, compute):
        # preferred on a CPU-type adapter up to PRODUCT_MAX_P positions (lavapipe, 1x1 convs of
        # MobileNetV3: 960 -> 160 at 7x7 1.1 ms vs 2.4 for the best register tile, 480 -> 112 at
        # 14x14 1.5 vs 2.2; at 28x28 about even; 16 -> 64 at 112x112 4.5 vs 2.5)
        prefer = adapter("cpu") & at_most(p, PRODUCT_MAX_P)
        alternatives.insert(0, ("product", plan_transposed_product(ctx, spec, compute, epilogue, scale=scale),
                                ALWAYS, prefer))
    point = patch_product(spec)
    if point is not None and transposed_product_applies(point, compute):
        window = window_product_applies(spec)
        # preferred on a CPU-type adapter at any size (plan_patch_product has the figures),
        # where the product cannot read the positions out of the input itself
        steps = prelude + plan_patch_product(ctx, spec, point, compute, epilogue, scaled)
        alternatives.insert(0, ("patches+product", steps, ALWAYS, NEVER if window else adapter("cpu")))
        if window:  # (plan_window_product has the figures)
            steps = plan_window_product(ctx, spec, point, compute, epilogue, scale=scale)
            alternatives.insert(0, ("window+product", steps, ALWAYS, adapter("cpu")))
    if not alternatives:
        return workgroup
    alternatives.append(("workgroup", workgroup, ALWAYS, ALWAYS))
    kind = "pointwise" if pointwise else "depthwise" if spec.mg == 1 else "direct"
    key = f"conv/{kind}/{spec.cg}x{spec.mg}x{'x'.join(map(str, win.kernel))}/s{'x'.join(map(str, win.strides))}"
    return ctx.select(key, alternatives, tuned=True, shape=(spec.batch, p))


def _plan_workgroup(ctx: PlanCtx, spec: ConvSpec, compute: str, epilogue: Epilogue, x: str) -> list[Step]:
    """The workgroup-tiled kernels (module doc) over input `x`: pointwise as a matrix product,
    else the direct kernel for thin products and the implicit GEMM (split-K past TILED_KCHUNK)."""
    win = spec.window
    p = numel(win.out)
    ncols = spec.batch * p
    k = spec.cg * numel(win.kernel)
    if is_pointwise(spec):
        return plan_pointwise(ctx, spec, epilogue, x)
    params = {**window_params(spec.spatial, win), "C": spec.channels, "M": spec.maps, "CG": spec.cg,
              "MG": spec.mg, "K": k, "NCOLS": ncols, **({"WSTRIP": spec.w_strip} if spec.w_kmajor else {})}
    has_bias = ctx.has_input(2)
    defs: dict[str, object] = {"T": compute, "TRANSPOSED": spec.transposed, "HAS_BIAS": has_bias,
                               "W_KMAJOR": spec.w_kmajor}
    reads = {"x": x, "w": ctx.input(1), **({"bias": ctx.input(2)} if has_bias else {})}
    if (spec.mg < MIN_GEMM_ROWS or k < MIN_GEMM_K) and k <= DIRECT_MAX_K:
        total = spec.batch * spec.maps * p
        e_defs, e_params, e_reads = epilogue.onto(defs, {**params, "TOTAL": total}, reads)
        return [ctx.dispatch("conv/conv_direct.wgsl", defs=e_defs, params=e_params,
                             reads=e_reads, writes={"y": ctx.output(0)}, workgroups=ctx.grid(total))]
    rm = 1 if spec.mg <= 16 else 2 if spec.mg <= 32 else 4
    # Columns: the largest tile that still leaves enough workgroups (symbolic: many columns).
    hint = ncols if _is_int(ncols) else p if _is_int(p) and p >= 1024 else None
    rn = 8
    if hint is not None:
        for rn in (8, 4, 2):
            if ceil_div(hint, 16 * rn) * ceil_div(spec.mg, 16 * rm) * spec.group >= SMALL_GRID:
                break
    row_blocks = ceil_div(spec.mg, 16 * rm)
    splits, chunk, split = k_splits(k, TILED_KCHUNK, BK)
    # Column blocks along x alone (y = 1): the runtime may fold a long x into y.
    workgroups = (ceil_div(ncols, 16 * rn), 1, row_blocks * spec.group * splits)
    gemm_defs = {**defs, "RM": rm, "RN": rn}
    if not split:
        e_defs, e_params, e_reads = epilogue.onto(gemm_defs, {**params, "ROW_BLOCKS": row_blocks}, reads)
        return [ctx.dispatch("conv/conv_gemm.wgsl", defs=e_defs, params=e_params,
                             reads=e_reads, writes={"y": ctx.output(0)}, workgroups=workgroups)]
    # A long reduction (many input channels x taps): partial sums per K range, added up with the
    # bias by the split-K pass of the matrix product (bias = Gemm's C broadcast along P).
    total = spec.batch * spec.maps * p
    partial = ctx.scratch(splits * total, SCRATCH_DTYPE[compute], "splitk")
    one = (1.0, "f32") if compute == "f32" else (1, compute)
    steps = [ctx.dispatch("conv/conv_gemm.wgsl", defs={**gemm_defs, "HAS_BIAS": False, "SPLIT": True},
                          params={**params, "ROW_BLOCKS": row_blocks, "SPLITS": splits, "KCHUNK": chunk},
                          reads={"x": x, "w": ctx.input(1)}, writes={"partial": partial},
                          workgroups=workgroups)]
    finish_params = {"ALPHA": one, "BETA": one, "C_MS": 1, "C_NS": 0} if has_bias else {}
    steps.append(plan_finish(ctx, partial=partial, total=total, splits=splits, m=spec.maps, n=p, params=finish_params,
                             defs={"T": compute, "GEMM": has_bias, "HAS_C": has_bias},
                             epilogue_reads={"c": ctx.input(2)} if has_bias else {}, y=ctx.output(0),
                             reports=None, epilogue=epilogue))
    return steps


# ---- CausalConvWithState --------------------------------------------------------------------

class CausalConvWithState(Operator):
    """Stateful causal depthwise 1-D convolution (opset 27; Mamba / Gated DeltaNet decoders).

    input [B, C, L], weight [C, 1, k], optional bias [C] and past_state [B, C, k-1] (zeros when
    absent). The sequence seen is past_state ++ input; output [B, C, L] is its valid depthwise
    convolution (optionally SiLU), present_state [B, C, k-1] its last k-1 positions. L may be
    symbolic (prefill and one-token decode share a plan). shaders/conv/causal_conv.wgsl writes
    both outputs in one dispatch.
    """

    op_type = "CausalConvWithState"

    def shapes(self, ctx: InferenceCtx) -> tuple[Shape, int]:
        x, w = ctx.input_shape(0), ctx.input_shape(1)
        if len(x) != 3:
            raise ctx.fail(f"input must be [batch, channels, length], got {shape_str(x)}", 0)
        if len(w) != 3 or not all(_is_int(d) for d in w) or w[1] != 1 or not ctx.same_dim(w[0], x[1]):
            raise ctx.fail(f"weight must be a static [channels, 1, k] = [{x[1]}, 1, k], got {shape_str(w)}", 1)
        if not ctx.input_dtype(0).is_float:
            raise ctx.fail(f"expects float input, got {ctx.input_dtype(0)}", 0)
        if ctx.attr("activation", "none") not in ("none", "silu", "swish"):
            raise ctx.fail(f"attribute 'activation' {ctx.attr('activation')!r} is not one of none, silu, swish")
        if ctx.has_input(2) and not ctx.same_shape(ctx.input_shape(2), (w[0],)):
            raise ctx.fail(f"bias must have shape [{w[0]}], got {shape_str(ctx.input_shape(2))}", 2)
        state = (x[0], x[1], w[2] - 1)
        if ctx.has_input(3) and len(ctx.input_shape(3)) != 3:
            raise ctx.fail(f"past_state must be {shape_str(state)}, got {shape_str(ctx.input_shape(3))}", 3)
        return x, w[2]

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        x, k = self.shapes(ctx)
        return [(ctx.input_dtype(0), x), (ctx.input_dtype(0), (x[0], x[1], k - 1))][:len(ctx.node.outputs)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        x, k = vals[0].astype(np.float64), vals[1].shape[2]
        past = vals[3] if ctx.has_input(3) else np.zeros(x.shape[:2] + (k - 1,))
        seq = np.concatenate([past, x], axis=2)
        windows = np.lib.stride_tricks.sliding_window_view(seq, k, axis=2)  # [B, C, L, k]
        y = np.einsum("bclk,ck->bcl", windows, vals[1][:, 0].astype(np.float64))
        if ctx.has_input(2):
            y += vals[2][None, :, None]
        if ctx.attr("activation", "none") != "none":
            y = y / (1.0 + np.exp(-y))
        outs = [ctx.cast_output(y, 0), ctx.cast_output(seq[:, :, seq.shape[2] - (k - 1):], 1)]
        return outs[:len(ctx.node.outputs)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        (b, c, length), k = self.shapes(ctx)
        ctx.compute_type(ctx.input_dtype(0), "input 0")
        outs = ctx.node.outputs
        want_y, want_state = bool(outs[0]), len(outs) > 1 and bool(outs[1])
        rows = b * c
        count = rows * ((length if want_y else 0) + ((k - 1) if want_state else 0))
        reads = {"x": ctx.input(0), "w": ctx.input(1)}
        defs: dict[str, object] = {"SILU": ctx.attr("activation", "none") != "none", "HAS_Y": want_y,
                                   "HAS_STATE": want_state}
        for role, i in (("bias", 2), ("past", 3)):
            if ctx.has_input(i):
                defs[role.upper()] = True
                reads[role] = ctx.input(i)
        writes = ({"y": ctx.output(0)} if want_y else {}) | ({"present": ctx.output(1)} if want_state else {})
        params = {"TOTAL": count, "C": c, "L": length, "KS": k, "NY": rows * length if want_y else 0}
        return [ctx.dispatch("conv/causal_conv.wgsl", defs=defs, params=params, reads=reads, writes=writes,
                             workgroups=ctx.grid(count))]


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(Conv(), 1), (ConvTranspose(), 1), (CausalConvWithState(), 27)]
