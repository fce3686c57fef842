"""The many-rows matrix product: kernel variants, the split-K they share, and the heuristic
choosing among them (operators/matmul/gemv.py holds the few-rows family).

Variants (each a `plan_*` function taking the product and returning its steps, the shape an
autotuner's alternatives have):
- `shared` (`matmul/gemm.wgsl` over `matmul/tile.wgsl`): 16x16 threads stage K-slices of A and B
  in shared memory and keep an RM x RN micro-tile each in registers: the pattern a GPU wants.
  Every operand layout (TRANS_A / TRANS_B), integer types and int64's checked arithmetic.
- `register` / `register16` (`matmul/gemv_chunked.wgsl` with 32 / 16 rows per invocation): no shared memory, no
  barriers; each invocation holds 32 rows x 1 vec4 column group in mat4x4 accumulators and
  streams A and B with vec4 loads (A's rows shared through subgroups where the adapter has
  them): the pattern a CPU-type adapter runs fastest (lavapipe, 1024^3 under load, with 16
  rows and no subgroups: 2.6 s against the shared-memory kernel's 11.8 s). f32 compute over any
  float storage (f16 included), B row-major, A either way (a pointwise conv's k-major weights:
  M = 576, K = 96, N = 196 in 1.44 ms against conv_register's 2.48), K and N static multiples of 4.
  32 rows where the adapter has wide register tiles (the "wide-register-tiles" trait: lavapipe
  before Mesa 25), 16 elsewhere: whisper's fc1 product (M 1500, K 384, N 1536) on Mesa 22.3 in
  165 / 211 ms, on Mesa 25 in 85 / 44 ms (runtime/device.py NARROW_TILES_MESA).

Both bound each invocation's trip count by construction: K is split into ranges (at most
TILED_KCHUNK, resp. gemv.MAX_KCHUNK, elements of K per invocation) whose raw partial sums
`matmul/splitk.wgsl` adds up, applying the epilogue (alpha, beta * C, bias) once. lavapipe stops
an invocation's loops after ~65,535 iterations in all, silently.

`plan_alternatives` offers every variant that applies, few-rows ones (operators/matmul/gemv.py)
included, as the alternatives of one tuned Select step: the runtime times the eligible ones on
the adapter at hand and replays the fastest per shape class (runtime/tuner.py). With tuning off
it replays the first eligible alternative the heuristic prefers: on a CPU-type adapter the
chunked kernel up to CHUNKED_MAX_M rows, a register kernel above; elsewhere the coalesced
kernel up to the small-M bound, the shared-memory kernel above. One plan serves every adapter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from onyxia.ir.shapes import Dim
from onyxia.operators.base import Buf, PlanCtx
from onyxia.operators.common import ceil_div
from onyxia.operators.matmul.epilogue import Epilogue
from onyxia.operators.matmul.gemv import (
    CHUNK_ROWS,
    CHUNKED_MAX_M,
    COLUMNS_PER_WORKGROUP,
    MAX_KCHUNK,
    WIDE_TILES,
    Product,
    chunked_applies,
    finished_by,
    rows_defs,
    stored,
)
from onyxia.plan import ALWAYS, Step, adapter, at_least, at_most

# Register micro-tiles (rows, columns per thread) of the shared-memory kernel, largest first:
# 64x128 output tiles need the fewest loads per multiply-add; a small product takes a smaller
# tile when the larger one would give fewer than SMALL_GRID workgroups (a large GPU sits idle).
TILES = ((4, 8), (4, 4), (2, 2))
SMALL_GRID = 32
BK = 16  # the K-slice of matmul/tile.wgsl
# K per invocation of the shared-memory kernel: its slice loop and inner loop run ~K * 17/16
# times in all, 8,704 here, far below lavapipe's ~65,535 (a multiple of BK: ranges meet exactly).
TILED_KCHUNK = 8192
REGISTER_ROWS = 32  # gemv_chunked.wgsl's largest row class: 32 rows x 4 columns per invocation
NARROW_REGISTER_ROWS = 16  # the register16 variant's (adapters without wide register tiles)
assert REGISTER_ROWS == CHUNK_ROWS[-1][0]  # the chunked kernel's top row class
FINISH_PARAMS = ("ALPHA", "BETA", "C_MS", "C_NS")
SCRATCH_DTYPE = {"f32": "float32", "i32": "int32", "u32": "uint32"}


def register_applies(p: Product, checked: bool) -> bool:
    """chunked_applies, or a product whose symbolic N and K its caller guards to multiples of 4
    (Product.quads; K then always splits, k_splits)."""
    return not checked and (chunked_applies(p) or (p.quads and p.dtype == "f32" and not p.trans_b and not p.b_panels))


def k_splits(k: Dim, chunk_max: int, align: int) -> tuple[Dim, Dim, bool]:
    """(splits, chunk, split?) for K: ranges of at most chunk_max, multiples of `align`."""
    if isinstance(k, int):
        splits = max(ceil_div(k, chunk_max), 1)
        chunk = align * ceil_div(ceil_div(k, splits), align) if k else align
        return splits, chunk, splits > 1
    return ceil_div(k, chunk_max), chunk_max, True  # grows at run time: split whenever it is long


def plan_finish(ctx: PlanCtx, *, partial: str, total: Dim, splits: Dim, m: Dim, n: Dim, params: dict, defs: dict,
                epilogue_reads: dict[str, str], y: str, reports: str | None,
                epilogue: Epilogue = Epilogue()) -> Step:
    """splitk.wgsl: y = finish(sum of the partials) over `total` = batch * m * n elements,
    with the fused `epilogue` after Gemm's alpha, beta * C."""
    finish_defs, finish_params, reads = epilogue.onto(
        {key: v for key, v in defs.items() if key in ("T", "GEMM", "HAS_C", "CHECKED")},
        {key: v for key, v in params.items() if key in FINISH_PARAMS}, {"partial": partial, **epilogue_reads})
    return ctx.dispatch("matmul/splitk.wgsl", defs=finish_defs,
                        params={"M": m, "N": n, **finish_params, "P": total, "SPLITS": splits},
                        reads=reads, writes={"y": y}, workgroups=ctx.grid(total), reports=reports)


