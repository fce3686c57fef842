"""MatMul and Gemm, planned onto kernels chosen by the shapes and the kind of adapter.

- many rows (operators/matmul/gemm_variants.py): `matmul/gemm.wgsl`, shared-memory tiles (64x128 per
  workgroup, 4x8 per thread; smaller for small products), or on a CPU-type adapter the
  barrier-free register-tiled `matmul/gemv_chunked.wgsl` with 32 rows per invocation; both
  split a long K and add the partials with `matmul/splitk.wgsl`;
- `matmul/gemv.wgsl`: work split over output columns and K for few rows (decode, M = 1), each
  element of B read once and coalesced, optionally split-K with `matmul/splitk.wgsl` adding up;
- `matmul/gemv_chunked.wgsl` instead on a CPU-type adapter, up to 64 rows (operators/matmul/gemv.py);
  where it does not apply (N or K not a multiple of 4: squeeze-excite products), gemv.wgsl's
  barrier-free LANES8 form ("lanes"), 8 invocations a workgroup, one column each;
- all of them as one tuned Select step whose guards say which kernel may run for the current M
  and which the heuristic prefers on this kind of adapter (prefill and decode share one plan):
  no value of a dynamic dim is read at plan time and nothing recompiles.

`plan_product` is the shared entry point; other operators (attention, quantized matmuls) can
describe their product as a `Product` and reuse it. A product's `epilogue` (elementwise ops that
passes/epilogue_fusion.py moved into onyxia::MatMulEpilogue / GemmEpilogue) runs in
`matmul::epilogue` wherever the output is stored: in the kernel, or in the split-K finish.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, numel, shape_str
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import (
    broadcast_strides,
    ceil_div,
    is_one,
    prefer_literal,
    strided_index_params,
)
from onyxia.operators.conv.scale import ChannelScale
from onyxia.operators.elementwise.elementwise import INT64_OVERFLOW
from onyxia.operators.elementwise.fused import FUSED_DOMAIN
from onyxia.operators.matmul.epilogue import Epilogue, fused_epilogue
from onyxia.operators.matmul.gemm_variants import (
    NARROW_REGISTER_ROWS,
    plan_alternatives,
    plan_finish,
    plan_register,
    plan_shared,
)
from onyxia.operators.matmul.gemv import MAX_KCHUNK, AWindow, chunked_applies, plan_chunked
from onyxia.operators.matmul.panels import PANEL_COLUMNS, PANELS_ATTR, from_panels
from onyxia.plan import Step

# Up to this many rows the split-over-N-and-K kernel wins: it reads B once for all rows, while
# the tiled kernel would waste most of a 64-row tile. One gemv pass handles SMALL_M rows.
SMALL_M = 8
GEMV_LANES = {False: (64, 4), True: (4, 64)}  # trans_b -> (columns, K lanes) per workgroup
LANES_COLUMNS = 8  # gemv.wgsl LANES8: columns per workgroup, one invocation each
LANES_KCHUNK = 4096  # ... and the K it walks per split (x at most 8 rows: 32,768 loop steps)
TARGET_WORKGROUPS = 512  # split K until a decode product fills a large GPU about this well
MIN_K_CHUNK = 256  # ... but never below this much K per split (the extra pass must pay off)
_EPILOGUE_PARAMS = ("ALPHA", "BETA", "C_MS", "C_NS")
_SCRATCH_DTYPE = {"f32": "float32", "i32": "int32", "u32": "uint32"}


@dataclass(frozen=True)
class Product:
    """y[batch] = finish(op(A)[batch] @ op(B)[batch]) with y contiguous [*batch, M, N] ([*batch, N,
    M] when trans_y: only the chunked kernel, one pass, plans it).

    A is [*batch_a, M, K] ([*batch_a, K, M] when trans_a), B is [*batch_b, K, N] ([.., N, K]
    when trans_b); the batch dims broadcast NumPy-style to `batch`. `finish` is the identity
    for MatMul and alpha * acc + beta * C (C broadcast to [M, N], no batch) for Gemm.
    """

    a: str
    b: str
    y: str
    dtype: str  # the compute type: f32 | i32 | u32 (f32 for every float storage, f16 included)
    m: Dim
    n: Dim
    k: Dim
    batch_a: Shape = ()
    batch_b: Shape = ()
    batch: Shape = ()
    trans_a: bool = False
    trans_b: bool = False
    gemm: bool = False
    c: str | None = None
    c_shape: Shape = ()
    c_strides: tuple[Dim, Dim] | None = None  # C's element strides over [M, N]; from c_shape if None
    alpha: float = 1.0
    beta: float = 1.0
    epilogue: Epilogue = Epilogue()  # fused elementwise ops after finish (f32 compute only)
    b_panels: bool = False  # B [K, N] stored in column panels (operators/matmul/panels.py), not row-major
    trans_y: bool = False  # y stored [*batch, N, M] (a pointwise conv's NCHW output: M its positions)
    # Kernels take every size as an immediate, none baked, so that a network's many small products
    # (a CNN's squeeze-excite convs) share them; decode's one-row kernel bakes them otherwise.
    shared_sizes: bool = False
    # N and K are multiples of 4 wherever the product runs (its caller's guard says so): the
    # register kernels then take them symbolic (FusedAttention's products over symbolic keys).
    quads: bool = False
    # A's k-th values scaled by this gate's k-th, per batch (a squeeze-excite gate over a
    # pointwise conv's input channels: operators/conv/scale.py); the chunked kernel alone reads it.
    a_scale: ChannelScale | None = None
    # A (k-major) read through a strided conv's window of positions, not a copy (gemv.py AWindow);
    # the chunked kernel alone reads it.
    a_window: AWindow | None = None


def plan_product(ctx: PlanCtx, p: Product) -> list[Step]:
    """The dispatches computing `p`; kernels and tile sizes depend on static dims only."""
    if p.c is not None and p.c_strides is None:
        p = replace(p, c_strides=tuple(broadcast_strides(p.c_shape, (p.m, p.n))))
    if p.batch and all(is_one(d) for d in p.batch_b) and not p.trans_a:
        # B is one matrix for every batch (a weight): the batch folds into M, which gives the
        # tiled kernel more rows and the decode kernel B read once for all of them.
        p = replace(p, m=numel(p.batch_a) * p.m, batch_a=(), batch=())
    # Panels are made for row-major 2-D weights wider than one panel (passes/weight_panels.py).
    assert not p.b_panels or (not p.trans_b and not p.batch_b and isinstance(p.n, int) and p.n > PANEL_COLUMNS), p
    if is_one(p.n) and not is_one(p.m) and not p.trans_a:
        # One output column (matrix @ vector): compute y^T = b^T @ A^T instead, the same bytes.
        # A's rows become contiguous columns of B^T that the decode kernel reads coalesced.
        p = replace(p, a=p.b, b=p.a, m=1, n=p.m, batch_a=p.batch_b, batch_b=p.batch_a, trans_b=True,
                    c_strides=p.c_strides[::-1] if p.c_strides else None)
    m, batch = p.m, p.batch
    index_params, index = strided_index_params(batch, [p.batch_a, p.batch_b], ["x0", "x1"])
    nbatch = numel(batch)
    params: dict = {
        "M": m, "N": p.n, "K": p.k, **index_params,
        "A_MS": 1 if p.trans_a else p.k, "A_KS": m if p.trans_a else 1,
        "A_BS": (p.a_window.plane if p.a_window is not None else m) * p.k,
        "B_KS": 1 if p.trans_b else p.n, "B_NS": p.k if p.trans_b else 1, "B_BS": p.k * p.n,
    }
    defs: dict = {"T": p.dtype, "INDEX": index}
    if p.b_panels:  # every variant indexes B through matmul::panels instead of its strides
        defs["B_PANELS"] = True
        del params["B_KS"], params["B_NS"]
    reports = None
    if ctx.tensor_dtype(p.y) == dtypes.INT64:  # int64 sums of products: check the int32 range
        defs["CHECKED"], reports = True, INT64_OVERFLOW
    epilogue_reads: dict[str, str] = {}
    if p.gemm:
        defs["GEMM"] = True
        params.update(ALPHA=_scalar(ctx, p.alpha, p.dtype, "alpha"), BETA=_scalar(ctx, p.beta, p.dtype, "beta"))
        if p.c is not None:
            defs["HAS_C"] = True
            params["C_MS"], params["C_NS"] = p.c_strides
            epilogue_reads = {"c": p.c}

    assert (p.a_scale is None and p.a_window is None) or p.trans_y, "only the chunked kernel (a transposed y) " \
        "scales A or reads it through a window"
    if p.trans_y:  # only the chunked kernel stores y transposed
        assert chunked_applies(p) and isinstance(p.k, int) and p.k <= MAX_KCHUNK, p
        return plan_chunked(ctx, p, nbatch, params, defs, epilogue_reads, reports)
    # Every kernel variant that applies, as one Select (operators/matmul/gemm_variants.py): the runtime
    # replays the fastest on its adapter, or the heuristic's choice with tuning off.
    def planner(plan):
        return lambda: plan(ctx, p, nbatch, params, defs, epilogue_reads, reports)

    planners = {"chunked": planner(plan_chunked), "register": planner(plan_register), "shared": planner(plan_shared),
                "register16": planner(partial(plan_register, rows=NARROW_REGISTER_ROWS)),
                "lanes": lambda: _plan_gemv(ctx, p, m, nbatch, params, defs, epilogue_reads, reports, lanes=True),
                "coalesced": lambda: _plan_gemv(ctx, p, m, nbatch, params, defs, epilogue_reads, reports)}
    return plan_alternatives(ctx, p, SMALL_M, "CHECKED" in defs, planners, nbatch)


def _scalar(ctx: PlanCtx, value: float, dtype: str, name: str) -> tuple[float | int, str]:
    if dtype == "f32":
        return float(value), "f32"
    if float(value) != int(value):
        raise ctx.fail(f"{name}={value} must be an integer for an integer product")
    return int(value), dtype


def _plan_gemv(ctx: PlanCtx, p: Product, m: Dim, nbatch: Dim, params: dict, defs: dict,
               epilogue_reads: dict[str, str], reports: str | None, lanes: bool = False) -> list[Step]:
    """gemv.wgsl: 256 threads a workgroup over 64 (4) columns x 4 (64) K lanes, or with `lanes`
    (LANES8, for CPU-type adapters) 8 invocations over 8 columns, each walking its K chunk alone
    for one row after another (at most LANES_KCHUNK x the guard's 8 rows: far below lavapipe's
    ~65,535 loop steps)."""
    cols = LANES_COLUMNS if lanes else GEMV_LANES[p.trans_b][0]
    col_blocks = ceil_div(p.n, cols)
    k = p.k
    if isinstance(k, int) and lanes:
        splits = ceil_div(k, LANES_KCHUNK) if k else 1
        chunk = max(ceil_div(k, splits), 1)
    elif isinstance(k, int):
        splits = 1
        if isinstance(col_blocks, int) and isinstance(nbatch, int) and col_blocks * nbatch:
            splits = max(1, min(ceil_div(TARGET_WORKGROUPS, col_blocks * nbatch), k // MIN_K_CHUNK))
        chunk = max(ceil_div(k, splits), 1)
    else:  # K grows at run time (attention over a KV cache): more splits as it grows
        chunk = MIN_K_CHUNK
        splits = ceil_div(k, chunk)
    rows_per_pass = SMALL_M if not isinstance(m, int) else 1 << max(m - 1, 0).bit_length()
    split = not is_one(splits)
    # LANES8 walks one row at a time: MT unused, one kernel for every M
    gemv_defs = {**defs, "MT": 1 if lanes else rows_per_pass, "TRANS_B": p.trans_b, "SPLIT": split,
                 **({"LANES8": True} if lanes else {})}
    gemv_params = {**params, "SPLITS": splits, "KCHUNK": chunk}
    if split:  # the epilogue runs in the second pass
        gemv_defs.update(GEMM=False, HAS_C=False)
        gemv_params = {k_: v for k_, v in gemv_params.items() if k_ not in _EPILOGUE_PARAMS}
    workgroups = (col_blocks, 1, nbatch * splits)
    if is_one(splits):
        gemv_defs, gemv_params, reads = p.epilogue.onto(gemv_defs, gemv_params, {"a": p.a, "b": p.b, **epilogue_reads})
        return [ctx.dispatch("matmul/gemv.wgsl", defs=gemv_defs, params=gemv_params, reads=reads, writes={"y": p.y},
                             workgroups=workgroups, reports=reports,
                             immediates=tuple(gemv_params) if lanes and p.shared_sizes else ())]
    total = nbatch * m * p.n
    # Sized for SMALL_M rows, the most its Select guard lets it run for: a prefill that runs
    # another kernel must not grow a scratch buffer it never uses.
    rows_cap = m if isinstance(m, int) else SMALL_M
    partial = ctx.scratch(splits * nbatch * rows_cap * p.n, _SCRATCH_DTYPE[p.dtype], "splitk")
    gemv_params["P"] = total
    return [
        ctx.dispatch("matmul/gemv.wgsl", defs=gemv_defs, params=gemv_params,
                     reads={"a": p.a, "b": p.b}, writes={"partial": partial}, workgroups=workgroups, reports=reports,
                     immediates=tuple(gemv_params) if lanes and p.shared_sizes else ()),
        plan_finish(ctx, partial=partial, total=total, splits=splits, m=m, n=p.n, params=params, defs=defs,
                    epilogue_reads=epilogue_reads, y=p.y, reports=reports, epilogue=p.epilogue),
    ]


def _row_major_b(ctx: FoldCtx, b: np.ndarray) -> np.ndarray:
    """B's value as the ONNX op reads it: stored in panels (PANELS_ATTR), put back in order."""
    return from_panels(b) if ctx.attr(PANELS_ATTR, 0) else b


