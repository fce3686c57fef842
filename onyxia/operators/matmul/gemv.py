"""The few-rows matrix product (decode, short prefills): kernel variants and the heuristic
choosing among them.

Variants (one family; each a shader specialized by defs):
- `coalesced` (`matmul/gemv.wgsl`, planned by matmul.py): neighbouring invocations read
  neighbouring words of B and a workgroup's lanes meet in shared memory, split-K across
  workgroups so a decode product fills a large GPU: the pattern a GPU wants;
- `chunked` (`matmul/gemv_chunked.wgsl`): no shared memory or barriers, each invocation streams
  its own contiguous runs of B with vec4 loads and holds up to 32 rows in registers (A's rows
  shared through subgroups where the adapter has them): the pattern a CPU-type adapter runs
  fastest (lavapipe: several times the coalesced kernel's bandwidth at M = 1, ~10x the tiled
  kernel's GF/s at M = 32 - 64).
- many rows: the GEMM variants of operators/matmul/gemm_variants.py.

gemm_variants.plan_alternatives offers every variant that applies as one tuned Select step: the
chunked kernel eligible up to CHUNKED_MAX_M rows and preferred on a CPU-type adapter, the
coalesced one eligible up to the caller's small-M bound; the runtime times the eligible ones on
the adapter at hand (runtime/tuner.py), the preferences being its choice with tuning off. One
plan serves every adapter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from onyxia.ir.shapes import Dim
from onyxia.operators.base import Buf, PlanCtx
from onyxia.operators.common import ceil_div
from onyxia.operators.conv.scale import ChannelScale
from onyxia.operators.matmul.epilogue import Epilogue
from onyxia.plan import ALWAYS, Step, at_least, at_most, has_trait

# Rows the chunked kernel takes on a CPU-type adapter: up to 32 per invocation in registers, a
# row block per wid.z above (B is read once per block). Measured on lavapipe at M = 32 and 64
# (K = 512, N = 1408): the tiled kernel reaches 0.6 - 1.2 GF/s per core, this one ~10x that;
# above 64 rows the choice belongs to the GEMM variants.
CHUNKED_MAX_M = 64
# Row classes of the chunked kernel (ROWS def, first row count): a symbolic M plans a Select of
# one dispatch per class, the one whose class holds M runs. Decode (M = 1) takes vec4 accumulators; 17 - 64
# rows take blocks of 32 where the adapter has wide register tiles (WIDE_TILES: lavapipe before
# Mesa 25, M = 64 with subgroups: ~35 GF/s, blocks of 16 ~28), else blocks of 16 (Mesa 25:
# clip_vision's 50-row products, the whole model 90 -> 64 ms).
CHUNK_ROWS = ((1, 1), (4, 2), (16, 5), (32, 17))
WIDE_TILES = has_trait("wide-register-tiles")
COLUMNS_PER_WORKGROUP = 32  # 8 invocations x 1 vec4 column group (gemv_chunked.wgsl)


# The row tile whose fused epilogue runs as a vec4 pass over the invocation's stored outputs
# (Epilogue.as_quad_pass) instead of in its store: the tile Mesa 25's lavapipe prefers, where ops
# in the store slow the whole kernel down (Whisper's products, gemv_chunked.wgsl alone, medians:
# fc1 + bias + GELU 66 -> 46 ms, no epilogue 43; fc2 + bias + residual 62.6 -> 42.5, none 41; q
# + bias 15.9 -> 14.3, none 11.1); Mesa 22.3 is the other way by 2-3 % (fc1 at 32 rows 191.6 /
# 195, fc2 167.5 / 172; 16 rows 227.5 / 233), so its 32-row tile keeps the ops in the store.
QUAD_EPILOGUE_ROWS = 16


def finished_by(p: Product, rows: int, defs: dict, reads: dict) -> tuple[dict, dict]:
    """A register kernel's defs and reads with its epilogue placed for its row tile (above)."""
    return p.epilogue.as_quad_pass(defs, reads) if rows == QUAD_EPILOGUE_ROWS else (defs, reads)


# The longest K one invocation walks: KCHUNK / 4 loop iterations, far below the ~65k after
# which lavapipe stops an invocation's loops; a longer K is split and added by splitk.wgsl.
MAX_KCHUNK = 16384
_DROPPED_PARAMS = ("A_MS", "A_KS", "B_KS", "B_NS")  # layout strides the chunked kernel bakes in
_FINISH_PARAMS = ("ALPHA", "BETA", "C_MS", "C_NS")


