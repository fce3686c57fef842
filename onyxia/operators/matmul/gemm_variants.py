"""The many-rows matrix product: kernel variants, the split-K they share, and the heuristic
choosing among them (operators/matmul/gemv.py holds the few-rows family).

Variants (each a `plan_*` function taking the product and returning its steps, the shape an
autotuner's alternatives have):
- `shared` (`matmul/gemm.wgsl` over `matmul/tile.wgsl`): 16x16 threads stage K-slices of A and B
  in shared memory and keep an RM x RN micro-tile each in registers: the pattern a GPU wants.
  Every operand layout (TRANS_A / TRANS_B), integer types and int64's checked arithmetic.
- `register` (`matmul/gemv_chunked.wgsl` with 32 rows per invocation): no shared memory, no
  barriers; each invocation holds 32 rows x 1 vec4 column group in mat4x4 accumulators and
  streams A and B with vec4 loads (A's rows shared through subgroups where the adapter has
  them): the pattern a CPU-type adapter runs fastest (lavapipe, 1024^3 under load, with 16
  rows and no subgroups: 2.6 s against the shared-memory kernel's 11.8 s). f32 compute over any
  float storage (f16 included), row-major operands, K and N static multiples of 4.

Both bound each invocation's trip count by construction: K is split into ranges (at most
TILED_KCHUNK, resp. gemv.MAX_KCHUNK, elements of K per invocation) whose raw partial sums
`matmul/splitk.wgsl` adds up, applying the epilogue (alpha, beta * C, bias) once. lavapipe stops
an invocation's loops after ~65,535 iterations in all, silently.

`plan_alternatives` offers every variant that applies, few-rows ones (operators/matmul/gemv.py)
included, as the alternatives of one Tunable step: the runtime times them on the adapter at hand
and replays the fastest per shape class (runtime/tuner.py). With tuning off it replays the
deterministic heuristic: few_rows_heuristic's kernel for few rows, above that
`many_rows_heuristic`'s, the register kernel on a CPU-type adapter where it applies, the
shared-memory kernel elsewhere. The adapter enters as the ADAPTER_CPU symbol, so one plan serves
every adapter (a kernel's grid is 0 where it does not run).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from onyxia.ir.shapes import Dim
from onyxia.operators.base import Buf, PlanCtx
from onyxia.operators.common import ceil_div, is_zero, select_small
from onyxia.operators.matmul.epilogue import Epilogue
from onyxia.operators.matmul.gemv import (
    CHUNK_ROWS,
    CHUNKED_MAX_M,
    COLUMNS_PER_WORKGROUP,
    MAX_KCHUNK,
    Product,
    chunked_applies,
    few_rows_heuristic,
)
from onyxia.plan import Step

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
assert REGISTER_ROWS == CHUNK_ROWS[-1][0]  # plan_alternatives lets the chunked top class take its place
FINISH_PARAMS = ("ALPHA", "BETA", "C_MS", "C_NS")
SCRATCH_DTYPE = {"f32": "float32", "i32": "int32", "u32": "uint32"}


@dataclass(frozen=True)
class ManyRowsChoice:
    """Where each many-rows kernel runs: 1 or 0, or an expression over M and ADAPTER_CPU."""

    register: Dim
    shared: Dim


def register_applies(p: Product, checked: bool) -> bool:
    return not checked and chunked_applies(p)


def many_rows_heuristic(ctx: PlanCtx, p: Product, m: Dim, small_m: int, tiled: Dim, checked: bool) -> ManyRowsChoice:
    """Split `tiled` (where the few-rows kernels do not run) between the two variants."""
    if is_zero(tiled) or not register_applies(p, checked):
        return ManyRowsChoice(0, tiled)
    # few_rows_heuristic gave the chunked kernel M <= CHUNKED_MAX_M on a CPU adapter and the
    # coalesced one M <= small_m elsewhere: the complements, written without cpu * cpu terms.
    cpu = ctx.adapter_cpu()
    return ManyRowsChoice(cpu * (1 - select_small(m, CHUNKED_MAX_M)), (1 - cpu) * (1 - select_small(m, small_m)))


def k_splits(k: Dim, chunk_max: int, align: int) -> tuple[Dim, Dim, bool]:
    """(splits, chunk, split?) for K: ranges of at most chunk_max, multiples of `align`."""
    if isinstance(k, int):
        splits = max(ceil_div(k, chunk_max), 1)
        chunk = align * ceil_div(ceil_div(k, splits), align) if k else align
        return splits, chunk, splits > 1
    return ceil_div(k, chunk_max), chunk_max, True  # grows at run time: split whenever it is long


def rows_capacity(m: Dim, enabled: Dim) -> Dim:
    """Rows a scratch buffer holds: M where the kernel runs, one row where it is skipped (a plan
    whose M switches kernels must not grow a buffer the other kernel never uses)."""
    return m if isinstance(enabled, int) else m * enabled + (1 - enabled)


def plan_finish(ctx: PlanCtx, *, partial: str, total: Dim, splits: Dim, m: Dim, n: Dim, params: dict, defs: dict,
                epilogue_reads: dict[str, str], y: str, enabled: Dim, reports: str | None,
                epilogue: Epilogue = Epilogue()) -> Step:
    """splitk.wgsl: y = finish(sum of the partials) over `total` = batch * m * n elements,
    with the fused `epilogue` after Gemm's alpha, beta * C."""
    finish_defs, finish_params, reads = epilogue.onto(
        {key: v for key, v in defs.items() if key in ("T", "GEMM", "HAS_C", "CHECKED")},
        {key: v for key, v in params.items() if key in FINISH_PARAMS}, {"partial": partial, **epilogue_reads})
    return ctx.dispatch("matmul/splitk.wgsl", defs=finish_defs,
                        params={"M": m, "N": n, **finish_params, "P": total, "SPLITS": splits},
                        reads=reads, writes={"y": y}, workgroups=ctx.grid(total * enabled), reports=reports)


