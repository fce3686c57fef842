"""The shared elementwise kernel: one dispatch of shaders/elementwise/map.wgsl computing a WGSL
expression over broadcast operands. The elementwise families, Cast and the fused chains of
ElementwiseFusionPass all plan through `map_dispatch`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from onyxia.ir.shapes import Shape, numel
from onyxia.operators.base import Buf, PlanCtx
from onyxia.operators.common import strided_index_params
from onyxia.plan import Step


@dataclass(frozen=True)
class Operand:
    """One kernel input: its buffer, the shape it broadcasts from and the type it computes in
    (its storage type comes from the tensor's dtype)."""

    buffer: str
    shape: Shape
    compute: str


def operand(ctx: PlanCtx, i: int, compute: str | None = None, shape: Shape | None = None) -> Operand:
    native = ctx.compute_type(ctx.input_dtype(i), f"input {i}")
    return Operand(ctx.input(i), ctx.input_shape(i) if shape is None else shape, compute or native)


def map_dispatch(ctx: PlanCtx, expr: str, operands: Sequence[Operand], *, output: str | None = None,
                 params: Mapping[str, Any] | None = None, label: str | None = None, body: str = "",
                 raw_output: bool = False, reports: str | None = None,
                 index: tuple[dict, str] | None = None) -> list[Step]:
    """One dispatch computing `expr` over `operands` (named x0, x1, ...) broadcast to the shape
    of output 0, written to `output` (default: output 0 itself) in its dtype: the value is
    rounded or wrapped once, when stored. `body` holds statements run after the loads (fused
    chains define their intermediate values there). With `raw_output` the expression gives the
    output's storage code (a u32) itself. `reports`: the expression may call onyxia_report()
    (the checked int64 arithmetic), meaning this. `index`: (params, code) defining idx_x0, ...
    from the flat output index i, instead of NumPy broadcasting."""
    out_shape = ctx.output_shape(0)
    n = numel(out_shape)
    if isinstance(n, int) and n == 0:
        return []
    out = output or ctx.output(0)
    ctx.compute_type(ctx.tensor_dtype(out), "output")
    names = [f"x{k}" for k in range(len(operands))]
    index_params, index_code = index or strided_index_params(out_shape, [o.shape for o in operands], names)
    defs = {
        "INDEX": index_code, "EXPR": expr,
        "LOADS": "\n    ".join([f"let x{k} = {o.compute}(in{k}_load(idx_x{k}));" for k, o in enumerate(operands)]
                                  + ([body] if body else [])),
    }
    if reports:
        defs["ONYXIA_CHECKED"] = True  # math.wgsl's checked helpers
    return [ctx.dispatch("elementwise/map.wgsl", label=label or f"map_{ctx.node.op_type}", defs=defs,
                         params={"N": n, **index_params, **(params or {})},
                         reads={f"in{k}": o.buffer for k, o in enumerate(operands)},
                         writes={"y": Buf(out, whole_words=True, raw=raw_output)},
                         workgroups=ctx.unit_grid(n, out), reports=reports)]


def plan_map(ctx: PlanCtx, expr: str, inputs: list[int], compute: list[str] | None = None,
             label: str | None = None, params: Mapping[str, Any] | None = None,
             raw_output: bool = False, reports: str | None = None) -> list[Step]:
    """One dispatch computing y = expr(x0, x1, ...) over node inputs `inputs` with broadcasting."""
    compute = compute or [None] * len(inputs)  # type: ignore[list-item]
    return map_dispatch(ctx, expr, [operand(ctx, i, c) for i, c in zip(inputs, compute)], label=label,
                        params=params, raw_output=raw_output, reports=reports)
