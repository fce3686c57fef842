"""Indexing operators: Gather, Concat."""

from __future__ import annotations

import numpy as np

from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, numel
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.plan import Step


class Gather(Operator):
    op_type = "Gather"

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        data, idx = ctx.input_shape(0), ctx.input_shape(1)
        if not ctx.input_dtype(1).is_integer:
            raise ctx.fail(f"indices must be int32/int64, got {ctx.input_dtype(1)}", 1)
        axis = ctx.axis(ctx.attr("axis", 0), len(data))
        return [(ctx.input_dtype(0), tuple(data[:axis]) + tuple(idx) + tuple(data[axis + 1:]))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        data, idx = ctx.input_value(0), ctx.input_value(1)
        if data is None or idx is None or idx.dtype == object:
            return None
        axis = ctx.axis(ctx.attr("axis", 0), data.ndim)
        return [np.take(data, idx.astype(np.int64), axis=axis)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        data = ctx.input_shape(0)
        axis = ctx.axis(ctx.attr("axis", 0), len(data))
        n = numel(ctx.output_shape(0))
        dtype = ctx.device_type(ctx.input_dtype(0), "data")
        return [ctx.dispatch("indexing/gather.wgsl", defs={"T": dtype},
                             params={"N": n, "INNER": numel(data[axis + 1:]), "NIDX": numel(ctx.input_shape(1)),
                                     "AXIS_DIM": data[axis]},
                             reads=[ctx.input(0), ctx.input(1)], writes=[ctx.output(0)], workgroups=ctx.grid(n))]


class Concat(Operator):
    op_type = "Concat"

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        shapes = [ctx.input_shape(i) for i in range(ctx.num_inputs) if ctx.has_input(i)]
        rank = len(shapes[0])
        axis = ctx.axis(ctx.attr("axis"), rank)
        total: Dim = 0
        for i, s in enumerate(shapes):
            if len(s) != rank:
                raise ctx.fail(f"rank {len(s)} differs from input 0's rank {rank}", i)
            if ctx.input_dtype(i) != ctx.input_dtype(0):
                raise ctx.fail(f"dtype {ctx.input_dtype(i)} differs from input 0's {ctx.input_dtype(0)}", i)
            total = total + s[axis]
        out = list(shapes[0])
        out[axis] = total
        return [(ctx.input_dtype(0), tuple(out))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        values = [v for v in ctx.values() if v is not None]
        if len(values) != ctx.num_inputs:
            return None
        axis = ctx.axis(ctx.attr("axis"), values[0].ndim)
        if any(v.dtype == object for v in values):
            return [np.concatenate([v.astype(object) for v in values], axis=axis)]
        return [np.concatenate(values, axis=axis).astype(ctx.output_dtype().numpy)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        out = ctx.output_shape(0)
        axis = ctx.axis(ctx.attr("axis"), len(out))
        inner = numel(out[axis + 1:])
        dtype = ctx.device_type(ctx.output_dtype(0), "output")
        steps: list[Step] = []
        offset: Dim = 0
        for i in range(ctx.num_inputs):
            shape = ctx.input_shape(i)
            n = numel(shape)
            row = shape[axis] * inner
            if not (isinstance(n, int) and n == 0):
                steps.append(ctx.dispatch("indexing/copy_slab.wgsl", defs={"T": dtype},
                                          params={"N": n, "IN_ROW": row, "OUT_ROW": out[axis] * inner,
                                                  "OFFSET": offset * inner},
                                          reads=[ctx.input(i)], writes=[ctx.output(0)], workgroups=ctx.grid(n)))
            offset = offset + shape[axis]
        return steps


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(Gather(), 1), (Concat(), 1)]
