"""Register-tiled convolution for CPU-type adapters: `conv/conv_register.wgsl`.

An invocation computes RM output channels x RP consecutive output positions of one output row,
its 8-lane workgroup 8 neighbouring row segments; the workgroup's z index picks the group and
channel block, so every weight address is uniform across the lanes and only the input's
differ (llvmpipe loads a uniform address per lane all the same: on a device with subgroups of
8 the weights of a kernel row are loaded one vec4 a lane and broadcast, BODY_SG). Per input
channel and kernel row the invocation loads the row's span once and reuses every value for
each of its RM channels and every tap along the row:
the body is generated here, unrolled over (taps, positions, channels) with named accumulators.

Shapes the variants take (all f32 compute, any float storage; not ConvTranspose):
- pointwise (1x1, stride 1, no pad, group 1): the space flattened to one row of P positions,
  so a symbolic P that is not a multiple of 4, and any batch, cost no padding lanes;
- general: any kernel, stride, dilation, pads, groups, 1-D to 3-D (conv::window's 3-D params);
- depthwise (one output channel per group): RM = 1, input reuse along the row only.

Tiles (TILES, ROW_TILES_2D, WIDE_KERNEL_TILES_2D, ROW_TILES_1D, STRIDED_ROW_TILES,
DEPTHWISE_TILES, STRIDED_POINT_TILES), each preferred for a range of output row widths, static or
symbolic (a model's usually are); the 2-D ones' figures are with them. Earlier (a tap-outer body,
in which 32 channel rows spilled once per tap), measured on lavapipe (Mesa 22.3,
2 cores shared with a load average of 7-17) in process CPU time, which a loaded machine barely
moves (wall-clock medians of one kernel varied 2-3x between runs; the FMA-peak kernel of
runtime/peaks.py runs at 26 GF/s per CPU second there), symbolic dims, ms per conv:
3x3 64->64 at 56x56 8x28 17.5, 8x16 22.7, 16x8 23.6, 8x8 25.8; 128->128 at 28x28 8x28 19.4,
16x8 26.1, 8x8 28.6; 256->256 at 14x14 8x16 30.5, 16x8 31.6, 8x8 35.0; 512->512 at 7x7 16x8
31.2, 8x8 34.4, 8x16 58.7; stride 2: 64->128 from 56x56 8x16 13.3, 8x28 15.3, 8x8 15.8; 128->256
from 28x28 8x16 15.6, 8x8 18.6, 8x28 28.7; the 7x7 stem at 224x224 8x16 22.0, 8x28 22.3, 8x8
25.8; 1x1 64->64 over 56x56 16x16 3.9, 16x8 4.1; over 7x7 16x8 4.6, 16x16 7.2; depthwise 3x3
72 x 56x56 1x28 2.1, 1x16 2.7; 5x5 120 x 28x28 1x28 1.5, 1x16 1.5, 1x8 2.5; 3x3 480 x 14x14
1x16 2.1, 1x28 2.8. A wider row segment pays where the row fills it: each weight load (uniform
across the lanes, but inside the channel loop) then serves more positions. Not faster: more
channel rows (32x8, 16x28), the lanes over 8 channel blocks of one segment instead of 8
segments (input loads uniform, weight loads per lane: 8x28 20.9 vs 20.8), fma() for the
multiply-adds. With the tap-innermost body, 32 channel rows are the fastest 2-D tile.
(Wall-clock figures had put 3x3 at a third of 1x3's rate per flop; in CPU time
it is not slower per flop than 1x3 or 1x1.) Each conv's Select offers those tiles, vec4-input
forms first where rows are a multiple of 4 wide (8x28 at 56x56: 17.5 ms vs 27.2 scalar), and
the tuner chooses among them.
Trip counts: an invocation walks at most MAX_ROWS_PER_INVOCATION (input channel, kernel row)
pairs; more input channels are split and the partial sums added by matmul/splitk.wgsl.
"""

from __future__ import annotations

import numpy as np

from onyxia.ir.shapes import Dim, numel
from onyxia.operators.base import Buf, PlanCtx
from onyxia.operators.common import ceil_div
from onyxia.operators.conv.scale import ChannelScale
from onyxia.operators.conv.window import Window, window_params
from onyxia.operators.matmul.epilogue import Epilogue
from onyxia.operators.matmul.gemm_variants import plan_finish
from onyxia.plan import Step

