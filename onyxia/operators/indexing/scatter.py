"""The Scatter family: ScatterND, ScatterElements and the deprecated Scatter; TensorScatter.

The output starts as a copy of the data (a strided copy); one kernel then writes the updates,
combining them with the existing values by the `reduction` attribute.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, numel, shape_str
from onyxia.operators.base import MAX_TRIPS, FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import contiguous_strides, is_zero
from onyxia.operators.elementwise.elementwise import INT64_OVERFLOW
from onyxia.operators.indexing.indexing import (
    INDEX_OUT_OF_RANGE,
    check_indices,
    dispatch_gather,
    index_values,
    nd_layout,
    nd_offset_code,
    plan_strided_copy,
    strided_code,
)
from onyxia.plan import Step

# reduction attribute → (WGSL over the current value a and the update v, numpy ufunc for folding)
REDUCTIONS: dict[str, tuple[str, np.ufunc | None]] = {
    "none": ("v", None),
    "add": ("a + v", np.add),
    "mul": ("a * v", np.multiply),
    "max": ("max(a, v)", np.maximum),
    "min": ("min(a, v)", np.minimum),
}
# Updates one thread of a reduction applies per dispatch (lavapipe stops an invocation's loops
# after ~65,535 iterations): a longer walk is several dispatches, in order.
SCATTER_TRIPS = 2 * MAX_TRIPS
CHECKED = {"add": "onyxia_checked_add(a, v)", "mul": "onyxia_checked_mul(a, v)"}  # int64: report overflow


class _Scatter(Operator):
    """Output = a copy of data, then the updates written (or combined) at indexed places."""

    def reduction(self, ctx: InferenceCtx) -> str:
        reduction = ctx.attr("reduction", "none")
        if reduction not in REDUCTIONS:
            raise ctx.fail(f"attribute 'reduction': '{reduction}' is not one of {', '.join(REDUCTIONS)}")
        return reduction

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        self.reduction(ctx)
        if ctx.input_dtype(2) != ctx.input_dtype(0):
            raise ctx.fail(f"updates have dtype {ctx.input_dtype(2)}, the data {ctx.input_dtype(0)}", 2)
        return [(ctx.input_dtype(0), ctx.input_shape(0))]

    def fold_at(self, ctx: FoldCtx, where) -> list[np.ndarray | None] | None:
        data, idx, upd = ctx.input_value(0), index_values(ctx, 1), ctx.input_value(2)
        if data is None or idx is None or upd is None or data.dtype == object:
            return None
        out = data.copy()
        ufunc = REDUCTIONS[self.reduction(ctx)][1]
        index = where(data, idx)
        if ufunc is None:
            out[index] = upd
        else:
            ufunc.at(out, index, upd)  # unbuffered: duplicate indices accumulate, in order
        return [out]

    def plan_scatter(self, ctx: PlanCtx, body: str, params: Mapping[str, object], count: Dim,
                     checked: bool, walk: tuple[str, Dim] | None = None) -> list[Step]:
        """The copy of the data, then scatter.wgsl over `count` threads running `body`
        (`checked`: it maps indices with onyxia_checked_index, which reports).

        `walk`: (param, count) of the updates a reduction's thread applies in order (its loop runs
        from W0() to min(count, W0() + SCATTER_TRIPS)): longer walks take several dispatches, one per
        SCATTER_TRIPS updates, in order. A symbolic walk gets the passes its compile-time value
        needs and reports at run time when it grows past them."""
        ctx.compute_type(ctx.output_dtype(0), "output")
        steps = plan_strided_copy(ctx, ctx.output_shape(0), contiguous_strides(ctx.output_shape(0)))
        if is_zero(count):
            return steps
        reduction = self.reduction(ctx)
        defs = {"REDUCE": REDUCTIONS[reduction][0], "BODY": body}
        reasons = [INDEX_OUT_OF_RANGE] if checked else []
        if ctx.output_dtype(0) == dtypes.INT64 and reduction in CHECKED:
            defs["REDUCE"] = CHECKED[reduction]
            reasons.append(INT64_OVERFLOW)
        passes, pass_params = 1, {}  # W0: the first update of a pass
        if walk is not None:
            name, length = walk
            defs["TRIPS"] = SCATTER_TRIPS
            value = length if isinstance(length, int) else ctx.env.value(length)
            passes = max(1, -(-(value or 1) // SCATTER_TRIPS))
            pass_params = {"W0": (0, "u32")}
            if not isinstance(length, int):
                defs["GUARD"], defs["WALK"] = passes * SCATTER_TRIPS, f"{name}()"
                reasons.append(f"more updates than the {passes * SCATTER_TRIPS} the plan's passes apply "
                               "(compile for the larger size)")
        reports = ", or ".join(reasons) or None
        for n in range(passes):
            first = {p: (n * SCATTER_TRIPS, "u32") for p in pass_params}
            steps.append(ctx.dispatch("indexing/scatter.wgsl", label=f"scatter_{ctx.node.op_type}", defs=defs,
                                      params={"N": count, **params, **first},
                                      reads={"idx": ctx.input(1), "upd": ctx.input(2)}, writes={"y": ctx.output(0)},
                                      workgroups=ctx.grid(count), reports=reports, immediates=tuple(pass_params)))
        return steps


class ScatterND(_Scatter):
    op_type = "ScatterND"

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        data, idx, k = nd_layout(ctx, 0)
        expected = tuple(idx[:-1]) + tuple(data[k:])
        upd = ctx.input_shape(2)
        if not ctx.same_shape(upd, expected):
            raise ctx.fail(f"updates must have shape {shape_str(expected)}, got {shape_str(upd)}", 2)
        check_indices(ctx, 1, data[:k], column=True)
        return super().infer(ctx)

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        return self.fold_at(ctx, lambda data, idx: tuple(np.moveaxis(
            np.where(idx < 0, idx + np.array(data.shape[:idx.shape[-1]]), idx), -1, 0)))

    def plan(self, ctx: PlanCtx) -> list[Step]:
        data, idx, k = nd_layout(ctx, 0)
        wrap = check_indices(ctx, 1, data[:k], column=True) if k else "onyxia_wrap_index"
        params, offsets = nd_offset_code(data, k, wrap)
        params |= {"SLICE": numel(data[k:]), "NP": numel(idx[:-1])}
        if self.reduction(ctx) == "none":
            # Duplicate indices are undefined without a reduction: every update in parallel.
            body = f"let p = i / SLICE();\n    var off = i % SLICE();\n    {offsets}\n    y_store(off, upd_load(i));"
            return self.plan_scatter(ctx, body, params, numel(idx[:-1]) * numel(data[k:]), wrap != "onyxia_wrap_index")
        # Reductions must see every update of a slot, in order: one thread per slice element
        # walks the updates sequentially (parallel over the slice, serial over indices).
        body = (f"for (var p = W0(); p < min(NP(), W0() + TRIPS); p++) {{\n    var off = i;\n    {offsets}\n"
                "    y_store(off, combine(y_load(off), upd_load(p * SLICE() + i)));\n    }")
        return self.plan_scatter(ctx, body, params, numel(data[k:]), wrap != "onyxia_wrap_index",
                                 ("NP", numel(idx[:-1])))


class ScatterElements(_Scatter):
    op_type = "ScatterElements"

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        data, idx, upd = ctx.input_shape(0), ctx.input_shape(1), ctx.input_shape(2)
        if not len(data) == len(idx) == len(upd):
            raise ctx.fail(f"data, indices and updates must share a rank, got {len(data)}, {len(idx)}, {len(upd)}")
        check_indices(ctx, 1, [data[ctx.axis(ctx.attr("axis", 0), len(data))]])
        return super().infer(ctx)

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        def where(data: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, ...]:
            axis = ctx.axis(ctx.attr("axis", 0), data.ndim)
            index = list(np.indices(idx.shape, sparse=True))
            index[axis] = np.where(idx < 0, idx + data.shape[axis], idx)
            return tuple(index)
        return self.fold_at(ctx, where)

    def plan(self, ctx: PlanCtx) -> list[Step]:
        data, idx = ctx.input_shape(0), ctx.input_shape(1)
        axis = ctx.axis(ctx.attr("axis", 0), len(data))
        # Only updates on one line along `axis` can hit the same element: a thread per line,
        # applying that line's updates in order (deterministic, and right for reductions).
        line = tuple(idx[:axis]) + tuple(idx[axis + 1:])
        d_strides, u_strides = contiguous_strides(data), contiguous_strides(idx)
        params, code = strided_code(line, {"base_d": (d_strides[:axis] + d_strides[axis + 1:], 0),
                                           "base_u": (u_strides[:axis] + u_strides[axis + 1:], 0)})
        params |= {"IAX": idx[axis], "USAX": u_strides[axis], "DAX": data[axis], "DSAX": d_strides[axis]}
        wrap = check_indices(ctx, 1, [data[axis]])
        body = (f"{code}\n    for (var j = W0(); j < min(IAX(), W0() + TRIPS); j++) {{\n"
                "        let u = base_u + j * USAX();\n"
                f"        let off = base_d + {wrap}(idx_load(u), DAX()) * DSAX();\n"
                "        y_store(off, combine(y_load(off), upd_load(u)));\n    }")
        count = numel(line) if not is_zero(idx[axis]) else 0
        return self.plan_scatter(ctx, body, params, count, wrap != "onyxia_wrap_index", ("IAX", idx[axis]))


class Scatter(ScatterElements):
    """Scatter (opsets 9-10) is ScatterElements under its old name."""

    op_type = "Scatter"


class TensorScatter(Operator):
    """TensorScatter (opset 24): a KV-cache write. present = past_cache with `update` written
    along `axis` from write_indices[b] (0 without them), wrapping at the cache length in
    "circular" mode. A copy of the cache, then one gather.wgsl dispatch over the update whose
    destination index is computed (positions past the cache's end, undefined in linear mode,
    are clamped to it)."""

    op_type = "TensorScatter"

    def layout(self, ctx: InferenceCtx) -> tuple[int, str]:
        cache, update = ctx.input_shape(0), ctx.input_shape(1)
        axis = ctx.axis(int(ctx.attr("axis", -2)), len(cache))
        if axis == 0:
            raise ctx.fail("attribute 'axis' must not be the batch axis 0")
        mode = ctx.attr("mode", "linear")
        if mode not in ("linear", "circular"):
            raise ctx.fail(f"attribute 'mode' = '{mode}' is not 'linear' or 'circular'")
        if len(update) != len(cache) or not all(ctx.same_dim(u, c) for a, (u, c) in enumerate(zip(update, cache))
                                                if a != axis):
            raise ctx.fail(f"update {shape_str(update)} must match the cache {shape_str(cache)} except on axis "
                           f"{axis}", 1)
        if ctx.has_input(2) and not ctx.input_dtype(2).is_integer:
            raise ctx.fail(f"write_indices must be integers, got {ctx.input_dtype(2)}", 2)
        if ctx.input_dtype(1) != ctx.input_dtype(0):
            raise ctx.fail(f"update has dtype {ctx.input_dtype(1)}, the cache {ctx.input_dtype(0)}", 1)
        return axis, mode

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        self.layout(ctx)
        return [(ctx.input_dtype(0), ctx.input_shape(0))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        cache, update = ctx.input_value(0), ctx.input_value(1)
        starts = index_values(ctx, 2) if ctx.has_input(2) else np.zeros(cache.shape[0] if cache is not None else 0,
                                                                          np.int64)
        if cache is None or update is None or starts is None or cache.dtype == object:
            return None
        axis, mode = self.layout(ctx)
        out, length = cache.copy(), cache.shape[axis]
        for prefix in np.ndindex(*cache.shape[:axis]):
            for s in range(update.shape[axis]):
                pos = int(starts[prefix[0]]) + s
                out[(*prefix, pos % length if mode == "circular" else min(pos, length - 1))] = update[(*prefix, s)]
        return [out]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        axis, mode = self.layout(ctx)
        cache, update = ctx.input_shape(0), ctx.input_shape(1)
        steps = plan_strided_copy(ctx, cache, contiguous_strides(cache))
        start = "u32(max(idx_load(b), 0))" if ctx.has_input(2) else "0u"
        where = "pos % LEN()" if mode == "circular" else "min(pos, LEN() - 1u)"
        code = ("let inner = i % INNER(); let t = i / INNER(); let s = t % SEQ(); let outer = t / SEQ();\n"
                f"    let b = outer / PREFIX();\n    let pos = {start} + s;\n"
                f"    let src = i;\n    let dst = (outer * LEN() + {where}) * INNER() + inner;")
        params = {"INNER": numel(cache[axis + 1:]), "SEQ": update[axis], "PREFIX": numel(cache[1:axis]),
                  "LEN": cache[axis]}
        return steps + dispatch_gather(ctx, code, params, x=ctx.input(1), y=ctx.output(0),
                                       idx=ctx.input(2) if ctx.has_input(2) else None, count=numel(update),
                                       label="tensor_scatter", scatter=True)


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(ScatterND(), 11), (ScatterElements(), 11), (Scatter(), 9), (TensorScatter(), 24)]
