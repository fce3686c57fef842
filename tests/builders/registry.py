"""Builders shared by tests/unit/test_registry.py and tests/gpu/test_executor.py:
a custom operator and its registry."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape, numel
from onyxia.operators import Operator, OperatorRegistry, core_operator_registry
from onyxia.operators.base import InferenceCtx, PlanCtx
from onyxia.plan import Step
from tests.helpers import make_model

CUSTOM_DOMAIN = "com.example"


# y = x * x * ALPHA over f32; ALPHA is a float param baked as a constant, N may be dynamic.
# Its WGSL imports the shipped common::grid like the built-in kernels do.
SCALED_SQUARE_WGSL = """
#import common::grid

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let i = grid_thread(wg);
    if (i >= N()) { return; }
    let v = x_load(i);
    y_store(i, v * v * ALPHA());
}
"""


class ScaledSquare(Operator):
    """A user operator: ScaledSquare(x, alpha) = alpha * x², with its own WGSL."""

    op_type = "ScaledSquare"
    domain = CUSTOM_DOMAIN

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        if ctx.input_dtype(0).name != "float32":
            raise ctx.fail("expects float32", 0)
        return [(ctx.input_dtype(0), ctx.input_shape(0))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        n = numel(ctx.output_shape(0))
        return [ctx.dispatch("", source=SCALED_SQUARE_WGSL, label="scaled_square",
                             params={"N": n, "ALPHA": float(ctx.attr("alpha", 1.0))},
                             reads={"x": ctx.input(0)}, writes={"y": ctx.output(0)}, workgroups=ctx.grid(n))]


def scaled_square_model(alpha: float = 0.5, custom: bool = True):
    """The custom op followed by a core op; with custom=False, the same maths in standard ONNX
    (the onnxruntime oracle for the custom model)."""
    if custom:
        nodes = [h.make_node("ScaledSquare", ["x"], ["sq"], domain=CUSTOM_DOMAIN, alpha=alpha, name="custom")]
        inits: dict = {}
    else:
        nodes = [h.make_node("Mul", ["x", "x"], ["x2"]), h.make_node("Mul", ["x2", "alpha"], ["sq"])]
        inits = {"alpha": np.float32(alpha)}
    nodes.append(h.make_node("Add", ["sq", "x"], ["y"], name="core_add"))
    return make_model(nodes, [("x", np.float32, ["batch", 5])], ["y"], inits,
                      extra_opsets={CUSTOM_DOMAIN: 1} if custom else None)


def custom_registry() -> OperatorRegistry:
    return core_operator_registry().register(ScaledSquare(), 1)
