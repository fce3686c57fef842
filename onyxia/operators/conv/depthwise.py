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


__all__ = ["DW_TILES", "depthwise_applies", "plan_depthwise"]
