"""Selection operators: TopK, Hardmax and OneHot.

Each works on "lines": the elements of one index along an axis, `x[base + r * INNER]` for
r < N with base = (line / INNER) * N * INNER + line % INNER, over outer * inner lines.

- TopK (shaders/selection/topk.wgsl) orders a line best first, ties by the lower index (as
  onnxruntime and onnx.reference do; `sorted=0` leaves the order free, so it is sorted too).
  A line whose static length fits in shared memory is bitonic-sorted there, several short lines
  per workgroup; a longer or symbolic line takes k selection passes of a whole workgroup, each
  finding the best element after the previous one in that total order (cheap for the small k
  of sampling and beam search).
- Hardmax (shaders/selection/hardmax.wgsl): LANES threads find a line's first maximum and
  write the one-hot line. Before opset 13 the input is coerced to 2-D at `axis`, so a "line"
  is the contiguous run of everything from `axis` on.
- OneHot (shaders/selection/onehot.wgsl): one thread per output element compares the depth
  coordinate with the (wrapped) index; depth must be a constant, values stay on the device.
"""

from __future__ import annotations

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, SymDim, numel
from onyxia.operators.base import MAX_TRIPS, WORKGROUP_SIZE, FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import is_zero
from onyxia.operators.reduction.reduction import ReduceWalk, arg_defs, bound_of, lanes_for, next_pow2
from onyxia.plan import ReadSymbol, Step

# Lines up to this many elements (a power of two) are bitonic-sorted in shared memory:
# 2048 (value, index) pairs of 4 bytes each fill WebGPU's guaranteed 16 KiB of workgroup memory.
BITONIC_MAX = 2048
# A bitonic workgroup sorts at least this many slots (several short lines) so that each of its
# 256 threads owns at least one compare-exchange pair per step.
BITONIC_MIN_SLOTS = 2 * WORKGROUP_SIZE
# The selection kernel (a symbolic line or k > BITONIC_MAX / 2) loops k x N / 256 times in one
# invocation; past this it reports (lavapipe stops an invocation's loops after ~65,535 iterations).
SELECT_TRIPS = 8 * MAX_TRIPS
TOPK_TOO_LONG = (f"k x line length / 256 is more than the {SELECT_TRIPS} selection steps one invocation may loop over "
                 f"(a static line with k <= {BITONIC_MAX // 2} has no limit)")
# WGSL has no infinity literal: build the extremes from their bits.
_WORST = {True: {"f32": "bitcast<f32>(0xff800000u)", "i32": "(-2147483647i - 1i)", "u32": "0u"},
          False: {"f32": "bitcast<f32>(0x7f800000u)", "i32": "2147483647i", "u32": "4294967295u"}}


def _line_params(shape: Shape, axis: int) -> dict[str, Dim]:
    return {"L": numel(shape[:axis]) * numel(shape[axis + 1:]), "N": shape[axis], "INNER": numel(shape[axis + 1:])}


# ---- TopK ---------------------------------------------------------------------------------

def topk_fold(x: np.ndarray, k: int, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """Best first along `axis`, ties by the lower index (stable sorts keep index order)."""
    if largest:  # a stable ascending sort of the reversed line, reversed back: ties keep index order
        n = x.shape[axis]
        order = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
        order = n - 1 - order
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    order = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, order, axis=axis), order.astype(np.int64)


