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

`few_rows_heuristic` is the deterministic choice: on a CPU-type adapter the chunked kernel up to
CHUNKED_MAX_M rows wherever it applies, elsewhere the coalesced kernel up to the caller's small-M
bound, the many-rows kernels above. The adapter enters as the ADAPTER_CPU symbol, which the
runtime sets at load, so one plan serves every adapter. gemm_variants.plan_alternatives offers
every variant that applies as one Tunable step, which the runtime times on the adapter at hand
(runtime/tuner.py), the heuristic being its choice with tuning off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from onyxia.ir.shapes import Dim
from onyxia.operators.base import Buf, PlanCtx
from onyxia.operators.common import ceil_div, is_zero, select_small
from onyxia.operators.matmul.epilogue import Epilogue
from onyxia.plan import Step

# Rows the chunked kernel takes on a CPU-type adapter: up to 32 per invocation in registers, a
# row block per wid.z above (B is read once per block). Measured on lavapipe at M = 32 and 64
# (K = 512, N = 1408): the tiled kernel reaches 0.6 - 1.2 GF/s per core, this one ~10x that;
# above 64 rows the choice belongs to the GEMM variants.
CHUNKED_MAX_M = 64
# Row classes of the chunked kernel (ROWS def, first row count): a symbolic M plans one dispatch
# per class, the one whose class holds M runs. Decode (M = 1) takes vec4 accumulators; 17 - 64
# rows take blocks of 32 (lavapipe, M = 64 with subgroups: ~35 GF/s, blocks of 16 ~28).
CHUNK_ROWS = ((1, 1), (4, 2), (16, 5), (32, 17))
COLUMNS_PER_WORKGROUP = 32  # 8 invocations x 1 vec4 column group (gemv_chunked.wgsl)


# The longest K one invocation walks: KCHUNK / 4 loop iterations, far below the ~65k after
# which lavapipe stops an invocation's loops; a longer K is split and added by splitk.wgsl.
MAX_KCHUNK = 16384
_DROPPED_PARAMS = ("A_MS", "A_KS", "B_KS", "B_NS")  # layout strides the chunked kernel bakes in
_FINISH_PARAMS = ("ALPHA", "BETA", "C_MS", "C_NS")


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


@dataclass(frozen=True)
class FewRowsChoice:
    """Where each kernel runs: 1 or 0, or an expression over M and ADAPTER_CPU."""

    chunked: Dim
    coalesced: Dim
    tiled: Dim


def chunked_applies(p: Product) -> bool:
    """f32 products of row-major operands whose K and N are static multiples of 4 (vec4 reads)."""
    return (p.dtype == "f32" and not p.trans_a and not p.trans_b and isinstance(p.k, int) and isinstance(p.n, int)
            and p.k % 4 == 0 and p.n % 4 == 0 and p.k > 0)


def few_rows_heuristic(ctx: PlanCtx, p: Product, m: Dim, small_m: int, checked: bool) -> FewRowsChoice:
    """The deterministic choice of kernel per adapter type and row count (see the module doc)."""
    coalesced = select_small(m, small_m)
    if checked or not chunked_applies(p):
        return FewRowsChoice(0, coalesced, 1 - coalesced)
    cpu = ctx.adapter_cpu()
    chunked = cpu * select_small(m, CHUNKED_MAX_M)
    coalesced = (1 - cpu) * coalesced
    return FewRowsChoice(chunked, coalesced, 1 - chunked - coalesced)


def _row_classes(m: Dim) -> list[tuple[int, Dim]]:
    """(ROWS, 1 where this class holds M) for each chunked dispatch to plan."""
    if isinstance(m, int):
        rows = next((r for r, first in reversed(CHUNK_ROWS) if m >= first), 1)
        return [(rows, 1)]
    # The top class has no upper bound: past CHUNKED_MAX_M rows it runs where the caller enables
    # it (gemm_variants: the register variant is this kernel with the same rows).
    bounds: list[int | None] = [first for _, first in CHUNK_ROWS[1:]] + [None]
    return [(rows, (1 if upper is None else select_small(m, upper - 1)) - select_small(m, first - 1))
            for (rows, first), upper in zip(CHUNK_ROWS, bounds)]


def plan_chunked(ctx: PlanCtx, p: Product, nbatch: Dim, enabled: Dim, params: dict, defs: dict,
                 epilogue_reads: dict[str, str], reports: str | None) -> list[Step]:
    """The chunked variant: one dispatch per row class (one when M is static), + a split-K sum.
    `enabled`: where it runs; past CHUNKED_MAX_M rows only its top class has work."""
    m, n, k = p.m, p.n, p.k
    splits = ceil_div(k, MAX_KCHUNK)
    chunk = 4 * ceil_div(ceil_div(k, splits), 4)
    split = splits > 1
    base_params = {key: v for key, v in params.items() if key not in _DROPPED_PARAMS}
    base_params.update(SPLITS=splits, KCHUNK=chunk)
    reads: dict[str, str | Buf] = {"a": Buf(p.a, vector=True), "b": Buf(p.b, vector=True, wide=True)}
    if split:  # the epilogue runs in the second pass
        base_params = {key: v for key, v in base_params.items() if key not in _FINISH_PARAMS}
        total = nbatch * m * n
        # Rows the partials hold: M where the kernel runs, else as many as it could take.
        fits = select_small(m, CHUNKED_MAX_M)
        rows_cap = m if isinstance(m, int) else m * enabled + CHUNKED_MAX_M * (1 - fits) * (1 - enabled)
        partial = ctx.scratch(splits * nbatch * rows_cap * n, "float32", "splitk")
        base_params["P"] = total
        writes: dict[str, str | Buf] = {"partial": partial}
        kernel_defs = {key: v for key, v in defs.items() if key not in ("GEMM", "HAS_C")}
    else:  # the epilogue runs here
        kernel_defs, base_params, reads = p.epilogue.onto(defs, base_params, {**reads, **epilogue_reads})
        writes = {"y": p.y}
    kernel_defs["SPLIT"] = split
    steps: list[Step] = []
    for rows, holds in _row_classes(m):
        on = enabled * holds
        if is_zero(on):
            continue
        rblocks = ceil_div(m, rows)
        steps.append(ctx.dispatch(
            "matmul/gemv_chunked.wgsl", defs={**kernel_defs, "ROWS": rows},
            params={**base_params, "RBLOCKS": rblocks}, reads=reads, writes=writes, reports=reports,
            workgroups=(ceil_div(n, COLUMNS_PER_WORKGROUP), 1, nbatch * rblocks * splits * on)))
    if split:
        finish_defs, finish_params, finish_reads = p.epilogue.onto(
            {key: v for key, v in defs.items() if key in ("T", "GEMM", "HAS_C", "CHECKED")},
            {key: v for key, v in params.items() if key in ("M", "N", *_FINISH_PARAMS)},
            {"partial": partial, **epilogue_reads})
        steps.append(ctx.dispatch(
            "matmul/splitk.wgsl", defs=finish_defs, params={**finish_params, "P": total, "SPLITS": splits},
            reads=finish_reads, writes={"y": p.y}, workgroups=ctx.grid(total * enabled), reports=reports))
    return steps


__all__ = ["CHUNKED_MAX_M", "FewRowsChoice", "chunked_applies", "few_rows_heuristic", "plan_chunked"]