def plan_shared(ctx: PlanCtx, p: Product, nbatch: Dim, params: dict, defs: dict,
                epilogue_reads: dict[str, str], reports: str | None) -> list[Step]:
    """The shared-memory tiled variant, split-K past TILED_KCHUNK."""
    m, n = p.m, p.n
    rm, rn = TILES[-1]
    for rm, rn in TILES:  # the largest tile that still gives enough workgroups (symbolic: many)
        grid = ceil_div(m, 16 * rm) * ceil_div(n, 16 * rn) * nbatch
        if not isinstance(grid, int) or grid >= SMALL_GRID:
            break
    splits, chunk, split = k_splits(p.k, TILED_KCHUNK, BK)
    tiled_defs = {**defs, "RM": rm, "RN": rn, "TRANS_A": p.trans_a, "TRANS_B": p.trans_b}
    workgroups = (ceil_div(n, 16 * rn), ceil_div(m, 16 * rm), nbatch * splits)
    if not split:
        kernel_defs, kernel_params, reads = p.epilogue.onto(tiled_defs, params, {"a": p.a, "b": p.b, **epilogue_reads})
        return [ctx.dispatch("matmul/gemm.wgsl", defs=kernel_defs, params=kernel_params, reads=reads,
                             writes={"y": p.y}, workgroups=workgroups, reports=reports)]
    total = nbatch * m * n
    partial = ctx.scratch(splits * nbatch * m * n, SCRATCH_DTYPE[p.dtype], "splitk")
    tiled_defs.update(GEMM=False, HAS_C=False, SPLIT=True)  # the epilogue runs in the second pass
    kernel_params = {key: v for key, v in params.items() if key not in FINISH_PARAMS}
    kernel_params.update(SPLITS=splits, KCHUNK=chunk, P=total)
    return [
        ctx.dispatch("matmul/gemm.wgsl", defs=tiled_defs, params=kernel_params, reads={"a": p.a, "b": p.b},
                     writes={"partial": partial}, workgroups=workgroups, reports=reports),
        plan_finish(ctx, partial=partial, total=total, splits=splits, m=m, n=n, params=params, defs=defs,
                    epilogue_reads=epilogue_reads, y=p.y, reports=reports, epilogue=p.epilogue),
    ]