@dataclass(frozen=True)
class AWindow:
    """A k-major A whose rows (a strided pointwise conv's output positions) are read out of the
    conv's input [C, *spatial] instead of a gathered copy: A(k, m) at k * plane + (m // ow) *
    rowstep + (m % ow) * colstep (gemv_chunked.wgsl A_WINDOW)."""

    plane: Dim  # elements from one k to the next (the input's spatial size)
    ow: Dim  # output positions a row
    rowstep: Dim  # input elements from one output row to the next (stride x input width)
    colstep: Dim  # ... from one output position of a row to the next (the stride)


class Product(Protocol):
    """What the variants read of matmul.py's Product (which imports this module)."""

    a: str
    b: str
    y: str
    dtype: str
    m: Dim
    n: Dim
    k: Dim
    trans_a: bool
    trans_b: bool
    epilogue: Epilogue
    b_panels: bool
    trans_y: bool
    shared_sizes: bool
    quads: bool
    a_scale: ChannelScale | None
    a_window: AWindow | None


def chunked_applies(p: Product) -> bool:
    """f32 products whose K and N are static multiples of 4 (vec4 reads), B row-major; A either
    way (TRANS_A: a pointwise conv's k-major weights, read four values M apart, which costs
    lavapipe what a vec4 load does)."""
    return (p.dtype == "f32" and not p.trans_b and isinstance(p.k, int) and isinstance(p.n, int)
            and p.k % 4 == 0 and p.n % 4 == 0 and p.k > 0)


def stored(ctx: PlanCtx, y: str, defs: dict) -> dict[str, str | Buf]:
    """gemv_chunked.wgsl's `writes` storing `y` (unsplit), setting STORE4 in `defs` where y is
    float32 and not transposed: a vec4 store per row of four columns."""
    defs["STORE4"] = ctx.tensor_dtype(y).name == "float32" and not defs.get("TRANS_Y")
    return {"y": Buf(y, vector=defs["STORE4"])}


def rows_defs(p: Product, params: dict, defs: dict) -> dict:
    """`defs` of a gemv_chunked.wgsl row class (ROWS set) with what its product allows, the same
    for the chunked variant and the register one (gemm_variants.plan_register), which share the
    kernel: A_QUADS where A is k-major (4 rows a lane: a vec4 where M is a multiple of 4, else
    four loads, a branch on the run's M in the kernel; a Select of two kernels compiled both where
    a network's maps come in both kinds: efficientnet_b0's cold first run 4.5 -> 6.3 s on Mesa
    25), else C_ROW where C is one row (a bias over the columns, loaded once an invocation; with
    A_QUADS too the kernel compiled over twice as long on Mesa 25, efficientnet_b0's 0.40 -> 0.86
    s, for 7 % of its run)."""
    extra: dict[str, object] = {}
    if p.trans_a and defs["ROWS"] > 1:
        extra["A_QUADS"] = True
    elif defs.get("HAS_C") and params.get("C_MS") == 0 and params.get("C_NS") == 1:
        extra["C_ROW"] = True
    return {**defs, **extra}


