"""Reductions: the Reduce* family (one table row per op) and ArgMax/ArgMin (CumSum/CumProd: scan.py).

All reductions share one kernel, shaders/reduction/reduce.wgsl. The input's axes are split into
kept and reduced ones; adjacent axes of the same kind are merged (the input is contiguous), so
any set of reduced axes becomes a strided walk: output element `o` starts at `base(o)` and visits
`base(o) + offset(r)` for r < K. Every output is handled by LANES threads of a 256-thread
workgroup that combine their partial results through a shared-memory tree. When the innermost
axis is reduced the lanes are adjacent threads (coalesced along the row); when it is kept,
adjacent threads take adjacent outputs instead, so each step of the walk reads a contiguous run.
A planner may offer a CPU-type adapter other walks (plan_reduce's cpu_variants: a thread per output,
or 8-thread workgroups) in a Select; a symbolic walk's parts pass runs only when it needs parts.

Dims may be symbolic: the output count M, the reduced count K, and the merged dims and strides
are params (immediates when dynamic), never shader defs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, numel
from onyxia.operators.base import MAX_TRIPS, UNBOUNDED_AXIS, WORKGROUP_SIZE, FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import contiguous_strides, is_one
from onyxia.operators.elementwise.elementwise import INT64_OVERFLOW
from onyxia.plan import ALWAYS, Step, adapter, at_most

Groups = list[tuple[Dim, Dim]]  # merged (dim, element stride) pairs, outermost first

# Identity elements per accumulator type. WGSL has no infinity literal: build it from its bits.
EXTREMES = {
    "lowest": {"f32": "bitcast<f32>(0xff800000u)", "i32": "(-2147483647i - 1i)", "u32": "0u"},
    "highest": {"f32": "bitcast<f32>(0x7f800000u)", "i32": "2147483647i", "u32": "4294967295u"},
}


# int64 accumulates in i32: these forms of the rows' expressions report leaving its range.
CHECKED = {"a + b": "onyxia_checked_add(a, b)", "a * b": "onyxia_checked_mul(a, b)",
           "x * x": "onyxia_checked_mul(x, x)", "abs(x)": "onyxia_checked_abs(x)"}


def next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def split_axes(shape: Shape, reduced: set[int]) -> tuple[Groups, Groups]:
    """(kept groups, reduced groups) of a contiguous `shape`, with size-1 axes dropped and
    adjacent axes of the same kind merged: fewer groups, less index arithmetic per element."""
    kept: Groups = []
    red: Groups = []
    prev = None
    for axis, (d, s) in enumerate(zip(shape, contiguous_strides(shape))):
        if is_one(d):
            continue
        kind = axis in reduced
        groups = red if kind else kept
        if prev == kind:
            groups[-1] = (groups[-1][0] * d, s)  # contiguous input: the two axes are one run
        else:
            groups.append((d, s))
        prev = kind
    return kept, red


def walk_code(fn: str, groups: Groups, prefix: str) -> tuple[dict[str, Dim], str]:
    """A WGSL function `fn(k: u32) -> u32`: the element offset of the k-th position (row-major)
    of the strided walk over `groups`. Dims and strides become params <prefix>D<n>/<prefix>S<n>."""
    params: dict[str, Dim] = {}
    body = ["var off = 0u;", "var rem = k;"]
    for n, (d, s) in enumerate(reversed(groups)):
        scaled = "" if is_one(s) else f" * {prefix}S{n}()"
        if not is_one(s):
            params[f"{prefix}S{n}"] = s
        if n == len(groups) - 1:  # the outermost group takes what is left, no modulo needed
            body.append(f"off += rem{scaled};")
        else:
            params[f"{prefix}D{n}"] = d
            body.append(f"off += (rem % {prefix}D{n}()){scaled}; rem = rem / {prefix}D{n}();")
    if not groups:
        body = ["var off = 0u;"]
    return params, f"fn {fn}(k: u32) -> u32 {{\n    " + "\n    ".join(body) + "\n    return off;\n}"


def lanes_for(count: Dim, per_item: Dim, lanes_adjacent: bool) -> int:
    """Threads per output item (a power of two ≤ 256).

    With lanes adjacent (the walk is contiguous) a full workgroup per item keeps reads
    coalesced; with items adjacent a few lanes split the walk. Static sizes refine the choice:
    short walks need few lanes, few items leave room for more lanes each.
    """
    lanes = WORKGROUP_SIZE if lanes_adjacent else 8
    if not lanes_adjacent and isinstance(count, int):
        lanes = max(lanes, WORKGROUP_SIZE // next_pow2(max(count, 1)))
    if isinstance(per_item, int):
        lanes = min(lanes, next_pow2(max(per_item, 1)))
    return lanes


ACC_DTYPES = {"f32": "float32", "i32": "int32", "u32": "uint32"}  # a partial's dtype per accumulator type


# The walks a CPU-type adapter prefers (plan_reduce's cpu_variants): up to CPU_ROW_WALK elements a
# thread walks its output's elements alone (no barrier at all); longer walks take a workgroup of
# CPU_WALK_LANES threads per output, one SIMD batch of lavapipe, whose barriers switch nothing.
CPU_ROW_WALK = 1024
CPU_WALK_LANES = 8
CPU_ROW_GROUP = 64


def bound_of(d: Dim) -> int:
    """An upper bound of a length: itself when static, else anything a u32 index reaches."""
    return d if isinstance(d, int) else UNBOUNDED_AXIS


def plan_reduce(ctx: PlanCtx, reduced: set[int], defs: dict[str, object], label: str,
                reports: str | None = None, merge: dict[str, object] | None = None, *,
                cpu_variants: bool = False) -> list[Step]:
    """reduce.wgsl over input 0 into output 0 with the row `defs`: one dispatch, or (a walk
    longer than an invocation may loop over) one per level of partials.

    `merge`: the defs of the pass that reduces partials (MAP of a partial, the row's FINAL with
    TOTAL as `n`); None for ArgMax/ArgMin, whose partials are (value, index) pairs.
    `cpu_variants`: a Select offers a CPU-type adapter walks without 256-thread trees (CPU_WALKS)."""
    m = numel(ctx.output_shape(0))
    if isinstance(m, int) and m == 0:
        return []
    ctx.compute_type(ctx.input_dtype(0), "input")
    ctx.compute_type(ctx.output_dtype(0), "output")
    shape = ctx.input_shape(0)
    k = numel(d for i, d in enumerate(shape) if i in reduced)

    def walk(lanes: int | None, group: int) -> list[Step]:
        return ReduceWalk(ctx, label, reports, dict(defs), merge, k, lanes, group).plan(
            {"src": ctx.input(0)}, ctx.output(0), shape, reduced, m, bound_of(k))

    if not cpu_variants:
        return walk(None, WORKGROUP_SIZE)
    # lavapipe runs a workgroup as SIMD batches of 8 threads and switches between them at every
    # barrier; the 256-thread tree of a short walk costs more than the walk (GlobalAveragePool
    # over [2, 576, 3, 3] with symbolic H, W: 96 ms in 256-lane trees, see CPU_WALKS).
    cpu = adapter("cpu")
    return ctx.select(f"{label}/walk", [
        ("cpu thread per row", walk(1, CPU_ROW_GROUP), ALWAYS, cpu & at_most(k, CPU_ROW_WALK)),
        ("cpu 8 lanes per row", walk(CPU_WALK_LANES, CPU_WALK_LANES), ALWAYS, cpu),
        ("gpu", walk(None, WORKGROUP_SIZE), ALWAYS, ALWAYS)])


@dataclass
class ReduceWalk:
    """The dispatches of one reduction: `plan` splits a walk into parts of at most LANES x
    MAX_TRIPS elements whenever its length may pass that (lavapipe stops an invocation's loops
    after ~65,535 iterations), writes a partial per part and reduces the partials the same way.
    A symbolic walk that may or may not need parts is a Select: one dispatch while it fits.

    `lanes` / `group`: threads per output and per workgroup (None: lanes_for's choice in 256-thread
    workgroups), for every pass."""

    ctx: PlanCtx
    label: str
    reports: str | None
    defs: dict[str, object]
    merge: dict[str, object] | None
    total: Dim  # the whole walk's length (FINAL's `n` in the last pass)
    lanes: int | None = None
    group: int = WORKGROUP_SIZE

    def plan(self, reads: dict[str, str], dst: str, shape: Shape, reduced: set[int], m: Dim,
             bound: int) -> list[Step]:
        ctx = self.ctx
        kept, red = split_axes(shape, reduced)
        k = numel(d for d, _ in red)
        red_inner = bool(red) and (not kept or red[-1][1] == 1)
        lanes = self.lanes or lanes_for(m, k, red_inner)
        base_params, base_fn = walk_code("base_of", kept, "O")
        off_params, off_fn = walk_code("offset_of", red, "R")
        defs = {**self.defs, "LANES": lanes, "RED_INNER": int(red_inner), "BASE": base_fn, "OFFSET": off_fn}
        if self.group != WORKGROUP_SIZE:
            defs["WG_SIZE"] = self.group
        params: dict[str, object] = {"M": m, "K": k, **base_params, **off_params}
        rows_per_group = self.group // lanes
        chunk = lanes * MAX_TRIPS
        if bound <= chunk or not isinstance(k, int):
            one = {**params, "TOTAL": (self.total, "u32")} if "TOTAL" in defs else params
            single = [ctx.dispatch("reduction/reduce.wgsl", label=self.label, defs=defs, params=one, reads=reads,
                                   writes={"dst": dst}, workgroups=ctx.grid(m, rows_per_group),
                                   reports=self.reports)]
            if bound <= chunk:
                return single
        # Pass 1: a partial per part, laid out [M, PARTS] (lanes along the walk) or [PARTS, M].
        parts = (k + chunk - 1) // chunk
        acc = str(defs["A"])
        defs = {d: v for d, v in defs.items() if d != "TOTAL"}
        defs["CHUNK"] = chunk
        if "ARG" in defs:
            partial, vals = ctx.scratch(m * parts, "int32", "arg_index"), ctx.scratch(m * parts, ACC_DTYPES[acc],
                                                                                      "arg_value")
            writes = {"dst": partial, "vals": vals}
            merge, next_reads = {**self.defs, "IDX": True}, {"src": vals, "idx": partial}
        else:
            if "SHIFT" not in defs:  # a shifted walk's partial is its own LogSumExp
                defs["FINAL"] = "acc"
            partial = ctx.scratch(m * parts, ACC_DTYPES[acc], "partial")
            writes = {"dst": partial}
            merge, next_reads = self.merge, {"src": partial}
        params["PARTS"] = (parts, "u32")
        steps = [ctx.dispatch("reduction/reduce.wgsl", label=self.label, defs=defs, params=params, reads=reads,
                              writes=writes, workgroups=ctx.grid(m * parts, rows_per_group),
                              reports=self.reports)]
        assert merge is not None
        outer, self.defs = self.defs, merge
        pshape, paxes = ((m, parts), {1}) if red_inner else ((parts, m), {0})
        steps += self.plan(next_reads, dst, pshape, paxes, m, -(-bound // chunk))
        self.defs = outer
        if isinstance(k, int):
            return steps
        return ctx.select(f"{self.label}/parts", [("one part", single, at_most(k, chunk), ALWAYS),
                                                  ("parts", steps, ALWAYS, ALWAYS)])


def reduced_shape(shape: Shape, axes: set[int], keepdims: bool) -> Shape:
    return tuple(1 if a in axes else d for a, d in enumerate(shape) if keepdims or a not in axes)


# ---- the Reduce* family -------------------------------------------------------------------

FoldFn = Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]


@dataclass(frozen=True)
class ReduceRow:
    """One Reduce* op: WGSL pieces over the accumulator type A and a numpy fold.

    `map` turns an element `x` into what is combined (`m` is the row max when `shift`),
    `combine` merges `a` and `b`, `final` turns the total `acc` of `n: u32` elements into the
    result ({A} in `map` and `final` stands for the accumulator type). `axes_input_since`: the
    opset from which axes is an input (with noop_with_empty_axes) instead of an attribute.
    """

    init: str  # "zero" | "one" | "lowest" | "highest"
    map: str
    combine: str
    final: str
    fold: FoldFn
    axes_input_since: int
    float_acc: bool = False  # sqrt needs f32 even for integer inputs (truncated back, as ORT does)
    shift: bool = False  # subtract the walk's max first (LogSumExp): exp cannot overflow
    symbolic: bool = False  # folds object arrays of symbolic dims (shape arithmetic)
    bools: bool = False  # accepts bool inputs (ReduceMax/Min since opset 20)
    nan_combine: str | None = None  # `combine` for f32: WGSL's max/min may drop a NaN; numpy keeps it


def _count(x: np.ndarray, axes: tuple[int, ...]) -> int:
    return int(np.prod([x.shape[a] for a in axes], dtype=np.int64))


def _float(x: np.ndarray) -> np.ndarray:
    return x if np.issubdtype(x.dtype, np.floating) else x.astype(np.float64)


def _mean(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    total = np.sum(x, axis=axes, keepdims=keep)
    n = max(_count(x, axes), 1)  # onnxruntime's mean of nothing is 0, not NaN
    if np.issubdtype(x.dtype, np.integer):  # integer division truncating toward zero, as C does
        return np.sign(total) * (np.abs(total) // n)
    return total / n


def _extreme(fn: Callable, kind: str) -> FoldFn:
    def fold(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
        if x.dtype == np.bool_:
            initial = kind == "highest"
        elif np.issubdtype(x.dtype, np.integer):
            info = np.iinfo(x.dtype)
            initial = info.min if kind == "lowest" else info.max
        else:
            initial = -np.inf if kind == "lowest" else np.inf
        return fn(x, axis=axes, keepdims=keep, initial=initial)
    return fold


def _logsumexp(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    integer = np.issubdtype(x.dtype, np.integer)
    m = _extreme(np.max, "lowest")(x, axes, True)
    m = m if integer else np.where(np.isfinite(m), m, 0)
    terms = np.exp((x - m).astype(np.float64))
    # onnxruntime sums exp(x - max) in the input type: for integers each term is truncated.
    out = np.log(np.sum(np.trunc(terms) if integer else terms, axis=axes, keepdims=True)) + m
    return out if keep else np.squeeze(out, axis=axes)


REDUCE_OPS: dict[str, ReduceRow] = {
    "ReduceSum": ReduceRow("zero", "x", "a + b", "acc", lambda x, ax, k: np.sum(x, axis=ax, keepdims=k), 13,
                           symbolic=True),
    "ReduceMean": ReduceRow("zero", "x", "a + b", "acc / {A}(max(n, 1u))", _mean, 18),
    "ReduceMax": ReduceRow("lowest", "x", "max(a, b)", "acc", _extreme(np.max, "lowest"), 18, bools=True,
                           nan_combine="select(max(a, b), a + b, is_nan(a) || is_nan(b))"),
    "ReduceMin": ReduceRow("highest", "x", "min(a, b)", "acc", _extreme(np.min, "highest"), 18, bools=True,
                           nan_combine="select(min(a, b), a + b, is_nan(a) || is_nan(b))"),
    "ReduceProd": ReduceRow("one", "x", "a * b", "acc", lambda x, ax, k: np.prod(x, axis=ax, keepdims=k), 18,
                            symbolic=True),
    "ReduceL1": ReduceRow("zero", "abs(x)", "a + b", "acc", lambda x, ax, k: np.sum(np.abs(x), axis=ax, keepdims=k),
                          18),
    "ReduceL2": ReduceRow("zero", "x * x", "a + b", "sqrt(acc)",
                          lambda x, ax, k: np.sqrt(np.sum(np.square(_float(x)), axis=ax, keepdims=k)), 18,
                          float_acc=True),
    "ReduceLogSum": ReduceRow("zero", "x", "a + b", "log(acc)",
                              lambda x, ax, k: np.log(np.sum(_float(x), axis=ax, keepdims=k)), 18, float_acc=True),
    "ReduceSumSquare": ReduceRow("zero", "x * x", "a + b", "acc",
                                 lambda x, ax, k: np.sum(np.square(x), axis=ax, keepdims=k), 18),
    "ReduceLogSumExp": ReduceRow("zero", "{A}(exp(f32(x) - f32(m)))", "a + b", "{A}(log(f32(acc)) + f32(m))",
                                 _logsumexp, 18, shift=True),
}


class Reduce(Operator):
    """Reduce* ops: axes (attribute, or input 1 from `axes_input_since`), keepdims,
    noop_with_empty_axes. Empty axes reduce everything unless noop_with_empty_axes, which
    reduces nothing: each element is mapped and finalized on its own (ReduceL1 gives |x|,
    ReduceSumSquare x², as onnxruntime does)."""

    def __init__(self, op_type: str, row: ReduceRow, axes_input: bool):
        self.op_type, self.row, self.axes_input = op_type, row, axes_input

    def reduced_axes(self, ctx: InferenceCtx, rank: int) -> set[int]:
        if self.axes_input:
            values = [int(v) for v in np.asarray(ctx.require_value(1, "axes")).reshape(-1)] if ctx.has_input(1) else []
            noop = bool(ctx.attr("noop_with_empty_axes", 0))
        else:
            values, noop = list(ctx.attr("axes", None) or []), False
        if not values:
            return set() if noop else set(range(rank))
        axes = [ctx.axis(v, rank, "axes entry") for v in values]
        if len(set(axes)) != len(axes):
            raise ctx.fail(f"axes {values} name an axis twice", 1 if self.axes_input else None)
        return set(axes)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        dtype = ctx.input_dtype(0)
        if dtype.is_bool and not self.row.bools:
            raise ctx.fail(f"{self.op_type} does not accept bool input", 0)
        shape = ctx.input_shape(0)
        axes = self.reduced_axes(ctx, len(shape))
        return [(dtype, reduced_shape(shape, axes, bool(ctx.attr("keepdims", 1))))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        x = ctx.input_value(0)
        if x is None:
            return None
        axes = tuple(sorted(self.reduced_axes(ctx, x.ndim)))
        keep = bool(ctx.attr("keepdims", 1))
        if x.dtype == object:  # shape arithmetic over symbolic dims: sums and products only
            if not self.row.symbolic:
                return None
            return [np.asarray(self.row.fold(x, axes, keep), dtype=object)]
        with np.errstate(all="ignore"):
            return [ctx.cast_output(self.row.fold(x, axes, keep))]

    cpu_variants = False  # plan_reduce's CPU-adapter walks (GlobalPool's)

    def plan(self, ctx: PlanCtx) -> list[Step]:
        row = self.row
        compute = ctx.compute_type(ctx.input_dtype(0), "input")
        acc = "f32" if row.float_acc else compute
        init = {"zero": f"{acc}(0)", "one": f"{acc}(1)"}.get(row.init) or EXTREMES[row.init][acc]
        map_, combine, reports = row.map.format(A=acc), row.combine, None
        if acc == "f32" and row.nan_combine:
            combine = row.nan_combine
        if ctx.input_dtype(0) == dtypes.INT64 and acc == "i32" and (map_ in CHECKED or combine in CHECKED):
            # int64 sums and products can leave the int32 range the GPU keeps int64 in: report it
            map_, combine, reports = CHECKED.get(map_, map_), CHECKED.get(combine, combine), INT64_OVERFLOW
        defs: dict[str, object] = {"A": acc, "INIT": init, "MAP": map_, "COMBINE": combine,
                                   "FINAL": row.final.format(A=acc)}
        if row.shift:
            defs["SHIFT"] = True
            defs["LOWEST"] = EXTREMES["lowest"][acc]
        # Partials (of a walk split into parts) are already mapped; the shifted walk (LogSumExp)
        # reduces its parts' LogSumExps as it does elements.
        merge = {**defs, "TOTAL": True} if row.shift else {**defs, "MAP": "x", "TOTAL": True}
        axes = self.reduced_axes(ctx, len(ctx.input_shape(0)))
        return plan_reduce(ctx, axes, defs, f"reduce_{self.op_type}", reports, merge,
                           cpu_variants=self.cpu_variants)


# ---- ArgMax / ArgMin ----------------------------------------------------------------------

ARG_OPS: dict[str, tuple[str, Callable]] = {"ArgMax": (">", np.argmax), "ArgMin": ("<", np.argmin)}


class ArgReduce(Operator):
    """ArgMax/ArgMin over one axis (keepdims, select_last_index); int64 indices."""

    def __init__(self, op_type: str):
        self.op_type = op_type
        self.cmp, self.np_fn = ARG_OPS[op_type]

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        shape = ctx.input_shape(0)
        axis = ctx.axis(ctx.attr("axis", 0), len(shape))
        return [(dtypes.INT64, reduced_shape(shape, {axis}, bool(ctx.attr("keepdims", 1))))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        x = vals[0]
        axis = ctx.axis(ctx.attr("axis", 0), x.ndim)
        keep = bool(ctx.attr("keepdims", 1))
        if ctx.attr("select_last_index", 0):  # first index of the reversed axis, mapped back
            idx = x.shape[axis] - 1 - self.np_fn(np.flip(x, axis), axis=axis, keepdims=keep)
        else:
            idx = self.np_fn(x, axis=axis, keepdims=keep)
        return [ctx.cast_output(idx)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        compute = ctx.compute_type(ctx.input_dtype(0), "input")
        axis = ctx.axis(ctx.attr("axis", 0), len(ctx.input_shape(0)))
        defs = arg_defs(compute, self.cmp, bool(ctx.attr("select_last_index", 0)))
        return plan_reduce(ctx, {axis}, defs, f"reduce_{self.op_type}")


def arg_defs(compute: str, cmp: str, last: bool) -> dict[str, object]:
    """reduce.wgsl's defs of an arg reduction (cmp ">": ArgMax, "<": ArgMin). FLOAT: a NaN wins
    (as it does in ReduceMax/ReduceMin), as in numpy and onnx.reference."""
    return {"A": compute, "ARG": True, "CMP": cmp, "FLOAT": int(compute == "f32"),
            "INIT": EXTREMES["lowest" if cmp == ">" else "highest"][compute], "LAST": int(last)}


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs: each Reduce* op once with axes as an attribute and
    once, from the opset that moved it there, with axes as an input."""
    ops: list[tuple[Operator, int]] = []
    for name, row in REDUCE_OPS.items():
        ops += [(Reduce(name, row, axes_input=False), 1), (Reduce(name, row, axes_input=True), row.axes_input_since)]
    ops += [(ArgReduce(name), 1) for name in ARG_OPS]
    return ops