def plan_shared(ctx: PlanCtx, p: Product, nbatch: Dim, enabled: Dim, params: dict, defs: dict,
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
    workgroups = (ceil_div(n, 16 * rn), ceil_div(m, 16 * rm) * enabled, nbatch * splits)
    if not split:
        kernel_defs, kernel_params, reads = p.epilogue.onto(tiled_defs, params, {"a": p.a, "b": p.b, **epilogue_reads})
        return [ctx.dispatch("matmul/gemm.wgsl", defs=kernel_defs, params=kernel_params, reads=reads,
                             writes={"y": p.y}, workgroups=workgroups, reports=reports)]
    total = nbatch * m * n
    partial = ctx.scratch(splits * nbatch * rows_capacity(m, enabled) * n, SCRATCH_DTYPE[p.dtype], "splitk")
    tiled_defs.update(GEMM=False, HAS_C=False, SPLIT=True)  # the epilogue runs in the second pass
    kernel_params = {key: v for key, v in params.items() if key not in FINISH_PARAMS}
    kernel_params.update(SPLITS=splits, KCHUNK=chunk, P=total)
    return [
        ctx.dispatch("matmul/gemm.wgsl", defs=tiled_defs, params=kernel_params, reads={"a": p.a, "b": p.b},
                     writes={"partial": partial}, workgroups=workgroups, reports=reports),
        plan_finish(ctx, partial=partial, total=total, splits=splits, m=m, n=n, params=params, defs=defs,
                    epilogue_reads=epilogue_reads, y=p.y, enabled=enabled, reports=reports, epilogue=p.epilogue),
    ]


def plan_register(ctx: PlanCtx, p: Product, nbatch: Dim, enabled: Dim, params: dict, defs: dict,
                  epilogue_reads: dict[str, str], reports: str | None) -> list[Step]:
    """The register-tiled variant (see the module doc), split-K past gemv.MAX_KCHUNK."""
    m, n = p.m, p.n
    splits, chunk, split = k_splits(p.k, MAX_KCHUNK, 4)
    kernel_params = {key: v for key, v in params.items() if key not in ("A_MS", "A_KS", "B_KS", "B_NS")}
    rblocks = ceil_div(m, REGISTER_ROWS)
    kernel_params.update(SPLITS=splits, KCHUNK=chunk, RBLOCKS=rblocks)
    reads: dict[str, str | Buf] = {"a": Buf(p.a, vector=True), "b": Buf(p.b, vector=True, wide=True)}
    kernel_defs = {**defs, "ROWS": REGISTER_ROWS, "SPLIT": split}
    workgroups = (ceil_div(n, COLUMNS_PER_WORKGROUP), 1, nbatch * rblocks * splits * enabled)
    if not split:
        kernel_defs, kernel_params, reads = p.epilogue.onto(kernel_defs, kernel_params, {**reads, **epilogue_reads})
        return [ctx.dispatch("matmul/gemv_chunked.wgsl", defs=kernel_defs, params=kernel_params, reads=reads,
                             writes={"y": p.y}, workgroups=workgroups, reports=reports)]
    total = nbatch * m * n
    partial = ctx.scratch(splits * nbatch * rows_capacity(m, enabled) * n, "float32", "splitk")
    kernel_defs.update(GEMM=False, HAS_C=False)
    kernel_params = {key: v for key, v in kernel_params.items() if key not in FINISH_PARAMS}
    kernel_params["P"] = total
    return [
        ctx.dispatch("matmul/gemv_chunked.wgsl", defs=kernel_defs, params=kernel_params, reads=reads,
                     writes={"partial": partial}, workgroups=workgroups, reports=reports),
        plan_finish(ctx, partial=partial, total=total, splits=splits, m=m, n=n, params=params, defs=defs,
                    epilogue_reads=epilogue_reads, y=p.y, enabled=enabled, reports=reports, epilogue=p.epilogue),
    ]


Planner = Callable[[Dim], list[Step]]  # one variant's steps, given where it runs (1, 0 or an expression)


def plan_alternatives(ctx: PlanCtx, p: Product, small_m: int, checked: bool, planners: Mapping[str, Planner],
                      nbatch: Dim = 1) -> list[Step]:
    """The product as one Tunable over every variant that applies (`planners`: "chunked",
    "coalesced", "register", "shared"), defaulting to the heuristic's choice.

    Each alternative computes the product for every M: a few-rows kernel up to its bound and the
    heuristic's many-rows kernel above, a many-rows kernel everywhere. The tuner chooses per shape
    class (M rounded up to a power of two), so decode and prefill may take different kernels with
    nothing recompiled; a static M offers only the kernels that take it.
    """
    m = p.m
    bounds = {"chunked": CHUNKED_MAX_M, "coalesced": small_m}
    applies = {"chunked": chunked_applies(p) and not checked, "coalesced": True,
               "register": register_applies(p, checked), "shared": True}
    offered = [label for label, ok in applies.items()
               if ok and (label not in bounds or not isinstance(m, int) or m <= bounds[label])]
    few = few_rows_heuristic(ctx, p, m, small_m, checked)
    many = many_rows_heuristic(ctx, p, m, small_m, few.tiled, checked)

    def many_rows(where: Dim) -> list[Step]:
        """The heuristic's many-rows kernel where `where` says (1, 0 or an expression)."""
        if is_zero(where):
            return []
        if not applies["register"]:
            return planners["shared"](where)
        cpu = ctx.adapter_cpu()
        return [*(planners["register"](cpu * where) if not is_zero(cpu) else []),
                *(planners["shared"]((1 - cpu) * where) if not is_zero(1 - cpu) else [])]

    alternatives: dict[str, list[Step]] = {}
    for label in offered:
        if label in bounds:
            fits = select_small(m, bounds[label])
            if label == "chunked" and applies["register"] and not isinstance(m, int):
                # The register variant is the chunked kernel's top row class: past CHUNKED_MAX_M
                # rows on a CPU-type adapter that class runs on (one dispatch, not two).
                cpu = ctx.adapter_cpu()
                alternatives[label] = [*planners[label](fits + cpu * (1 - fits)),
                                       *planners["shared"]((1 - cpu) * (1 - fits))]
            else:
                alternatives[label] = [*planners[label](fits), *many_rows(1 - fits)]
        else:
            alternatives[label] = planners[label](1)
    weights = {"chunked": few.chunked, "coalesced": few.coalesced, "register": many.register, "shared": many.shared}
    assert all(is_zero(w) for label, w in weights.items() if label not in offered), (offered, weights)
    # The heuristic as an index: exactly one weight is 1 for any adapter and M.
    default = sum(offered.index(label) * weights[label] for label in offered)
    dims = "x".join(str(d) for d in (p.n, p.k) if isinstance(d, int))
    key = f"matmul/{p.dtype}{'/ta' if p.trans_a else ''}{'/tb' if p.trans_b else ''}" \
          f"{'/panels' if p.b_panels else ''}{'/checked' if checked else ''}/{dims}"
    return ctx.tunable(key, alternatives, default, shape=(m, p.n, p.k, nbatch))


__all__ = ["BK", "ManyRowsChoice", "Planner", "SCRATCH_DTYPE", "TILED_KCHUNK", "k_splits", "many_rows_heuristic",
           "plan_alternatives", "plan_finish", "plan_register", "plan_shared", "register_applies"]
