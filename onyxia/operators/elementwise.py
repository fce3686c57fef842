"""Elementwise families: one class each, one table row per op.

A row gives the WGSL expression (over `x0`, `x1`, computed in the input's device type, or a
dict keyed by device type "f32"/"i32"/"u32") and the numpy function that folds it. Adding an
elementwise op is one row. All share one kernel template, shaders/elementwise/map.wgsl, with
NumPy broadcasting through generated index code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape, numel
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import broadcast_shapes, strided_index_params
from onyxia.plan import Step

Expr = str | Mapping[str, str]


def _expr_for(expr: Expr, device: str, ctx: InferenceCtx) -> str:
    if isinstance(expr, str):
        return expr
    if device in expr:
        return expr[device]
    raise ctx.fail(f"{ctx.node.op_type} is not supported for this input dtype "
                   f"({ctx.input_dtype(0).name}; supported device types: {', '.join(expr)})", 0)


def plan_map(ctx: PlanCtx, expr: str, inputs: list[int], compute: list[str] | None = None,
             label: str | None = None) -> list[Step]:
    """One dispatch computing y = expr(x0, x1, ...) with broadcasting over `inputs`."""
    out_shape = ctx.output_shape(0)
    n = numel(out_shape)
    if isinstance(n, int) and n == 0:
        return []
    names = [f"x{k}" for k in range(len(inputs))]
    params, index_code = strided_index_params(out_shape, [ctx.input_shape(i) for i in inputs], names)
    storage = [ctx.device_type(ctx.input_dtype(i), f"input {i}") for i in inputs]
    compute = compute or storage
    defs: dict[str, object] = {"NIN": len(inputs), "EXPR": expr, "INDEX": index_code,
                               "TY": ctx.device_type(ctx.output_dtype(0), "output")}
    for k, (t, c) in enumerate(zip(storage, compute)):
        defs[f"T{k}"], defs[f"C{k}"] = t, c
    return [ctx.dispatch("elementwise/map.wgsl", label=label or f"map_{ctx.node.op_type}", defs=defs,
                         params={"N": n, **params}, reads=[ctx.input(i) for i in inputs],
                         writes=[ctx.output(0)], workgroups=ctx.grid(n))]


@dataclass(frozen=True)
class BinaryRow:
    expr: Expr
    fold: Callable[[np.ndarray, np.ndarray], np.ndarray]
    result: str = "same"  # "same" (input dtype) or "bool"


class BinaryElementwise(Operator):
    """Add, Sub, Mul, ... : two inputs of one dtype, NumPy broadcasting."""

    def __init__(self, op_type: str, row: BinaryRow):
        self.op_type, self.row = op_type, row

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        a, b = ctx.input_dtype(0), ctx.input_dtype(1)
        if a != b and self.op_type not in ("Pow", "BitShift"):
            raise ctx.fail(f"inputs must have the same dtype, got {a} and {b}", 1)
        shape = broadcast_shapes([ctx.input_shape(0), ctx.input_shape(1)], ctx.fail)
        return [(dtypes.BOOL if self.row.result == "bool" else a, shape)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        with np.errstate(all="ignore"):
            return ctx.binary_fold(self.row.fold)

    def plan(self, ctx: PlanCtx) -> list[Step]:
        device = ctx.device_type(ctx.input_dtype(0), "input 0")
        return plan_map(ctx, _expr_for(self.row.expr, device, ctx), [0, 1], [device, device])


@dataclass(frozen=True)
class UnaryRow:
    expr: Expr
    fold: Callable[[np.ndarray], np.ndarray]


class UnaryElementwise(Operator):
    """Relu, Neg, Sqrt, ... : one input, same dtype and shape out."""

    def __init__(self, op_type: str, row: UnaryRow):
        self.op_type, self.row = op_type, row

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        return [(ctx.input_dtype(0), ctx.input_shape(0))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        with np.errstate(all="ignore"):
            return ctx.unary_fold(self.row.fold)

    def plan(self, ctx: PlanCtx) -> list[Step]:
        device = ctx.device_type(ctx.input_dtype(0), "input 0")
        return plan_map(ctx, _expr_for(self.row.expr, device, ctx), [0])


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # ONNX integer Div truncates toward zero (as C and WGSL do), unlike numpy's floor_divide.
    if np.issubdtype(np.asarray(a).dtype, np.integer):
        return np.trunc(np.divide(a, b)).astype(np.result_type(a, b))
    return np.divide(a, b)


BINARY_OPS: dict[str, BinaryRow] = {
    "Add": BinaryRow("x0 + x1", np.add),
    "Sub": BinaryRow("x0 - x1", np.subtract),
    "Mul": BinaryRow("x0 * x1", np.multiply),
    "Div": BinaryRow("x0 / x1", _int_div),
}

UNARY_OPS: dict[str, UnaryRow] = {
    "Relu": UnaryRow({"f32": "max(x0, 0.0)", "i32": "max(x0, 0i)"}, lambda x: np.maximum(x, 0)),
    "Neg": UnaryRow({"f32": "-x0", "i32": "-x0"}, np.negative),
    "Sqrt": UnaryRow({"f32": "sqrt(x0)"}, np.sqrt),
}


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) for every row of the tables."""
    ops: list[tuple[Operator, int]] = []
    ops += [(BinaryElementwise(name, row), 1) for name, row in BINARY_OPS.items()]
    ops += [(UnaryElementwise(name, row), 1) for name, row in UNARY_OPS.items()]
    return ops
