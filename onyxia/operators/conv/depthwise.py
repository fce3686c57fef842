"""Depthwise 2-D convolution over row tiles for CPU-type adapters: `conv/depthwise_rows.wgsl`.

An invocation computes RH output rows x RP positions of one channel, loads each input row its
tile needs once, and stores its outputs directly (bias and the fused epilogue on each value).
The register kernel (operators/conv/cpu.py) computes one output row per invocation, so it loads
every input row KH times (once per output row reading it) and stages its outputs through
workgroup memory to a store loop. On llvmpipe each per-lane load or store is a loop over the
lanes per component: those accesses, not the ~1.5 multiply-adds per loaded value, are a
depthwise conv's cost. Per output, 3x3 stride 1: rows 4x8 ~2.3 loads + 1 store, register/1x28
~3.4 loads + 3 (stage, reload, store).

Measured (lavapipe, Mesa 22.3, 2 cores; each conv's dispatch timed with both choices
alternating in one process, `/tmp/s33/dwab.py`; compile = first dispatch minus a warm one,
`/tmp/s33/convtiles.py`): mobilenet_v3_large's 15 depthwise convs 22.0 ms with the fastest
register tile each, 17.1 ms with rows 4x8; 3x3 72 channels at 56x56: rows4/2x8 0.92 ms (compile
0.11 s), rows4/4x8 1.00, register4/1x28 1.83 (0.10 s); 5x5 240 at 28x28: rows4/4x8 1.31 ms
(compile ~0.37 s), register4/1x28 1.59, rows4/2x8 1.76; 5x5 over 7-wide outputs rows 1.7 ms vs
register/1x8 0.9 (the tile's 8 positions mostly idle). So the heuristic takes rows 2x8 for
kernels of at most PREFERRED_TAPS taps over outputs at least 9 wide (cheapest to compile of the
fast ones: a cold first run compiles every kernel), and the tuner measures rows 4x8 and the
others elsewhere.

Where the runtime stages privately (ONYXIA_INDEXED_PRIVATE: Mesa 25's lavapipe) the kernel takes
its looped form instead (`looped`): Mesa 25 compiles each unrolled load for ~5 ms a component and
more the more one block holds, so the unrolled body compiled for 0.6-1.1 s a kernel (Mesa 22.3:
0.1-0.2 s). A kept loop over the input rows, one row's span loaded a step and multiplied into each
output row by the kernel row it is for (weights loaded once, picked by select), and a loop over the
output rows storing them: mobilenet_v3_large's four depthwise kernels 3.5 -> 1.1 s of compile, their
run time unchanged (profile sums, alternating: 6.7 / 6.6 / 7.1 vs 6.3 / 6.5 / 6.7 ms).

The row walker (`plan_walk`, conv/depthwise_walk.wgsl) takes whole output rows, 4 positions a
step, with a sliding window of aligned vec4s per input row: per output a fraction of a vec4 load
and a quarter of a vec4 store, the setup once an invocation. A row tile of the kernel above pays
~40 % of its time in per-workgroup launch and setup (mobilenet's 3x3 at 56x56, lavapipe, parts
removed in turn: 0.73 ms, loads 0.19, stores 0.14, launch 0.19, setup 0.13). Its rows must be a
multiple of 4 wide in and out (vec4s), so the heuristic takes it over rows at least
WALK_MIN_WIDTH wide, where a size whose rows are not aligned is rare (a smaller map's kernel is the
register one at either size: a new input size finds it compiled). 2 rows an invocation at
stride 1, 1 at stride 2: the rows an 8-lane workgroup streams at once (8 x RH x SH + KH) past
~32 ran slower (hardware prefetch streams: 3x3 stride 2 from 112x112, 1 row 0.52 ms, 2 rows
0.63, 4 rows 0.97). Measured (2-core EPYC, mobilenet_v3_large at 224x224, its six depthwise
convs over rows 28-112 wide, both choices alternating in one process, the minimum of 11
profiles each, /tmp/s48/walkab.py): Mesa 25 2.52 ms against 3.74 (rows tiles and register
tiles), Mesa 22.3 2.94 against 4.79; first dispatch compile (Mesa 25) 0.17-0.53 s a kernel.
"""

from __future__ import annotations

from onyxia.ir.shapes import Dim
from onyxia.operators.base import Buf, PlanCtx
from onyxia.operators.common import ceil_div
from onyxia.operators.conv.cpu import LANES, span_loads
from onyxia.operators.conv.window import Window, window_params
from onyxia.operators.matmul.epilogue import Epilogue
from onyxia.plan import Step