class TopK(Operator):
    """TopK-1 (k attribute), TopK-10 (k input) and TopK-11 (largest, sorted, negative axis)."""

    op_type = "TopK"

    def __init__(self, k_input: bool):
        self.k_input = k_input

    def _k(self, ctx: InferenceCtx) -> Dim:
        if not self.k_input:
            return int(ctx.attr("k"))
        if ctx.input_value(1) is None:
            # k is fed (or computed on the device): a data-dependent symbol that a ReadSymbol step
            # sets before the kernel runs, from the host feed when k is a graph input.
            if not ctx.same_dim(numel(ctx.input_shape(1)), 1):
                raise ctx.fail(f"k must hold one integer, got shape {list(ctx.input_shape(1))}", 1)
            shape = ctx.input_shape(0)
            axis = ctx.axis(int(ctx.attr("axis", -1)), len(shape))
            return ctx.env.data_symbol(f"{ctx.node.name}_k", shape[axis])
        value = np.asarray(ctx.require_value(1, "k")).reshape(-1)
        if value.size != 1:
            raise ctx.fail(f"k must hold one integer, got {value.tolist()}", 1)
        k = value[0]
        return k if isinstance(k, SymDim) else int(k)

    def _config(self, ctx: InferenceCtx) -> tuple[Shape, int, Dim]:
        shape = ctx.input_shape(0)
        if ctx.input_dtype(0).is_bool:
            raise ctx.fail("TopK does not accept bool input", 0)
        axis = ctx.axis(int(ctx.attr("axis", -1)), len(shape))
        k = self._k(ctx)
        if isinstance(k, int) and k < 0:
            raise ctx.fail(f"k must be non-negative, got {k}", 1 if self.k_input else None)
        if isinstance(k, int) and isinstance(shape[axis], int) and k > shape[axis]:
            raise ctx.fail(f"k = {k} exceeds the axis length {shape[axis]}", 1 if self.k_input else None)
        return shape, axis, k

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        shape, axis, k = self._config(ctx)
        out = tuple(shape[:axis]) + (k,) + tuple(shape[axis + 1:])
        return [(ctx.input_dtype(0), out), (dtypes.INT64, out)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        x = ctx.input_value(0)
        if x is None or x.dtype == object:
            return None
        _, axis, k = self._config(ctx)
        if not isinstance(k, int):
            return None
        values, indices = topk_fold(x, k, axis, bool(ctx.attr("largest", 1)))
        return [ctx.cast_output(values, 0), ctx.cast_output(indices, 1)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        shape, axis, k = self._config(ctx)
        params = {**_line_params(shape, axis), "K": k}
        read: list[Step] = []
        if self.k_input and ctx.input_value(1) is None:
            read = [ReadSymbol(ctx.input(1), str(k), shape[axis])]
        if is_zero(params["L"]) or is_zero(k):
            return read
        compute = ctx.compute_type(ctx.input_dtype(0), "input")
        largest = bool(ctx.attr("largest", 1))
        defs: dict[str, object] = {"CMP": ">" if largest else "<", "WORST": _WORST[largest][compute]}
        n = shape[axis]
        if isinstance(n, int) and next_pow2(n) <= BITONIC_MAX:
            size = max(next_pow2(n), 2)  # a pair at least: the network indexes by size / 2
            slots = max(size, BITONIC_MIN_SLOTS)
            defs.update(BITONIC=True, SIZE=size, SLOTS=slots)
            params["PARTS"] = 1
            grid = ctx.grid(params["L"], slots // size)
        elif isinstance(n, int) and isinstance(k, int) and k <= BITONIC_MAX // 2:
            return read + self.plan_candidates(ctx, params, defs, n, k)
        else:
            reports = None
            trips = k * -(-n // WORKGROUP_SIZE) if isinstance(k, int) and isinstance(n, int) else None
            if trips is None:
                defs["GUARD"], reports = SELECT_TRIPS, TOPK_TOO_LONG
            elif trips > SELECT_TRIPS:
                raise ctx.fail(f"k = {k} over a line of {n} takes {trips} selection steps per invocation, more "
                               f"than the {SELECT_TRIPS} a kernel may loop over (k <= {BITONIC_MAX // 2} has no limit)")
            return read + [ctx.dispatch("selection/topk.wgsl", label="topk", defs=defs, params=params,
                                        reads={"x": ctx.input(0)}, writes={"values": ctx.output(0),
                                                                           "indices": ctx.output(1)},
                                        workgroups=ctx.grid(params["L"], 1), reports=reports)]
        return read + [ctx.dispatch("selection/topk.wgsl", label="topk", defs=defs, params=params,
                                    reads={"x": ctx.input(0)},
                                    writes={"values": ctx.output(0), "indices": ctx.output(1)}, workgroups=grid)]

    def plan_candidates(self, ctx: PlanCtx, params: dict[str, Dim], defs: dict[str, object], n: int,
                        k: int) -> list[Step]:
        """A line longer than BITONIC_MAX, k <= BITONIC_MAX / 2: segments of BITONIC_MAX elements
        each keep their k best (bitonic sort in shared memory), a level at a time, until one
        segment per line is left. Every level divides the candidates by BITONIC_MAX / k >= 2;
        every invocation does a bounded amount of work."""
        lines, dtype = params["L"], ctx.input_dtype(0).name
        defs = {**defs, "BITONIC": True, "SIZE": BITONIC_MAX, "SLOTS": BITONIC_MAX}
        reads: dict[str, str] = {"x": ctx.input(0)}
        steps: list[Step] = []
        count, inner = n, params["INNER"]
        while count > BITONIC_MAX:
            parts = -(-count // BITONIC_MAX)
            values = ctx.scratch(lines * parts * k, dtype, "topk_values")
            indices = ctx.scratch(lines * parts * k, "int32", "topk_indices")
            steps.append(ctx.dispatch("selection/topk.wgsl", label="topk", defs={**defs, "CANDIDATES": True},
                                      params={"L": lines, "N": count, "INNER": inner, "K": k, "PARTS": parts},
                                      reads=reads, writes={"values": values, "indices": indices},
                                      workgroups=ctx.grid(lines * parts, 1)))
            reads = {"x": values, "idx": indices}
            defs["IDX"] = True
            count, inner = parts * k, 1
        size = max(next_pow2(count), 2)
        # The last level reads candidates (INNER 1) and writes the outputs laid out as the input.
        last = {**defs, "SIZE": size, "SLOTS": max(size, BITONIC_MIN_SLOTS), "OUT_INNER": True}
        steps.append(ctx.dispatch("selection/topk.wgsl", label="topk", defs=last,
                                  params={"L": lines, "N": count, "INNER": inner, "OINNER": params["INNER"], "K": k,
                                          "PARTS": 1},
                                  reads=reads, writes={"values": ctx.output(0), "indices": ctx.output(1)},
                                  workgroups=ctx.grid(lines, max(size, BITONIC_MIN_SLOTS) // size)))
        return steps


# ---- Hardmax ------------------------------------------------------------------------------

class Hardmax(Operator):
    """1 at the first maximum of each line, 0 elsewhere. Opset 13: along `axis` (default -1);
    before: over the input coerced to 2-D at `axis` (default 1), i.e. over all of x[..., axis:]."""

    op_type = "Hardmax"

    def __init__(self, coerce_2d: bool):
        self.coerce_2d = coerce_2d

    def _line(self, ctx: InferenceCtx) -> tuple[Shape, int]:
        """(the shape viewed so that lines run along one axis, that axis)."""
        shape = ctx.input_shape(0)
        if not ctx.input_dtype(0).is_float:
            raise ctx.fail(f"Hardmax needs float input, got {ctx.input_dtype(0)}", 0)
        if self.coerce_2d:
            raw, rank = int(ctx.attr("axis", 1)), len(shape)
            axis = raw + rank if raw < 0 else raw
            if not 0 <= axis <= rank:  # axis == rank coerces to [everything, 1]
                raise ctx.fail(f"axis {raw} is out of range for rank {rank}")
            return (numel(shape[:axis]), numel(shape[axis:])), 1
        return tuple(shape), ctx.axis(int(ctx.attr("axis", -1)), len(shape))

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        self._line(ctx)
        return [(ctx.input_dtype(0), ctx.input_shape(0))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        x = vals[0]
        view, axis = self._line(ctx)
        flat = x.reshape(view)
        y = np.zeros_like(flat)
        if flat.size:
            np.put_along_axis(y, np.expand_dims(np.argmax(flat, axis=axis), axis), 1, axis=axis)
        return [ctx.cast_output(y.reshape(x.shape))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        view, axis = self._line(ctx)
        params = _line_params(view, axis)
        if is_zero(params["L"]) or is_zero(params["N"]):
            return []
        lanes = lanes_for(params["L"], params["N"], True)
        compute = ctx.compute_type(ctx.input_dtype(0), "input")
        defs = {"LANES": lanes, "RED_INNER": 1}
        if bound_of(params["N"]) * 2 <= lanes * MAX_TRIPS:  # the kernel walks a line twice
            return [ctx.dispatch("selection/hardmax.wgsl", label="hardmax", defs=defs, params=params,
                                 reads={"x": ctx.input(0)}, writes={"y": ctx.output(0)},
                                 workgroups=ctx.grid(params["L"], WORKGROUP_SIZE // lanes))]
        # A long line: its first maximum by the (multi-pass) ArgMax, then one thread per element.
        winner = ctx.scratch(params["L"], "int32", "hardmax_index")
        view = (numel(view[:axis]), view[axis], numel(view[axis + 1:]))
        walk = ReduceWalk(ctx, "reduce_ArgMax", None, arg_defs(compute, ">", False), None, view[1])
        count = numel(view)
        return walk.plan({"src": ctx.input(0)}, winner, view, {1}, params["L"], bound_of(view[1])) + [
            ctx.dispatch("selection/hardmax.wgsl", label="hardmax", defs={**defs, "ONE_HOT": True},
                         params={**params, "COUNT": count}, reads={"x": ctx.input(0), "winner": winner},
                         writes={"y": ctx.output(0)}, workgroups=ctx.grid(count))]


# ---- OneHot -------------------------------------------------------------------------------

class OneHot(Operator):
    """y[..., d, ...] = values[1] where d == indices[...] (negative indices wrap), else values[0]."""

    op_type = "OneHot"

    def _config(self, ctx: InferenceCtx) -> tuple[Shape, int, Dim]:
        shape = ctx.input_shape(0)
        if ctx.input_dtype(0).is_bool:
            raise ctx.fail("indices must be numeric, got bool", 0)
        if not ctx.same_dim(numel(ctx.input_shape(1)), 1):
            raise ctx.fail("depth must hold one value", 1)
        if not ctx.same_dim(numel(ctx.input_shape(2)), 2):
            raise ctx.fail("values must be [off_value, on_value]", 2)
        raw = np.asarray(ctx.require_value(1, "depth")).reshape(-1)[0]
        depth = raw if isinstance(raw, SymDim) else int(raw)  # float depths truncate, as onnxruntime
        if isinstance(depth, int) and depth < 1:
            raise ctx.fail(f"depth must be positive, got {depth}", 1)
        axis = ctx.axis(int(ctx.attr("axis", -1)), len(shape) + 1)
        return shape, axis, depth

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        shape, axis, depth = self._config(ctx)
        return [(ctx.input_dtype(2), tuple(shape[:axis]) + (depth,) + tuple(shape[axis:]))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        shape, axis, depth = self._config(ctx)
        if not isinstance(depth, int):
            return None
        idx = vals[0]  # compared as stored: a fractional float index matches nothing
        idx = np.where(idx < 0, idx + depth, idx)
        hot = np.expand_dims(idx, axis) == np.arange(depth).reshape((depth,) + (1,) * (len(shape) - axis))
        off, on = vals[2].reshape(-1)
        return [ctx.cast_output(np.where(hot, on, off))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        shape, axis, depth = self._config(ctx)
        count = numel(ctx.output_shape(0))
        if is_zero(count):
            return []
        ctx.compute_type(ctx.input_dtype(0), "indices")
        ctx.compute_type(ctx.input_dtype(2), "values")
        params = {"COUNT": count, "DEPTH": depth, "INNER": numel(shape[axis:])}
        return [ctx.dispatch("selection/onehot.wgsl", label="onehot", params=params,
                             reads={"indices": ctx.input(0), "values": ctx.input(2)}, writes={"y": ctx.output(0)},
                             workgroups=ctx.grid(count))]


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(TopK(k_input=False), 1), (TopK(k_input=True), 10),
            (Hardmax(coerce_2d=True), 1), (Hardmax(coerce_2d=False), 13),
            (OneHot(), 9)]