def plan_chunked(ctx: PlanCtx, p: Product, nbatch: Dim, params: dict, defs: dict,
                 epilogue_reads: dict[str, str], reports: str | None) -> list[Step]:
    """The chunked variant, eligible up to CHUNKED_MAX_M rows: a dispatch of M's row class (a
    Select of the classes when M is symbolic), + a split-K sum."""
    m, n, k = p.m, p.n, p.k
    splits = ceil_div(k, MAX_KCHUNK)
    chunk = 4 * ceil_div(ceil_div(k, splits), 4)
    split = splits > 1
    assert not (split and p.trans_y), "a transposed y is stored by one pass"
    base_params = {key: v for key, v in params.items() if key not in _DROPPED_PARAMS}
    base_params.update(SPLITS=splits, KCHUNK=chunk)
    reads: dict[str, str | Buf] = {"a": Buf(p.a, vector=True), "b": Buf(p.b, vector=True, wide=True)}
    if p.a_scale is not None:  # a gate over A's k (TRANS_A), per batch
        assert p.trans_a, p
        reads["ascale"] = Buf(p.a_scale.tensor, vector=True)
        base_params["ASCALE_BS"] = p.a_scale.batch_stride
    if split:  # the epilogue runs in the second pass
        base_params = {key: v for key, v in base_params.items() if key not in _FINISH_PARAMS}
        total = nbatch * m * n
        # The alternative runs for at most CHUNKED_MAX_M rows (its guard): partials for as many.
        rows_cap = m if isinstance(m, int) else CHUNKED_MAX_M
        partial = ctx.scratch(splits * nbatch * rows_cap * n, "float32", "splitk")
        base_params["P"] = total
        writes: dict[str, str | Buf] = {"partial": Buf(partial, vector=True)}
        kernel_defs = {key: v for key, v in defs.items() if key not in ("GEMM", "HAS_C")}
    else:  # the epilogue runs here
        kernel_defs, base_params, reads = p.epilogue.onto(defs, base_params, {**reads, **epilogue_reads})
        kernel_defs.update(p.epilogue.in_store(ctx, p.y, kernel_defs), TRANS_Y=p.trans_y)
        writes = stored(ctx, p.y, kernel_defs)
    kernel_defs["SPLIT"] = split
    kernel_defs["TRANS_A"] = p.trans_a
    if p.a_scale is not None:  # (not set otherwise: the register variant renders the same kernel)
        kernel_defs["A_SCALE"] = True
    if p.a_window is not None:
        assert p.trans_a and p.trans_y, p
        kernel_defs["A_WINDOW"] = True
        w = p.a_window
        base_params.update(A_PLANE=w.plane, A_OW=w.ow, A_ROWSTEP=w.rowstep, A_COLSTEP=w.colstep)
    baked = not p.shared_sizes

    def rows_class(rows: int) -> list[Step]:
        rblocks = ceil_div(m, rows)
        defs, class_reads = finished_by(p, rows, rows_defs(p, base_params, {**kernel_defs, "ROWS": rows}), reads)
        return [ctx.dispatch(
            "matmul/gemv_chunked.wgsl", defs=defs,
            params={**base_params, "RBLOCKS": rblocks}, reads=class_reads, writes=writes, reports=reports,
            workgroups=(ceil_div(n, COLUMNS_PER_WORKGROUP), 1, nbatch * rblocks * splits),
            # Row classes past one take every param as an immediate, so products of other sizes
            # share their kernel (one compile each on lavapipe; the register variant's is the
            # same); one row (decode) keeps its sizes baked (fp32 decode ran ~10 % slower
            # without) unless the product asks to share (Product.shared_sizes: the squeeze-excite
            # convs, 12 of mobilenet_v3_large's kernels at ~0.15 s of compile each on Mesa 25).
            immediates=(*base_params, "RBLOCKS") if rows > 1 or not baked else ())]

    (narrow_rows, _), (wide_rows, wide_first) = CHUNK_ROWS[-2:]
    if isinstance(m, int) and m < wide_first:
        steps = rows_class(next((r for r, first in reversed(CHUNK_ROWS) if m >= first), 1))
    elif isinstance(m, int):  # the widest class where the adapter runs it fastest, else the one below
        steps = ctx.select("matmul/gemv_chunked/rows", [
            (f"rows{wide_rows}", rows_class(wide_rows), ALWAYS, WIDE_TILES),
            (f"rows{narrow_rows}", rows_class(narrow_rows), ALWAYS, ALWAYS)], interchangeable=True)
    else:  # every class computes any M; each is preferred up to its last row count (the widest
        # from its first, on an adapter with wide tiles; the one below it takes the rest). Listed
        # from one row up: at new dims the runtime stands in only a warm class listed before the
        # choice (runtime/ahead.py _prefer_warm): a narrower one, or the 32-row class where it is
        # eligible (from 17 rows) for the 16-row one
        lasts = [first - 1 for _, first in CHUNK_ROWS[1:]]
        classes = [(f"rows{rows}", rows_class(rows), ALWAYS, at_most(m, last))
                   for (rows, _), last in zip(CHUNK_ROWS[:-1], lasts)]
        classes.insert(-1, (f"rows{wide_rows}", rows_class(wide_rows), at_least(m, wide_first), WIDE_TILES))
        classes[-1] = (*classes[-1][:3], ALWAYS)
        steps = ctx.select("matmul/gemv_chunked/rows", classes, interchangeable=True)
    if split:
        finish_defs, finish_params, finish_reads = p.epilogue.onto(
            {key: v for key, v in defs.items() if key in ("T", "GEMM", "HAS_C", "CHECKED")},
            {key: v for key, v in params.items() if key in ("M", "N", *_FINISH_PARAMS)},
            {"partial": partial, **epilogue_reads})
        steps.append(ctx.dispatch(
            "matmul/splitk.wgsl", defs=finish_defs, params={**finish_params, "P": total, "SPLITS": splits},
            reads=finish_reads, writes={"y": p.y}, workgroups=ctx.grid(total), reports=reports))
    return steps


__all__ = ["AWindow", "CHUNKED_MAX_M", "QUAD_EPILOGUE_ROWS", "chunked_applies", "finished_by", "plan_chunked",
           "rows_defs", "stored"]