LANES = 8  # the kernel's workgroup: one SIMD batch of llvmpipe's 256-bit lanes
# (input channel, kernel row) pairs per invocation: its loops run at most ~3x this many times
# in all, far below lavapipe's ~65,535.
MAX_ROWS_PER_INVOCATION = 8192
# Unrolled body size bound (multiply-adds of 4 positions per kernel row): past it the shader
# compiles slowly and spills; a longer kernel row takes the other kernels.
MAX_BODY = 512


# (RM, RP, lo, hi) tiles offered, the heuristic preferring each where the output row is lo to hi
# positions wide (None: unbounded) and taking the first so preferred (the module doc has the
# measurements): a row segment that covers a wide row in few segments first.
LONG_ROW = 128  # a pointwise conv's flattened row at least this long prefers 16-wide segments
TILES = ((16, 16, LONG_ROW, None), (16, 8, None, None), (8, 8, None, None))  # pointwise (KW = 1)
# KW > 1 over 2-D (and 3-D) rows: 32 channel rows x 8 positions, the body ordered tap-innermost
# (generated): each input value loaded per lane serves 32 channels. lavapipe (Mesa 22.3, a 2-core
# EPYC, one process, executors alternating, median ms of a whole 1-conv model, symbolic dims, x
# read as vec4s): 3x3 64 -> 64 at 56x56 32x8 6.1, 16x8 8.7, 8x28 7.6 with the
# old tap-outer body (32x8 there 13.8: 128 accumulators spilled once per tap), 10.6 / 12.8 /
# 12.4 with the new body at a busier moment; 128 -> 128 at 28x28 11.5 / 13.3 / 13.2; 256 -> 256
# at 14x14 15.7 / 19.4 / 39.1; 512 -> 512 at 7x7 17.7 / 20.4 / 73.4; stride 2, 64 -> 128 from
# 56x56 4.1 / 5.4 (old body, the old heuristic's 16x8); 128 -> 128 at 128x128 118 / 149 / 172;
# 32 -> 32 at 64x64 2.4 / 2.9 / 3.3; 64x8, 32x16 and 32x12 about as fast as 32x8, 48x8 and 32x4
# slower. Kernel rows wider than 4 taps keep 16 channel rows: the 7x7 stem's 32x8 body compiled
# in 0.40 s against 0.13 s for 16x8 (Mesa 22.3, first dispatch) to run 4 % faster.
ROW_TILES_2D = ((32, 8, None, None), (16, 8, None, None), (8, 28, 17, None), (8, 8, None, None))
WIDE_KERNEL_TILES_2D = ((16, 8, None, None), (32, 8, None, None), (8, 28, 17, None), (8, 8, None, None))
WIDE_KERNEL = 4  # taps along a row past which the 2-D convs prefer 16 channel rows
# KW > 1 over 1-D rows (Whisper's and wav2vec2's Conv1d): 8x8 (the same probe, new body: 384 ->
# 384, k3, 1500 frames 8x8 50 / 86 (batch 2), 32x8 56 / 97, 8x28 68 / 120, 16x8 70 / 119; 80 ->
# 384 over 3000 frames 28.2, 28.3, 34.3, 33.2).
ROW_TILES_1D = ((8, 8, None, None), (32, 8, None, None), (8, 28, 17, None), (16, 8, None, None))
# KW > 1, 1-D, strided: a 28-wide segment reads a span twice as long (wav2vec2's 512 -> 512 k3
# s2: 8x8 169 ms, 32x8 161, 16x8 224, 8x28 1200 with the new body; plan_conv prefers the 8-wide
# segment with the fewest channel rows where the row is read one element at a time)
STRIDED_ROW_TILES = ((16, 8, None, None), (8, 16, 9, None), (8, 8, None, None))
DEPTHWISE_TILES = ((1, 28, 17, None), (1, 16, 9, None), (1, 8, None, None))
# KW = 1, strided (ResNet's downsample convs: rows not flattened): 16-wide segments over rows more
# than 8 wide (lavapipe, one process, the choices alternating, median ms: 64 -> 128 from 56x56
# 16x16 1.09, 16x8 1.23, 8x8 1.57; 128 -> 256 from 28x28 1.33, 1.78, 2.41; 256 -> 512 from 14x14,
# 7 wide: 3.13, 1.79, 2.38). The pointwise tiles' LONG_ROW and the strided-row rule below (8x8
# for rows read one element at a time) had taken 16x8 or 8x8 for all three.
STRIDED_POINT_TILES = ((16, 16, 9, None), (16, 8, None, None), (8, 8, None, None))
LONG_KERNEL_TILE = (4, 4)  # register_tiles' last resort: RM x RP x KW up to MAX_BODY at 128 taps
# Kernel rows longer than LONG_ROW_TAPS walk their taps in a loop of TAP_CHUNKS-tap steps (the
# widest dividing KW) instead of one unrolled body: each step loads its own span (RP + chunk - 1
# elements, not RP + KW - 1 once), but Mesa compiles a 16-tap body, not a 128-tap one. wav2vec2's
# positional conv (128 taps, 16 groups; 4 x 4 tile) compiled for 3.4 s on Mesa 25 unrolled.
LONG_ROW_TAPS = 32
TAP_CHUNKS = (16, 8, 4)


