"""Operators whose output size the data decides: NonZero and Compress (Unique and
NonMaxSuppression: operators/selection/unique_nms.py).

Each is planned for an upper bound (every element a hit) and introduces a data-dependent symbol
(`DimEnv.data_symbol`) for the real count: buffers are sized for the bound, the kernels compute
the count on the device, and a ReadSymbol step reads back only those 4 bytes and sets the
symbol, so every later dispatch, copy and output shape that uses it is patched before it is
encoded (runtime/control.py). With a constant input they fold instead, with no symbol at all.

The kernels: flags (x != 0), an exclusive prefix sum of the flags (reduction/cumsum.wgsl, the
CumSum kernel) and a scatter that writes hit k of the scan to its slot (selection/compact.wgsl);
Compress then gathers the selected slices with indexing/gather.wgsl, sized by the symbol.
"""

from __future__ import annotations

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, numel
from onyxia.operators.base import WORKGROUP_SIZE, FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import is_zero
from onyxia.operators.indexing.indexing import coords_code, dispatch_gather
from onyxia.operators.reduction.reduction import lanes_for
from onyxia.plan import ReadSymbol, Step, WriteBuffer

COMPACT = "selection/compact.wgsl"


def plan_compaction(ctx: PlanCtx, x: str, n: Dim, live: Dim, coords: str, store: str,
                    params: dict[str, object], out: str, symbol: Dim) -> list[Step]:
    """Flags of x[:live] over n slots, their exclusive prefix sum, the scatter of each hit
    (`coords` / `store` WGSL, `params`) into `out`, then the ReadSymbol of the hit count."""
    flags = ctx.scratch(n, "int32", "flags")
    pos = ctx.scratch(n, "int32", "positions")
    count = ctx.scratch(1, "int32", "count")
    lanes = lanes_for(1, n, True)
    flag_step = ctx.dispatch(COMPACT, label="compact_flags", defs={"FLAGS": True},
                             params={"N": n, "LIVE": live}, reads={"x": x}, writes={"flags": flags},
                             workgroups=ctx.grid(n))
    scan = ctx.dispatch("reduction/cumsum.wgsl", defs={"COMBINE": "a + b", "IDENTITY": 0, "LANES": lanes,
                                                       "RED_INNER": 1, "EXCLUSIVE": True},
                        params={"L": 1, "K": n, "INNER": 1}, reads={"src": flags}, writes={"dst": pos},
                        workgroups=ctx.grid(1, WORKGROUP_SIZE // lanes))
    scatter = ctx.dispatch(COMPACT, label="compact_scatter", defs={"SCATTER": True, "COORDS": coords, "STORE": store},
                           params={"N": n, **params}, reads={"flags": flags, "pos": pos},
                           writes={"y": out, "count": count}, workgroups=ctx.grid(n))
    return [flag_step, scan, scatter, ReadSymbol(count, str(symbol), n)]


class NonZero(Operator):
    """The coordinates of the non-zero elements, [rank, count], in row-major order."""

    op_type = "NonZero"

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        shape = ctx.input_shape(0)
        rank = max(len(shape), 1)
        value = ctx.input_value(0)
        if value is not None and value.dtype != object:
            return [(dtypes.INT64, (rank, int(np.count_nonzero(value))))]
        n = numel(shape)
        if is_zero(n):
            return [(dtypes.INT64, (rank, 0))]
        # Named by the input, not the node: NonZero nodes of one tensor (an exporter's boxes[keep],
        # scores[keep], labels[keep]) share the count, so their results broadcast together.
        return [(dtypes.INT64, (rank, ctx.env.data_symbol(f"nonzero_{ctx.node.inputs[0]}", n)))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        x = vals[0]
        return [np.array(np.nonzero(x.reshape(-1) if x.ndim == 0 else x), dtype=np.int64).reshape(max(x.ndim, 1), -1)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        shape = ctx.input_shape(0) or (1,)
        n = numel(shape)
        rank, count = ctx.output_shape(0)
        if is_zero(n):
            return []
        params, lines = coords_code(shape)
        store = " ".join(f"y_store({d}u * total + k, i32(c{d}));" for d in range(len(shape)))
        ctx.compute_type(ctx.input_dtype(0), "input")
        return plan_compaction(ctx, ctx.input(0), n, n, "\n    ".join(lines), store, params, ctx.output(0), count)


class Compress(Operator):
    """The slices of x along `axis` (of the flattened x without one) where condition is true.

    A condition shorter than the axis selects nothing past its end (as onnxruntime)."""

    op_type = "Compress"

    def _layout(self, ctx: InferenceCtx) -> tuple[Shape, int | None, Dim]:
        shape = ctx.input_shape(0)
        cond = ctx.input_shape(1)
        if len(cond) != 1:
            raise ctx.fail(f"condition must be 1-D, got rank {len(cond)}", 1)
        if not ctx.input_dtype(1).is_bool:
            raise ctx.fail(f"condition must be bool, got {ctx.input_dtype(1)}", 1)
        raw = ctx.attr("axis", None)
        axis = None if raw is None else ctx.axis(int(raw), len(shape))
        return shape, axis, cond[0]

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        shape, axis, length = self._layout(ctx)
        dim = numel(shape) if axis is None else shape[axis]
        if isinstance(length, int) and isinstance(dim, int) and length > dim:
            raise ctx.fail(f"condition has {length} entries, more than the {dim} slices along the axis", 1)
        cond = ctx.input_value(1)
        if cond is not None:
            count: Dim = int(np.count_nonzero(cond[:dim] if isinstance(dim, int) else cond))
        elif is_zero(dim) or is_zero(length):
            count = 0
        else:
            count = ctx.env.data_symbol(f"{ctx.node.name}_count", dim)
        if axis is None:
            return [(ctx.input_dtype(0), (count,))]
        return [(ctx.input_dtype(0), (*shape[:axis], count, *shape[axis + 1:]))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        x, cond = vals
        _, axis, _ = self._layout(ctx)
        return [ctx.cast_output(np.compress(cond, x, axis=axis))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        shape, axis, length = self._layout(ctx)
        flat = axis is None
        data = (numel(shape),) if flat else shape
        axis = 0 if flat else axis
        dim = data[axis]
        out_shape = ctx.output_shape(0)
        count = out_shape[axis]
        if is_zero(numel(out_shape)) or is_zero(dim):
            return []
        steps: list[Step] = []
        if isinstance(count, int):  # a constant condition: its indices are known
            idx = ctx.scratch(max(count, 1), "int32", "selected")
            picks = np.flatnonzero(ctx.input_value(1)[:dim]) if isinstance(dim, int) else None
            assert picks is not None
            steps.append(WriteBuffer(idx, tuple(int(p) for p in picks), "int32"))
        else:
            idx = ctx.scratch(dim, "int32", "selected")
            ctx.compute_type(ctx.input_dtype(1), "condition")
            steps += plan_compaction(ctx, ctx.input(1), dim, length, "", "y_store(k, i32(i));", {}, idx, count)
        code = ("let inner = i % INNER(); let t = i / INNER(); let j = t % NIDX(); let outer = t / NIDX();\n"
                "    let src = (outer * AXIS_DIM() + u32(idx_load(j))) * INNER() + inner;\n"
                "    let dst = i;")
        params = {"INNER": numel(data[axis + 1:]), "NIDX": count, "AXIS_DIM": dim}
        return steps + dispatch_gather(ctx, code, params, x=ctx.input(0), y=ctx.output(0), idx=idx,
                                       count=numel(out_shape), label="compress_gather")


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(NonZero(), 9), (Compress(), 9)]
