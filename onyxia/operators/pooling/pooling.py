"""Pooling: MaxPool (with optional Indices), AveragePool and LpPool over 1 to 3 spatial axes,
MaxUnpool, and the global poolings.

The windowed poolings share shaders/pooling/pool.wgsl: one thread per output element walks its
window (kernel shape, strides, dilations and pads are static; batch and spatial sizes are
params, so they may be symbolic). The window geometry (auto_pad, ceil_mode) is conv/window.py's.
GlobalAveragePool / GlobalMaxPool / GlobalLpPool are reductions over the spatial axes and run
on the reduction kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape, numel, shape_str
from onyxia.operators.base import MAX_TRIPS, FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.conv.window import MAX_SPATIAL, Window, int_list, padded_windows, window_of, window_params
from onyxia.operators.reduction.reduction import EXTREMES, REDUCE_OPS, Reduce, ReduceRow
from onyxia.operators.shape.shape import plan_fill
from onyxia.plan import Step


@dataclass(frozen=True)
class PoolRow:
    mode: str  # max | avg | lp
    dtypes: frozenset[str]  # accepted input dtypes (by name)


# Loop iterations one pooling thread may spend on its window: under lavapipe's ~65,535.
WINDOW_TRIPS = 14 * MAX_TRIPS
_FLOATS = frozenset({"float32", "float16", "float64", "bfloat16"})  # no device type: planning says so
POOL_OPS: dict[str, PoolRow] = {
    "MaxPool": PoolRow("max", _FLOATS | {"int8", "uint8"}),
    "AveragePool": PoolRow("avg", _FLOATS),
    "LpPool": PoolRow("lp", _FLOATS),
}


class Pool(Operator):
    """MaxPool / AveragePool / LpPool. MaxPool's optional second output holds flat input
    indices (row-major over the whole input; storage_order 1: column-major spatial)."""

    def __init__(self, op_type: str, row: PoolRow):
        self.op_type, self.row = op_type, row

    def window(self, ctx: InferenceCtx) -> Window:
        x = ctx.input_shape(0)
        if not 3 <= len(x) <= 2 + MAX_SPATIAL:
            raise ctx.fail(f"expects [N, C, *spatial] with 1 to {MAX_SPATIAL} spatial axes, got rank {len(x)}", 0)
        if ctx.input_dtype(0).name not in self.row.dtypes:
            raise ctx.fail(f"does not support dtype {ctx.input_dtype(0)} (supported: {sorted(self.row.dtypes)})", 0)
        if ctx.attr("kernel_shape", None) is None:
            raise ctx.fail("attribute 'kernel_shape' is required")
        kernel = int_list(ctx, "kernel_shape", len(x) - 2, 1, minimum=1)
        if int(ctx.attr("storage_order", 0)) not in (0, 1):
            raise ctx.fail(f"attribute 'storage_order' {ctx.attr('storage_order')} must be 0 or 1")
        return window_of(ctx, tuple(x[2:]), kernel, ceil_mode=bool(ctx.attr("ceil_mode", 0)))

    def wants_indices(self, ctx: InferenceCtx) -> bool:
        return len(ctx.node.outputs) > 1 and bool(ctx.node.outputs[1])

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        if len(ctx.node.outputs) > (2 if self.row.mode == "max" else 1):
            raise ctx.fail(f"has {len(ctx.node.outputs)} outputs, {self.op_type} has fewer")
        x = ctx.input_shape(0)
        out = (x[0], x[1], *self.window(ctx).out)
        return [(ctx.input_dtype(0), out), (dtypes.INT64, out)][:len(ctx.node.outputs)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None or self.wants_indices(ctx):
            return None
        win, x = self.window(ctx), vals[0]
        n = len(win.kernel)
        kernel_axes = tuple(range(-n, 0))
        if self.row.mode == "max":
            info = np.finfo(x.dtype) if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype)
            return [ctx.cast_output(padded_windows(x, win, info.min).max(axis=kernel_axes))]
        xf = x.astype(np.float64)
        if self.row.mode == "lp":
            p = float(ctx.attr("p", 2))
            total = (np.abs(padded_windows(xf, win, 0.0)) ** p).sum(axis=kernel_axes)
            return [ctx.cast_output(total ** (1.0 / p))]
        total = padded_windows(xf, win, 0.0).sum(axis=kernel_axes)
        if ctx.attr("count_include_pad", 0):  # positions inside the padded input count
            region = np.ones(x.shape[:2] + tuple(s + b + e for s, b, e in zip(x.shape[2:], win.begin, win.end)))
            count = padded_windows(region, replace(win, begin=(0,) * n), 0.0).sum(axis=kernel_axes)
        else:
            count = padded_windows(np.ones_like(xf), win, 0.0).sum(axis=kernel_axes)
        return [ctx.cast_output(total / count)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        win = self.window(ctx)
        # One thread walks its whole window in three nested loops (lavapipe stops an
        # invocation's loops after ~65,535 iterations): refuse, not return, what it cannot walk.
        lead = (1,) * (MAX_SPATIAL - len(win.kernel))
        kd, kh, kw = lead + tuple(win.kernel)
        trips = kd * (1 + kh * (1 + kw))
        if trips > WINDOW_TRIPS:
            raise ctx.fail(f"a kernel_shape of {list(win.kernel)} takes {trips} loop iterations per output, more "
                           f"than the {WINDOW_TRIPS} one invocation may run (a global pool has no such limit)")
        x = ctx.input_shape(0)
        spatial = tuple(x[2:])
        compute = ctx.compute_type(ctx.input_dtype(0), "input")
        total = x[0] * x[1] * numel(win.out)
        lead = (1,) * (MAX_SPATIAL - len(spatial))  # unit axes: the padded input is the input
        ed, eh, ew = lead + tuple(s + e for s, e in zip(spatial, win.end))
        params = {**window_params(spatial, win), "TOTAL": total,
                  "ED": (ed, "i32"), "EH": (eh, "i32"), "EW": (ew, "i32")}
        defs: dict[str, object] = {"MODE": self.row.mode}
        writes = {"y": ctx.output(0)}
        if self.row.mode == "max":
            defs["LOWEST"] = EXTREMES["lowest"][compute]
            if self.wants_indices(ctx):
                defs["INDICES"] = True
                defs["COLMAJOR"] = bool(ctx.attr("storage_order", 0))
                writes["indices"] = ctx.output(1)
        elif self.row.mode == "avg":
            defs["COUNT_PAD"] = bool(ctx.attr("count_include_pad", 0))
        else:
            params["LP"] = float(ctx.attr("p", 2))
        return [ctx.dispatch("pooling/pool.wgsl", label=f"pool_{self.row.mode}", defs=defs, params=params,
                             reads={"x": ctx.input(0)}, writes=writes, workgroups=ctx.grid(total))]


class MaxUnpool(Operator):
    """The inverse of MaxPool: zeros, with X[j] written at flat output index I[j].

    The output is [N, C, *(in - 1) * stride + kernel - pads], or the constant `output_shape`
    input (which may hold symbolic dims, e.g. computed by Shape from the pooled tensor).
    """

    op_type = "MaxUnpool"

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        x = ctx.input_shape(0)
        if not 3 <= len(x) <= 2 + MAX_SPATIAL:
            raise ctx.fail(f"expects [N, C, *spatial] with 1 to {MAX_SPATIAL} spatial axes, got rank {len(x)}", 0)
        if not ctx.input_dtype(1).is_integer or len(ctx.input_shape(1)) != len(x):
            raise ctx.fail(f"indices must be integers shaped like X {shape_str(x)}", 1)
        if ctx.has_input(2):
            out = tuple(ctx.require_dims(2, "output_shape"))
            if len(out) != len(x):
                raise ctx.fail(f"output_shape must have {len(x)} entries, got {len(out)}", 2)
            return [(ctx.input_dtype(0), out)]
        n = len(x) - 2
        kernel = int_list(ctx, "kernel_shape", n, 1, minimum=1)
        strides = int_list(ctx, "strides", n, 1, minimum=1)
        pads = int_list(ctx, "pads", 2 * n, 0)
        spatial = tuple((s - 1) * st + k - pads[a] - pads[n + a]
                        for a, (s, st, k) in enumerate(zip(x[2:], strides, kernel)))
        return [(ctx.input_dtype(0), (x[0], x[1], *spatial))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        shape = ctx.graph.tensor(ctx.node.outputs[0]).shape
        if vals is None or not all(isinstance(d, int) for d in shape):
            return None
        y = np.zeros(int(np.prod(shape)), vals[0].dtype)
        y[vals[1].reshape(-1)] = vals[0].reshape(-1)
        return [ctx.cast_output(y.reshape(shape))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        count = numel(ctx.input_shape(0))
        ctx.compute_type(ctx.input_dtype(0), "input")
        return plan_fill(ctx, 0, 0) + [
            ctx.dispatch("pooling/unpool.wgsl",
                         params={"N": count, "TOTAL": numel(ctx.output_shape(0))},
                         reads={"x": ctx.input(0), "indices": ctx.input(1)}, writes={"y": ctx.output(0)},
                         workgroups=ctx.grid(count))]


# ---- global pooling: reductions over the spatial axes ---------------------------------------

class GlobalPool(Reduce):
    """GlobalAveragePool / GlobalMaxPool / GlobalLpPool: [N, C, *spatial] -> [N, C, 1, ...].

    A row reduction over each (n, c) plane: reduction.py's walk, whose lanes split the plane (in
    parts past an invocation's loop cap), plus the walks a CPU-type adapter prefers."""

    cpu_variants = True

    def __init__(self, op_type: str, row: ReduceRow):
        super().__init__(op_type, row, axes_input=False)

    def reduced_axes(self, ctx: InferenceCtx, rank: int) -> set[int]:
        if rank < 3:
            raise ctx.fail(f"expects [N, C, *spatial] with at least one spatial axis, got rank {rank}", 0)
        if not ctx.input_dtype(0).is_float:
            raise ctx.fail(f"expects float input, got {ctx.input_dtype(0)}", 0)
        return set(range(2, rank))