# The params baked into the kernel (the window's geometry, which the generated body follows);
# the others (channels, sizes, blocks, the epilogue's operand strides) are immediates even when
# static, so that the convs of a network with one tile, window and epilogue share one kernel:
# lavapipe compiles each distinct kernel at its first dispatch (0.3-1.5 s each on Mesa 25).
BAKED = frozenset({"KD", "KH", "KW", "SD", "SH", "SW", "DD", "DH", "DW", "PD", "PH", "PW", "ID"})


# On a Conv node: its weights are stored k-major (to_kmajor), which every kernel reads (def
# W_KMAJOR); compiler/passes/conv_weights.py sets it. Without it, an invocation's RM weight rows
# are RM scalar loads per tap, which llvmpipe issues per lane: 16 rows x 4 positions of a 1x1
# conv (112 -> 672 channels, 14x14) ran in 11.0 ms with them, 2.0 ms with the weights as a
# constant (lavapipe, same run): the weights' loads were the kernel's cost.
KMAJOR_ATTR = "w_kmajor"
# On such a Conv node: the k-major weights are cut into strips of this many output channels
# (kmajor_strip), each strip k-major over the whole patch: [group, MG / strip, K, strip]. A
# register tile's channel block (RM <= 32 rows) then streams one contiguous run of weights, where
# with the whole MG in a row it read RM of every MG: ResNet-18's 512 -> 512 3x3 convs (9.4 MB of
# weights, 16 channel blocks): 1.2 ms of GPU time per 32-channel block against 0.9 for a 512 ->
# 64 conv whose block rows are nearly contiguous (lavapipe, `onyxia bench --profile`).
STRIP_ATTR = "w_strip"
STRIPS = (32, 16, 8, 4)


def kmajor_strip(mg: int, taps: int) -> int:
    """The strip width for MG output channels per group and a kernel of `taps` taps: the
    widest of STRIPS dividing MG, or MG itself (one strip: plain k-major) for 1-tap kernels,
    whose matrix-product kernels read the weights as a row-major [K, MG] matrix."""
    if taps > 1:
        for strip in STRIPS:
            if mg % strip == 0:
                return strip
    return mg