# ---- MatMul -------------------------------------------------------------------------------

def matmul_shapes(ctx: InferenceCtx) -> tuple[Shape, Shape, Shape, Shape]:
    """(batch_a, batch_b, batch_out, out) with 1-D operands promoted as NumPy does."""
    a, b = ctx.input_shape(0), ctx.input_shape(1)
    if not a or not b:
        raise ctx.fail("MatMul operands must have rank >= 1", 0 if not a else 1)
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    if not ctx.same_dim(a2[-1], b2[-2]):
        raise ctx.fail(f"inner dims differ: input 0 has K={a2[-1]} (shape {shape_str(a)}), "
                       f"input 1 has K={b2[-2]} (shape {shape_str(b)})", 1)
    batch = ctx.broadcast([a2[:-2], b2[:-2]])
    out = tuple(batch) + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return a2[:-2], b2[:-2], batch, out


class MatMul(Operator):
    op_type = "MatMul"

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        if ctx.input_dtype(0) != ctx.input_dtype(1):
            raise ctx.fail(f"operand dtypes differ: {ctx.input_dtype(0)} vs {ctx.input_dtype(1)}", 1)
        return [(ctx.input_dtype(0), matmul_shapes(ctx)[3])]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        return None if vals is None else [ctx.cast_output(np.matmul(vals[0], _row_major_b(ctx, vals[1])))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        a, b = ctx.input_shape(0), ctx.input_shape(1)
        batch_a, batch_b, batch, _ = matmul_shapes(ctx)
        return plan_product(ctx, Product(
            ctx.input(0), ctx.input(1), ctx.output(0), ctx.compute_type(ctx.input_dtype(0), "input 0"),
            m=a[-2] if len(a) > 1 else 1, n=b[-1] if len(b) > 1 else 1,
            k=prefer_literal(a[-1], b[-2] if len(b) > 1 else b[0]),
            batch_a=batch_a, batch_b=batch_b, batch=batch, epilogue=self.epilogue(ctx),
            b_panels=bool(ctx.attr(PANELS_ATTR, 0))))

    def epilogue(self, ctx: PlanCtx) -> Epilogue:
        """Fused elementwise ops after the product (MatMulEpilogue): none here."""
        return Epilogue()


# ---- Gemm ---------------------------------------------------------------------------------

class Gemm(Operator):
    """Y = alpha * op(A) @ op(B) + beta * C, C broadcast unidirectionally to [M, N].

    One class covers opsets 1-13: C became optional in 11, and the `broadcast` attribute of
    opsets < 7 is accepted and ignored (broadcasting C is always allowed).
    """

    op_type = "Gemm"

    def _dims(self, ctx: InferenceCtx) -> tuple[Dim, Dim, Dim]:
        for i in (0, 1):
            if ctx.input_rank(i) != 2:
                raise ctx.fail(f"Gemm operands must be 2-D, got shape {shape_str(ctx.input_shape(i))}", i)
        (m, k), (kb, n) = ctx.input_shape(0), ctx.input_shape(1)
        if ctx.attr("transA", 0):
            m, k = k, m
        if ctx.attr("transB", 0):
            kb, n = n, kb
        if not ctx.same_dim(k, kb):
            raise ctx.fail(f"inner dims differ: op(A) is [{m}, {k}], op(B) is [{kb}, {n}]", 1)
        return m, n, prefer_literal(k, kb)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        m, n, _ = self._dims(ctx)
        for i in (1, 2):
            if ctx.has_input(i) and ctx.input_dtype(i) != ctx.input_dtype(0):
                raise ctx.fail(f"dtype {ctx.input_dtype(i)} differs from input 0's {ctx.input_dtype(0)}", i)
        if ctx.has_input(2):
            c = ctx.input_shape(2)
            ok = len(c) <= 2 and all(is_one(d) or ctx.same_dim(d, o) for d, o in zip(reversed(c), (n, m)))
            if not ok:
                raise ctx.fail(f"C of shape {shape_str(c)} does not broadcast to [{m}, {n}]", 2)
        return [(ctx.input_dtype(0), (m, n))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        a = vals[0].T if ctx.attr("transA", 0) else vals[0]
        b = _row_major_b(ctx, vals[1])
        b = b.T if ctx.attr("transB", 0) else b
        y = ctx.attr("alpha", 1.0) * (a @ b)
        if ctx.has_input(2):
            y = y + ctx.attr("beta", 1.0) * vals[2]
        return [ctx.cast_output(y)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        m, n, k = self._dims(ctx)
        has_c = ctx.has_input(2)
        return plan_product(ctx, Product(
            ctx.input(0), ctx.input(1), ctx.output(0), ctx.compute_type(ctx.input_dtype(0), "input 0"),
            m=m, n=n, k=k, trans_a=bool(ctx.attr("transA", 0)), trans_b=bool(ctx.attr("transB", 0)), gemm=True,
            c=ctx.input(2) if has_c else None, c_shape=ctx.input_shape(2) if has_c else (),
            alpha=ctx.attr("alpha", 1.0), beta=ctx.attr("beta", 1.0), epilogue=self.epilogue(ctx),
            b_panels=bool(ctx.attr(PANELS_ATTR, 0))))

    def epilogue(self, ctx: PlanCtx) -> Epilogue:
        return Epilogue()


# ---- the fused forms (passes/epilogue_fusion.py) --------------------------------------------

class FusedProduct:
    """A product whose kernels end with the elementwise ops that read its output: attributes
    `epilogue_exprs` / `epilogue_inputs` (operators/matmul/epilogue.py), the operands after the
    product's own inputs. Every variant of the product runs the epilogue where it stores the
    output (the kernel, or its split-K finish), so the output is the last op's. Mixed in before
    the product's operator class (here, and the convolutions' in operators/conv/fused.py)."""

    domain = FUSED_DOMAIN
    column = True  # the kernels' epilogue `n` is the output's last coordinate (fused_epilogue)

    def epilogue(self, ctx: PlanCtx) -> Epilogue:
        if ctx.compute_type(ctx.input_dtype(0), "input 0") != "f32":
            raise ctx.fail(f"a fused epilogue needs a float product, not {ctx.input_dtype(0)}")
        return fused_epilogue(ctx, ctx.output_shape(0), column=self.column)


class MatMulEpilogue(FusedProduct, MatMul):
    """onyxia::MatMulEpilogue: MatMul (inputs 0-1), epilogue operands from input 2."""

    op_type = "MatMulEpilogue"


class GemmEpilogue(FusedProduct, Gemm):
    """onyxia::GemmEpilogue: Gemm (inputs 0-2, C possibly absent), epilogue operands from input 3."""

    op_type = "GemmEpilogue"


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(MatMul(), 1), (Gemm(), 1), (MatMulEpilogue(), 1), (GemmEpilogue(), 1)]