def _lp_row(p: float) -> ReduceRow:
    return ReduceRow("zero", f"pow(abs(x), {p!r})", "a + b", f"pow(acc, {1.0 / p!r})",
                     lambda x, ax, k: np.sum(np.abs(x) ** p, axis=ax, keepdims=k) ** (1.0 / p), 18, float_acc=True)


class GlobalLpPool(GlobalPool):
    """The row depends on the attribute p: a per-node GlobalPool does the work."""

    def __init__(self):
        super().__init__("GlobalLpPool", _lp_row(2.0))

    def _for(self, ctx: InferenceCtx) -> GlobalPool:
        p = float(ctx.attr("p", 2))
        if p <= 0:
            raise ctx.fail(f"attribute 'p' {p} must be positive")
        return GlobalPool(self.op_type, _lp_row(p))

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        return self._for(ctx).fold(ctx)

    def plan(self, ctx: PlanCtx) -> list[Step]:
        return self._for(ctx).plan(ctx)


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    ops: list[tuple[Operator, int]] = [(Pool(name, row), 1) for name, row in POOL_OPS.items()]
    ops.append((MaxUnpool(), 9))
    ops += [(GlobalPool("GlobalAveragePool", REDUCE_OPS["ReduceMean"]), 1),
            (GlobalPool("GlobalMaxPool", REDUCE_OPS["ReduceMax"]), 1), (GlobalLpPool(), 1)]
    return ops