def to_kmajor(w: np.ndarray, group: int, strip: int | None = None) -> np.ndarray:
    """Conv weights [M, CG, *kernel] in the order [group, MG / strip, CG * kernel, strip]
    (k-major: `strip` channels of one patch row contiguous, read as vec4s; strip None: MG, one
    strip), returned with W's shape."""
    mg = w.shape[0] // group
    strip = strip or mg
    return w.reshape(group, mg // strip, strip, -1).transpose(0, 1, 3, 2).reshape(w.shape)


def from_kmajor(w: np.ndarray, group: int, strip: int | None = None) -> np.ndarray:
    """The inverse of to_kmajor."""
    mg = w.shape[0] // group
    strip = strip or mg
    return w.reshape(group, mg // strip, -1, strip).transpose(0, 1, 3, 2).reshape(w.shape)


def register_tiles(mg: int, kw: int, ow: Dim = None, sw: int = 1,
                   rank: int = 2) -> list[tuple[int, int, int | None, int | None]]:
    """The (RM, RP, lo, hi) tiles offered for MG output channels per group and kernel rows KW
    wide with stride SW over `rank` spatial axes, each preferred for output rows lo to hi wide (a
    pointwise conv's row: its flattened P); no more channel rows than MG needs, and over a static
    row OW only the tiles preferred there and those preferred everywhere."""
    if mg == 1:
        tiles = DEPTHWISE_TILES
    elif kw == 1:
        tiles = TILES if sw == 1 else STRIDED_POINT_TILES
    elif rank >= 2:
        tiles = ROW_TILES_2D if kw <= WIDE_KERNEL else WIDE_KERNEL_TILES_2D
    else:
        tiles = ROW_TILES_1D if sw == 1 else STRIDED_ROW_TILES
    cap = 1 << (mg - 1).bit_length()  # MG rounded up to a power of two
    if isinstance(ow, int):
        tiles = tuple(t for t in tiles if (t[2] is None or ow >= t[2]) and (t[3] is None or ow <= t[3])
                      or t[2:] == (None, None))
    kept: dict[tuple[int, int], tuple[int | None, int | None]] = {}
    for rm, rp, lo, hi in tiles:
        kept.setdefault((min(rm, cap), rp), (lo, hi))
    if all(rm * (rp // 4) * kw > MAX_BODY for rm, rp in kept):
        # Kernel rows too long for every tile's unrolled body (wav2vec2's positional Conv1d, 128
        # taps): the smallest tile, whose body still fits, rather than the GPU-type kernels.
        kept = {(min(LONG_KERNEL_TILE[0], cap), LONG_KERNEL_TILE[1]): (None, None)}
    return [(rm, rp, lo, hi) for (rm, rp), (lo, hi) in kept.items()]


def span_loads(rp: int, kw: int, sw: int, dw: int) -> list[int]:
    """Offsets along the input row that RP positions x KW taps read (deduplicated, sorted)."""
    return sorted({j * sw + t * dw for j in range(rp) for t in range(kw)})


def _strip_base(mq: str) -> str:
    """WGSL: the vec4 index of patch row 0 of the k-major weights (to_kmajor, strips of WSTRIP)
    at channel quad `mq` of group g; row k adds k * WSTRIP / 4."""
    return (f"((g * (MG() / WSTRIP()) + 4u * ({mq}) / WSTRIP()) * K()) * (WSTRIP() / 4u) "
            f"+ (4u * ({mq})) % WSTRIP() / 4u")


def tap_chunk(kw: int, x4: bool) -> int:
    """Taps one step of a kernel row's loop unrolls: all KW up to LONG_ROW_TAPS (and where rows
    are read as aligned vec4s, whose offsets are static), else the widest of TAP_CHUNKS dividing it."""
    if kw <= LONG_ROW_TAPS or x4:
        return kw
    return next((c for c in TAP_CHUNKS if kw % c == 0), kw)


def generated(rm: int, rp: int, kw: int, sw: int, dw: int, kmajor: bool, x4: int | None,
              xa: bool = False, tc: int | None = None, scaled: bool = False) -> dict[str, object]:
    """The ACCS, BODY and STORES defs of conv_register.wgsl for an RM x RP tile: weights
    k-major (`kmajor`: RM / 4 vec4 loads per tap, else RM scalar ones); input rows whose width
    is a multiple of 4 read as aligned vec4s (`x4`: the span's first element's offset in its
    vec4, static since a row segment starts at a multiple of 4 positions), else one element a
    load. With k-major weights, also ACCS_SG and BODY_SG: the body a device with subgroups of 8
    renders (the weights loaded once per lane and broadcast). 1x1 convs too: one weight load site
    a kernel row instead of RM / 4 made mobilenet_v3_large's 16 x 16 pointwise kernels compile in
    0.67-0.69 s instead of 0.83-1.1 (Mesa 25), and the whole model run 5-10 % faster on both
    lavapipes (Mesa 22.3: 171 -> 154 ms, efficientnet_b0 279 -> 259, regnet_y_400mf 208 -> 190;
    an older body had measured no faster that way). `tc` (tap_chunk):
    taps a step of a loop along the kernel row unrolls, where fewer than KW. `scaled`: each
    input vec4 times its channel's scale `cs` (X_SCALE)."""
    quads = rp // 4
    tc = tc or kw
    chunked = tc < kw
    assert kw % tc == 0 and not (chunked and x4 is not None), (kw, tc, x4)
    # a chunked row's step t0 reads from column xt and weight tap t0 onwards
    xs, wk, wt0 = ("xt", "wkt", "wtt") if chunked else ("xs", "wk", "wt0")
    # the kernel row kh of input channel c: its input row and first weight
    body = ["let iy = iy0 + i32(kh * DH());", "let ok = zok && u32(iy) < IH();",
            "let row = xc + (min(u32(iz), ID() - 1u) * IH() + min(u32(iy), IH() - 1u)) * IW();",
            "let wt0 = wc + (kd * KH() + kh) * KW();"]
    if kmajor:
        accs = [f"let mq{j} = min(m0 / 4u + {j}u, MG() / 4u - 1u);" for j in range(rm // 4)]
        accs += [f"let sb{j} = {_strip_base(f'mq{j}')};" for j in range(rm // 4)]
        body.append("let wk = wt0 * (WSTRIP() / 4u);")
    else:
        accs = [f"let wr{r} = (wg_row + min(m0 + {r}u, MG() - 1u)) * K();" for r in range(rm)]
    if chunked:
        # kept_bound: a loop Mesa cannot unroll (its trip count is not a constant to it)
        body += [f"for (var t0 = 0u; t0 < kept_bound({kw}u, wg.nwg); t0 += {tc}u) {{", "let xt = xs + i32(t0 * DW());",
                 "let wkt = wk + t0 * (WSTRIP() / 4u);" if kmajor else "let wtt = wt0 + t0;"]
        kw = tc
    accs += [f"var a{r}_{q} = vec4<f32>();" for r in range(rm) for q in range(quads)]
    offsets = span_loads(rp, kw, sw, dw)
    if xa:
        # any row width: the aligned vec4s of x that cover the span, each element picked by the
        # span's offset in its first vec4 (three selects, the same ops for all 8 lanes) and
        # masked in the padding, instead of a per-lane load each
        quads_read = (offsets[-1] + 3) // 4 + 1
        body += [f"let fa = i32(row) + {xs};", "let qa = fa >> 2u;", "let oa = u32(fa & 3);",
                 "let o1 = oa == 1u;", "let o2 = oa >= 2u;", "let o3 = oa == 3u;"]
        body += [f"let Q{k} = ldq(qa + {k});" for k in range(quads_read)]
        for i in offsets:
            c = [f"Q{(i + o) // 4}[{(i + o) % 4}]" for o in range(4)]
            body.append(f"let s{i} = select(0.0, select(select({c[0]}, {c[1]}, o1), select({c[2]}, {c[3]}, o3), o2), "
                        f"ok && u32({xs} + {i}) < IW());")
    elif x4 is None:
        body += [f"let s{i} = ld(row, {xs} + {i}, ok);" for i in offsets]
    else:
        accs.append(f"let qx = (xs - {x4}) / 4;")
        body.append("let row4 = row / 4u;")
        body += [f"let q{t} = ld4(row4, qx + {t}, ok);" for t in sorted({(x4 + i) // 4 for i in offsets})]
        body += [f"let s{i} = q{(x4 + i) // 4}[{(x4 + i) % 4}];" for i in offsets]
    # With subgroups of 8 (ONYXIA_SUBGROUPS_OF_8, BODY_SG), the KW x RM/4 weight vec4s of a kernel
    # row, the same for the 8 lanes, are loaded one per lane and handed round by subgroupBroadcast
    # (lavapipe loads storage one lane at a time, a uniform address included).
    rq = rm // 4
    nw = kw * rq
    sg = kmajor  # KW = 1 included (the docstring)
    accs_sg = [f"let wo{u} = (min(sg_id + {8 * u}u, {nw - 1}u) / {rq}u) * (WSTRIP() / 4u) + "
               + _strip_base(f"min(m0 / 4u + min(sg_id + {8 * u}u, {nw - 1}u) % {rq}u, MG() / 4u - 1u)") + ";"
               for u in range(-(-nw // 8))] if sg else []
    body_sg = list(body) + [f"let wl{u} = vec4<f32>(w_load4({wk} + wo{u}));" for u in range(len(accs_sg))]
    # k-major weights: tap-innermost, `a += w0 * v0 + w1 * v1 + w2 * v2` per accumulator, so that
    # one that spilled (a tile's RM x RP outputs far outnumber x86's 16 vector registers) is
    # reloaded and stored once per kernel row, not once per tap (ROW_TILES_2D: 3x3 64 -> 64 at
    # 56x56, same 8x28 tile, 13.6 -> 12.5 ms; 32 channel rows pay only this way).
    for t in range(kw):
        for q in range(quads):
            lanes = ", ".join(f"s{(4 * q + j) * sw + t * dw}" for j in range(4))
            body.append(f"let v{t}_{q} = {'cs * ' if scaled else ''}vec4<f32>({lanes});")
            body_sg.append(body[-1])
        if kmajor:
            body += [f"let wv{j}_{t} = vec4<f32>(w_load4(sb{j} + {wk} + {t}u * (WSTRIP() / 4u)));" for j in range(rq)]
            body_sg += [f"let wv{j}_{t} = subgroupBroadcast(wl{(t * rq + j) // 8}, {(t * rq + j) % 8}u);"
                        for j in range(rq)]
        else:
            body += [f"let w{r}_{t} = wt(wr{r} + {wt0} + {t}u);" for r in range(rm)]
    for r in range(rm):
        for q in range(quads):
            terms = (f"wv{r // 4}_{t}[{r % 4}] * v{t}_{q}" if kmajor else f"w{r}_{t} * v{t}_{q}" for t in range(kw))
            body.append(f"a{r}_{q} += {' + '.join(terms)};")
            body_sg.append(body[-1])
    if chunked:
        body.append("}")
        body_sg.append("}")
    # The accumulators are staged (a private array, or workgroup memory where the driver lowers
    # an indexed private array to branch ladders: conv_register.wgsl stage_slot) for one store
    # loop: RM x RP/4 unrolled guarded stores made lavapipe compile a 16x16 tile for 11.6 s
    # (Mesa 25; 2.2 s on 22.3).
    stores = [f"stage[stage_slot({r * quads + q}u, wg.lid)] = a{r}_{q};" for r in range(rm) for q in range(quads)]
    out: dict[str, object] = {"ACCS": " ".join(accs), "BODY": " ".join(body), "STORES": " ".join(stores),
                              "X4": x4 is not None, "XA": xa}
    if sg:
        out.update(ACCS_SG=" ".join(accs_sg), BODY_SG=" ".join(body_sg))
    return out


def register_applies(compute: str, transposed: bool, win: Window, rm: int, rp: int, kmajor: bool) -> bool:
    kw = win.kernel[-1]
    return (compute == "f32" and not transposed and (not kmajor or rm % 4 == 0) and rm * (rp // 4) * kw <= MAX_BODY
            and numel(win.kernel) // kw <= MAX_ROWS_PER_INVOCATION)


def plan_register(ctx: PlanCtx, *, x: str, w: str, bias: str | None, y: str, batch: Dim, channels: int, maps: int,
                  group: int, spatial: tuple[Dim, ...], win: Window, rm: int, rp: int,
                  kmajor: bool, x4: bool, epilogue: Epilogue = Epilogue(), eow: Dim | None = None,
                  xa: bool = False, strip: int | None = None, scale: ChannelScale | None = None) -> list[Step]:
    """conv_register.wgsl over an RM x RP tile (+ the split-K finish when the input channels
    are many). `spatial`/`win` may be the flattened 1-D form of a pointwise conv; `eow` is then
    the real output's last axis (the epilogue's column). `x4`: the input is read as vec4s,
    correct only where its rows' width is a multiple of 4 (the caller's guard) and the leading
    pad is static. `xa`: read as vec4s at any row width and pad (the input's element count a
    multiple of 4: the caller's check). `strip`: k-major weights' strip width (None: MG).
    `scale`: a gate over the input's channels, multiplied into each loaded row (X_SCALE)."""
    cg, mg = channels // group, maps // group
    params = window_params(spatial, win)
    p = params["P"]
    oh, ow = params["OH"], params["OW"]
    orows = p // ow if isinstance(p, int) and isinstance(ow, int) else numel(win.out[:-1])
    kw, sw, dw = win.kernel[-1], win.strides[-1], win.dilations[-1]
    tc = tap_chunk(kw, x4)
    rows_per_channel = numel(win.kernel) // kw * (kw // tc)  # steps of the loops an input channel takes
    cchunk = max(MAX_ROWS_PER_INVOCATION // rows_per_channel, 1)
    splits = ceil_div(cg, cchunk)
    cchunk = ceil_div(cg, splits)
    split = splits > 1
    segs = ceil_div(ow, rp)
    nseg = batch * orows * segs
    rblocks = ceil_div(mg, rm)
    total = batch * maps * p
    params.update(C=channels, M=maps, CG=cg, MG=mg, K=cg * numel(win.kernel), NSEG=nseg, SEGS=segs, OROWS=orows,
                  RBLOCKS=rblocks, CCHUNK=cchunk, SPLITS=splits, TOTAL=total, EOW=ow if eow is None else eow)
    del oh
    defs: dict[str, object] = {"RM": rm, "RP": rp, "HAS_BIAS": bias is not None and not split, "SPLIT": split,
                               "T": "f32", **generated(rm, rp, kw, sw, dw, kmajor, -win.begin[-1] % 4 if x4 else None,
                                                       xa, tc, scale is not None)}
    if xa:
        params["XQ"] = batch * (channels // 4) * params["ISP"]
    if kmajor:
        params["WSTRIP"] = strip or mg
    reads: dict[str, str | Buf] = {"x": Buf(x, vector=x4 or xa), "w": Buf(w, vector=kmajor),
                                   **({"bias": bias} if bias is not None and not split else {})}
    if scale is not None:
        defs["X_SCALE"] = True
        reads["xscale"] = scale.tensor
        params["XSCALE_BS"] = scale.batch_stride
    workgroups = (ceil_div(nseg, LANES), 1, group * rblocks * splits)
    if not split:
        defs, params, reads = epilogue.onto(defs, params, reads)
        defs.update(epilogue.in_store(ctx, y, defs))
        # float32 outputs: a full quad at an aligned index is one vec4 store (conv_register.wgsl put)
        defs["STORE4"] = ctx.tensor_dtype(y).name == "float32" and (not epilogue or "EPILOGUE_IN_STORE" in defs)
        return [ctx.dispatch("conv/conv_register.wgsl", defs=defs, params=params, reads=reads,
                             writes={"y": Buf(y, vector=defs["STORE4"])}, workgroups=workgroups,
                             immediates=tuple(k for k in params if k not in BAKED))]
    partial = ctx.scratch(splits * total, "float32", "splitk")
    steps: list[Step] = [ctx.dispatch("conv/conv_register.wgsl", defs=defs, params=params, reads=reads,
                                      writes={"partial": partial}, workgroups=workgroups,
                                      immediates=tuple(k for k in params if k not in BAKED))]
    has_bias = bias is not None
    finish_params = {"ALPHA": (1.0, "f32"), "BETA": (1.0, "f32"), "C_MS": 1, "C_NS": 0} if has_bias else {}
    steps.append(plan_finish(ctx, partial=partial, total=total, splits=splits, m=maps, n=p, params=finish_params,
                             defs={"T": "f32", "GEMM": has_bias, "HAS_C": has_bias},
                             epilogue_reads={"c": bias} if has_bias else {}, y=y, reports=None, epilogue=epilogue))
    return steps


__all__ = ["KMAJOR_ATTR", "LANES", "MAX_ROWS_PER_INVOCATION", "STRIP_ATTR", "from_kmajor", "generated",
           "kmajor_strip", "plan_register", "register_applies", "register_tiles", "span_loads", "tap_chunk",
           "to_kmajor"]