def plan_register(ctx: PlanCtx, p: Product, nbatch: Dim, params: dict, defs: dict,
                  epilogue_reads: dict[str, str], reports: str | None, rows: int = REGISTER_ROWS) -> list[Step]:
    """The register-tiled variant (see the module doc) with `rows` rows an invocation, split-K
    past gemv.MAX_KCHUNK."""
    m, n = p.m, p.n
    splits, chunk, split = k_splits(p.k, MAX_KCHUNK, 4)
    kernel_params = {key: v for key, v in params.items() if key not in ("A_MS", "A_KS", "B_KS", "B_NS")}
    rblocks = ceil_div(m, rows)
    kernel_params.update(SPLITS=splits, KCHUNK=chunk, RBLOCKS=rblocks)
    reads: dict[str, str | Buf] = {"a": Buf(p.a, vector=True), "b": Buf(p.b, vector=True, wide=True)}
    kernel_defs = {**defs, "ROWS": rows, "SPLIT": split, "TRANS_A": p.trans_a}
    workgroups = (ceil_div(n, COLUMNS_PER_WORKGROUP), 1, nbatch * rblocks * splits)
    if not split:
        kernel_defs, kernel_params, reads = p.epilogue.onto(kernel_defs, kernel_params, {**reads, **epilogue_reads})
        # the defs plan_chunked gives its 32-row class: one shader for both
        kernel_defs.update(p.epilogue.in_store(ctx, p.y, kernel_defs), TRANS_Y=p.trans_y)
        writes = stored(ctx, p.y, kernel_defs)
        kernel_defs, reads = finished_by(p, rows, rows_defs(p, kernel_params, kernel_defs), reads)
        return [ctx.dispatch("matmul/gemv_chunked.wgsl", defs=kernel_defs, params=kernel_params, reads=reads,
                             writes=writes, workgroups=workgroups, reports=reports,
                             immediates=tuple(kernel_params))]  # shared by sizes (gemv.py rows_class)
    total = nbatch * m * n
    partial = ctx.scratch(splits * nbatch * m * n, "float32", "splitk")
    kernel_defs = rows_defs(p, kernel_params, {**kernel_defs, "GEMM": False, "HAS_C": False})
    kernel_params = {key: v for key, v in kernel_params.items() if key not in FINISH_PARAMS}
    kernel_params["P"] = total
    return [
        ctx.dispatch("matmul/gemv_chunked.wgsl", defs=kernel_defs, params=kernel_params, reads=reads,
                     writes={"partial": Buf(partial, vector=True)}, workgroups=workgroups, reports=reports,
                     immediates=tuple(kernel_params)),
        plan_finish(ctx, partial=partial, total=total, splits=splits, m=m, n=n, params=params, defs=defs,
                    epilogue_reads=epilogue_reads, y=p.y, reports=reports, epilogue=p.epilogue),
    ]


Planner = Callable[[], list[Step]]  # one variant's steps

# The variants in the heuristic's order: the first eligible one it prefers runs with tuning off.
ORDER = ("chunked", "lanes", "coalesced", "register", "register16", "shared")


def plan_alternatives(ctx: PlanCtx, p: Product, small_m: int, checked: bool, planners: Mapping[str, Planner],
                      nbatch: Dim = 1) -> list[Step]:
    """The product as one tuned Select over every variant that applies (`planners`: "chunked",
    "lanes", "coalesced", "register", "register16", "shared"), each eligible for the rows it takes:
    the few-rows kernels up to their bounds, the register ones from the rows their tile fills, the
    shared-memory one everywhere. The tuner chooses per shape
    class (M rounded up to a power of two), so decode and prefill may take different kernels
    with nothing recompiled; a static M offers only the kernels that take it."""
    m = p.m
    chunked = chunked_applies(p) and not checked  # "lanes": the CPU-type kernel where this one does not apply
    register = register_applies(p, checked)
    applies = {"chunked": chunked, "lanes": not chunked and not checked,
               "coalesced": True, "register": register, "register16": register, "shared": True}
    # The register kernels from the rows their tile fills (the chunked kernel's classes: 16 from 5
    # rows, 32 from 17): on fewer a few-rows kernel computes less, and timing them at decode cost
    # bench_llm's tuned decode ~8 % (Mesa 22.3, 10.6 -> 9.7 tok/s).
    first = {rows: first for rows, first in CHUNK_ROWS}
    guard = {"chunked": at_most(m, CHUNKED_MAX_M), "lanes": at_most(m, small_m), "coalesced": at_most(m, small_m),
             "register": at_least(m, first[REGISTER_ROWS]), "register16": at_least(m, first[NARROW_REGISTER_ROWS])}
    cpu = adapter("cpu")
    prefer = {"chunked": cpu, "lanes": cpu, "coalesced": ALWAYS, "register": cpu & WIDE_TILES, "register16": cpu,
              "shared": ALWAYS}
    alternatives = [(label, planners[label](), guard.get(label, ALWAYS), prefer[label])
                    for label in ORDER if applies[label] and not guard.get(label, ALWAYS).never]
    dims = "x".join(str(d) for d in (p.n, p.k) if isinstance(d, int))
    key = f"matmul/{p.dtype}{'/ta' if p.trans_a else ''}{'/tb' if p.trans_b else ''}" \
          f"{'/panels' if p.b_panels else ''}{'/checked' if checked else ''}/{dims}"
    return ctx.select(key, alternatives, tuned=True, shape=(m, p.n, p.k, nbatch))


__all__ = ["BK", "NARROW_REGISTER_ROWS", "ORDER", "Planner", "SCRATCH_DTYPE", "TILED_KCHUNK", "k_splits",
           "plan_alternatives", "plan_finish", "plan_register", "plan_shared", "register_applies"]
