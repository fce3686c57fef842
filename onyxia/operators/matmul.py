"""MatMul (batched, NumPy broadcasting of batch dims)."""

from __future__ import annotations

import numpy as np

from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape, numel
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import broadcast_shapes, strided_index_params
from onyxia.plan import Step


def matmul_shapes(ctx: InferenceCtx) -> tuple[Shape, Shape, Shape, Shape]:
    """(batch_a, batch_b, batch_out, out) with 1-D operands promoted as NumPy does."""
    a, b = ctx.input_shape(0), ctx.input_shape(1)
    if not a or not b:
        raise ctx.fail("MatMul operands must have rank >= 1", 0 if not a else 1)
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    if isinstance(a2[-1], int) and isinstance(b2[-2], int) and a2[-1] != b2[-2]:
        raise ctx.fail(f"inner dims differ: {a2[-1]} vs {b2[-2]}", 1)
    batch = broadcast_shapes([a2[:-2], b2[:-2]], ctx.fail)
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
        return None if vals is None else [ctx.cast_output(np.matmul(vals[0], vals[1]))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        a, b = ctx.input_shape(0), ctx.input_shape(1)
        batch_a, batch_b, batch, _ = matmul_shapes(ctx)
        m = a[-2] if len(a) > 1 else 1
        k = a[-1]
        n = b[-1] if len(b) > 1 else 1
        params, index = strided_index_params(batch, [batch_a, batch_b], ["x0", "x1"])
        dtype = ctx.device_type(ctx.input_dtype(0), "input 0")
        nbatch = numel(batch)
        return [ctx.dispatch("matmul/tiled.wgsl", defs={"T": dtype, "INDEX": index},
                             params={"M": m, "N": n, "K": k, **params},
                             reads=[ctx.input(0), ctx.input(1)], writes=[ctx.output(0)],
                             workgroups=((n + 15) // 16, (m + 15) // 16, nbatch))]


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(MatMul(), 1)]
