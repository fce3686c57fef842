"""Operators that passes create: FusedElementwise (domain "onyxia").

A FusedElementwise node carries a small program produced by ElementwiseFusionPass: one WGSL
expression per fused op, each over the node's inputs `x0..xk` and earlier values `v0..vj`,
the last one being the result. It plans as a single map dispatch (shaders/elementwise/map.wgsl)
with the values as `let` statements, so a chain of N elementwise ops reads its inputs once and
writes once instead of N times, and shared subexpressions are computed once.
"""

from __future__ import annotations

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape
from onyxia.operators.base import InferenceCtx, Operator, PlanCtx
from onyxia.operators.elementwise.map_kernel import map_dispatch, operand
from onyxia.plan import Step

FUSED_DOMAIN = "onyxia"


class FusedElementwise(Operator):
    op_type = "FusedElementwise"
    domain = FUSED_DOMAIN

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        # Elementwise ops commute with broadcasting: the result has the broadcast shape of the
        # inputs and the dtype of the fused chain's last op ("dtype": a widening Cast may end it;
        # nodes fused before it existed take their first input's dtype).
        shapes = [ctx.input_shape(i) for i in range(ctx.num_inputs)]
        dtype = ctx.attr("dtype", None)
        return [(dtypes.from_name(dtype) if dtype else ctx.input_dtype(0), ctx.broadcast(shapes))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        exprs: list[str] = list(ctx.attr("exprs"))
        body = "\n    ".join(f"let v{j} = {e};" for j, e in enumerate(exprs))
        params = dict(zip(ctx.attr("param_names", []), ctx.attr("param_values", [])))
        operands = [operand(ctx, i, "f32") for i in range(ctx.num_inputs)]
        return map_dispatch(ctx, f"v{len(exprs) - 1}", operands, params=params, body=body,
                            label=f"fused_{ctx.attr('signature', 'map')}")


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(FusedElementwise(), 1)]