# (RH, RP) tiles: output rows x positions per invocation
DW_TILES = ((2, 8), (4, 8))
PREFERRED_TAPS = 9  # the heuristic takes the rows kernel for kernels of at most 9 taps (3x3)
MAX_BODY = 800  # multiply-adds unrolled (RH x RP x KH x KW): a 7x7 kernel takes 2 rows of 8


def rows_read(rh: int, kh: int, sh: int, dh: int) -> int:
    """Input rows an RH-row tile reads."""
    return (rh - 1) * sh + (kh - 1) * dh + 1


def generated(rh: int, rp: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int,
              x4: int | None) -> dict[str, object]:
    """ACCS (weights and accumulators), BODY (per input row: its span's loads, then every output
    row and tap reading it) and STORES of depthwise_rows.wgsl."""
    quads = rp // 4
    accs = [f"let w{a}_{t} = wt(wc + {a * kw + t}u);" for a in range(kh) for t in range(kw)]
    accs += [f"var a{r}_{q} = vec4<f32>();" for r in range(rh) for q in range(quads)]
    offsets = span_loads(rp, kw, sw, dw)
    if x4 is not None:
        accs.append(f"let qx = (xs - {x4}) / 4;")
    body = []
    for i in range(rows_read(rh, kh, sh, dh)):
        readers = [(r, (i - r * sh) // dh) for r in range(rh)
                   if i - r * sh >= 0 and (i - r * sh) % dh == 0 and (i - r * sh) // dh < kh]
        if not readers:
            continue
        body += [f"let ok{i} = u32(iy0 + {i}) < IH();",
                 f"let row{i} = xc + min(u32(iy0 + {i}), IH() - 1u) * IW();"]
        body += span_reads(offsets, x4, f"{i}_", f"row{i}", f"ok{i}")
        for t in range(kw):
            for q in range(quads):
                lanes = ", ".join(f"s{i}_{(4 * q + j) * sw + t * dw}" for j in range(4))
                body.append(f"let v{i}_{t}_{q} = vec4<f32>({lanes});")
                body += [f"a{r}_{q} += w{a}_{t} * v{i}_{t}_{q};" for r, a in readers]
    stores = [f"if (rows > {r}u) {{ " + " ".join(f"put(y0, {r}u, {4 * q + j}u, count, ow0, c, a{r}_{q}[{j}]);"
                                                 for q in range(quads) for j in range(4)) + " }"
              for r in range(rh)]
    return {"ACCS": " ".join(accs), "BODY": " ".join(body), "STORES": " ".join(stores), "X4": x4 is not None,
            **looped(rh, rp, kh, kw, sh, sw, dh, dw, x4)}


def span_reads(offsets: list[int], x4: int | None, tag: str, row: str, ok: str) -> list[str]:
    """WGSL: `s<tag><o>` = element o of the input span starting at column xs of row `row` (0 in
    the padding or where `ok` is false), read one element a load or, with `x4`, out of the
    aligned vec4s `q<tag><t>` covering it (x4: the span's offset in its first vec4)."""
    if x4 is None:
        return [f"let s{tag}{o} = ld({row}, xs + {o}, {ok});" for o in offsets]
    return ([f"let q{tag}{t} = ld4({row} / 4u, qx + {t}, {ok});" for t in sorted({(x4 + o) // 4 for o in offsets})]
            + [f"let s{tag}{o} = q{tag}{(x4 + o) // 4}[{(x4 + o) % 4}];" for o in offsets])


def pick(names: list[str], index: str) -> str:
    """WGSL: names[index] for a run-time u32 `index` (the last name past the end), by select."""
    out = names[-1]
    for j in reversed(range(len(names) - 1)):
        out = f"select({out}, {names[j]}, {index} == {j}u)"
    return out


def looped(rh: int, rp: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int,
           x4: int | None) -> dict[str, object]:
    """The looped form's defs (ONYXIA_INDEXED_PRIVATE, the module doc): ACCS_LOOPED (the weights,
    loaded once, and the accumulators), ROW_BODY (one step of a kept loop over the SPAN_ROWS input
    rows: the row's span, multiplied into each output row r by its kernel row (i - r * SH) / DH,
    picked from the weights by select, 0 where the row is not one of r's) and ROW_STORES (one
    output row r's puts, its accumulators picked by select)."""
    quads = rp // 4
    offsets = span_loads(rp, kw, sw, dw)
    body = span_reads(offsets, x4, "_", "row", "ok")
    for t in range(kw):
        for q in range(quads):
            body.append(f"let v_{t}_{q} = vec4<f32>({', '.join(f's_{(4 * q + j) * sw + t * dw}' for j in range(4))});")
    for r in range(rh):
        body.append(f"let d{r} = i32(i) - {r * sh};")
        if dh == 1:
            body.append(f"let k{r} = u32(d{r}); let in{r} = k{r} < {kh}u;")
        else:
            body.append(f"let k{r} = u32(d{r}) / {dh}u; "
                        f"let in{r} = d{r} >= 0 && u32(d{r}) % {dh}u == 0u && k{r} < {kh}u;")
        for t in range(kw):
            body.append(f"let u{r}_{t} = select(0.0, {pick([f'w{a}_{t}' for a in range(kh)], f'k{r}')}, in{r});")
            body += [f"a{r}_{q} += u{r}_{t} * v_{t}_{q};" for q in range(quads)]
    accs = [f"let w{a}_{t} = wt(wc + {a * kw + t}u);" for a in range(kh) for t in range(kw)]
    accs += [f"var a{r}_{q} = vec4<f32>();" for r in range(rh) for q in range(quads)]
    if x4 is not None:
        accs.append(f"let qx = (xs - {x4}) / 4;")
    stores = []
    for q in range(quads):
        stores.append(f"let b_{q} = {pick([f'a{r}_{q}' for r in range(rh)], 'r')};")
        stores += [f"put(y0, r, {4 * q + j}u, count, ow0, c, b_{q}[{j}]);" for j in range(4)]
    return {"SPAN_ROWS": rows_read(rh, kh, sh, dh), "ACCS_LOOPED": " ".join(accs), "ROW_BODY": " ".join(body),
            "ROW_STORES": " ".join(stores)}


MAX_CHANNELS = 65535  # the grid's z (WebGPU's default maxComputeWorkgroupsPerDimension)
WALK_ROWS = (1, 2, 4)  # output rows an invocation of the row walker takes (RH)
# Its loop steps: output rows up to 4 x this wide. An invocation's loop trips are (QUADS + PRE)
# x (1 + RH), the stores' loop included: <= 8194 x 5 for 4 rows, under lavapipe's ~65,535.
WALK_MAX_QUADS = 8192
WALK_MIN_WIDTH = 16  # the heuristic takes it over output rows this wide or wider (the module doc)


def walk_window(kw: int, sw: int, dw: int, pw: int) -> tuple[int, int, int]:
    """(base, off0, count) of depthwise_walk.wgsl's window over an input row: at step q its
    vec4s are base + q * SW .. + count - 1, and output j's tap t is element off0 + SW * j + t *
    DW of it (the leading pad PW static)."""
    base = (-pw) // 4
    off0 = -pw - 4 * base
    return base, off0, (off0 + 3 * sw + (kw - 1) * dw) // 4 + 1


def walk_defs(rh: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, pw: int) -> dict[str, object]:
    """ACCS, CARRY, PRE, QLO, STEP, PICK_ROW and SHIFT of depthwise_walk.wgsl (its module doc)."""
    base, off0, count = walk_window(kw, sw, dw, pw)
    carried = count - sw
    accs = [f"let w{a}_{t} = wt(wc + {a * kw + t}u);" for a in range(kh) for t in range(kw)]
    carry, step, shift = [], [f"var acc{r} = vec4<f32>();" for r in range(rh)], []
    for i in range(rows_read(rh, kh, sh, dh)):
        carry += [f"let ok{i} = u32(iy0 + {i}) < IH();",
                  f"let r{i} = (xc + min(u32(iy0 + {i}), IH() - 1u) * IW()) / 4u;"]
        carry += [f"var k{i}_{j} = vec4<f32>();" for j in range(carried)]
        step += [f"let v{i}_{j} = k{i}_{j};" if j < carried else f"let v{i}_{j} = ld4(r{i}, qlo + {j}, ok{i});"
                 for j in range(count)]
        shift += [f"k{i}_{j} = v{i}_{j + sw};" for j in range(carried)]
        readers = [(r, (i - r * sh) // dh) for r in range(rh)
                   if i - r * sh >= 0 and (i - r * sh) % dh == 0 and (i - r * sh) // dh < kh]
        for t in range(kw if readers else 0):
            picks = [off0 + sw * j + t * dw for j in range(4)]
            step.append(f"let x{i}_{t} = vec4<f32>({', '.join(f'v{i}_{e // 4}[{e % 4}]' for e in picks)});")
            step += [f"acc{r} += w{a}_{t} * x{i}_{t};" for r, a in readers]
    return {"ACCS": " ".join(accs), "CARRY": " ".join(carry), "PRE": -(-carried // sw), "QLO": f"({base})",
            "STEP": " ".join(step), "PICK_ROW": pick([f"acc{r}" for r in range(rh)], "r"), "SHIFT": " ".join(shift)}


def walk_applies(compute: str, transposed: bool, spatial: tuple[Dim, ...], win: Window, mg: int, cg: int,
                 channels: int, epilogue_in_store: bool) -> bool:
    """The row walker: a float32 2-D depthwise conv with a static leading pad along the rows,
    any epilogue applied in the store; its rows read and written as aligned vec4s and at most
    4 x WALK_MAX_QUADS wide (the caller's guards: IW % 4 == 0, OW % 4 == 0, OW's bound)."""
    return (compute == "f32" and not transposed and mg == 1 and cg == 1 and len(spatial) == 2
            and channels <= MAX_CHANNELS and isinstance(win.begin[-1], int) and epilogue_in_store)


def plan_walk(ctx: PlanCtx, *, x: str, w: str, bias: str | None, y: str, batch: Dim, channels: int,
              spatial: tuple[Dim, ...], win: Window, rh: int, epilogue: Epilogue = Epilogue()) -> list[Step]:
    """depthwise_walk.wgsl: RH output rows an invocation, walked 4 positions a step."""
    params = {k: v for k, v in window_params(spatial, win).items()
              if k not in ("ID", "OD", "KD", "SD", "DD", "PD", "KS", "ISP", "P")}
    kh, kw = win.kernel
    sh, sw = win.strides
    dh, dw = win.dilations
    th = ceil_div(params["OH"], rh)
    nt = batch * th
    params.update(C=channels, NT=nt, TH=th, QUADS=ceil_div(params["OW"], 4), EOW=params["OW"])
    defs: dict[str, object] = {"RH": rh, "HAS_BIAS": bias is not None, "T": "f32", "X4": True,
                               **walk_defs(rh, kh, kw, sh, sw, dh, dw, win.begin[-1])}
    reads: dict[str, str | Buf] = {"x": Buf(x, vector=True), "w": w, **({"bias": bias} if bias is not None else {})}
    defs, params, reads = epilogue.onto(defs, params, reads)
    defs.update(epilogue.in_store(ctx, y, defs))
    baked = {"KH", "KW", "SH", "SW", "DH", "DW"}
    return [ctx.dispatch("conv/depthwise_walk.wgsl", defs=defs, params=params, reads=reads,
                         writes={"y": Buf(y, vector=True)}, workgroups=(ceil_div(nt, LANES), 1, channels),
                         immediates=tuple(k for k in params if k not in baked))]


def depthwise_applies(compute: str, transposed: bool, spatial: tuple[Dim, ...], win: Window, mg: int, cg: int,
                      channels: int, rh: int, rp: int) -> bool:
    if compute != "f32" or transposed or mg != 1 or cg != 1 or len(spatial) != 2 or channels > MAX_CHANNELS:
        return False
    kh, kw = win.kernel
    return rh * rp * kh * kw <= MAX_BODY


def plan_depthwise(ctx: PlanCtx, *, x: str, w: str, bias: str | None, y: str, batch: Dim, channels: int,
                   spatial: tuple[Dim, ...], win: Window, rh: int, rp: int, x4: bool,
                   epilogue: Epilogue = Epilogue()) -> list[Step]:
    """depthwise_rows.wgsl over RH x RP tiles; `x4`: rows read as vec4s, correct only where the
    input's rows are a multiple of 4 wide (the caller's guard) and the leading pad is static."""
    params = {k: v for k, v in window_params(spatial, win).items()
              if k not in ("ID", "OD", "KD", "SD", "DD", "PD", "KS", "ISP", "P")}
    kh, kw = win.kernel
    sh, sw = win.strides
    dh, dw = win.dilations
    th, segs = ceil_div(params["OH"], rh), ceil_div(params["OW"], rp)
    nt = batch * th * segs
    params.update(C=channels, NT=nt, TH=th, SEGS=segs, EOW=params["OW"])
    defs: dict[str, object] = {"RH": rh, "RP": rp, "HAS_BIAS": bias is not None, "T": "f32",
                               **generated(rh, rp, kh, kw, sh, sw, dh, dw, -win.begin[-1] % 4 if x4 else None)}
    reads: dict[str, str | Buf] = {"x": Buf(x, vector=x4), "w": w, **({"bias": bias} if bias is not None else {})}
    defs, params, reads = epilogue.onto(defs, params, reads)
    defs.update(epilogue.in_store(ctx, y, defs))
    baked = {"KH", "KW", "SH", "SW", "DH", "DW"}
    return [ctx.dispatch("conv/depthwise_rows.wgsl", defs=defs, params=params, reads=reads, writes={"y": y},
                         workgroups=(ceil_div(nt, LANES), 1, channels),
                         immediates=tuple(k for k in params if k not in baked))]


__all__ = ["DW_TILES", "WALK_MAX_QUADS", "WALK_MIN_WIDTH", "WALK_ROWS", "depthwise_applies", "plan_depthwise",
           "plan_walk", "walk_applies", "walk_defs", "walk_window"]
