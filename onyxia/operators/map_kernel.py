"""The shared elementwise kernel: one dispatch of shaders/elementwise/map.wgsl computing a WGSL
expression over broadcast operands. The elementwise families, Cast and the fused chains of
ElementwiseFusionPass all plan through `map_dispatch`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from onyxia.ir.shapes import Shape, numel
from onyxia.operators.base import PlanCtx
from onyxia.operators.common import strided_index_params
from onyxia.plan import Step


@dataclass(frozen=True)
class Operand:
    """One kernel input: its buffer, the shape it broadcasts from, storage and compute types."""

    buffer: str
    shape: Shape
    storage: str
    compute: str


def operand(ctx: PlanCtx, i: int, compute: str | None = None, shape: Shape | None = None) -> Operand:
    storage = ctx.device_type(ctx.input_dtype(i), f"input {i}")
    return Operand(ctx.input(i), ctx.input_shape(i) if shape is None else shape, storage, compute or storage)


_WRAP_BITS = {"int8": 8, "int16": 16, "uint8": 8, "uint16": 16}


def map_dispatch(ctx: PlanCtx, expr: str, operands: Sequence[Operand], *, output: str | None = None,
                 params: Mapping[str, Any] | None = None, label: str | None = None, body: str = "") -> list[Step]:
    """One dispatch computing `expr` over `operands` (named x0, x1, ...) broadcast to the shape
    and dtype of output 0, written to `output` (default: output 0 itself). Narrow integer
    results are wrapped to their width. `body` holds statements run after the loads (fused
    chains define their intermediate values there)."""
    out_shape, out_dtype = ctx.output_shape(0), ctx.output_dtype(0)
    n = numel(out_shape)
    if isinstance(n, int) and n == 0:
        return []
    names = [f"x{k}" for k in range(len(operands))]
    index_params, index_code = strided_index_params(out_shape, [o.shape for o in operands], names)
    ty = ctx.device_type(out_dtype, "output")
    store = f"{ty}({expr})"
    if out_dtype.name in _WRAP_BITS:
        store = f"onyxia_wrap_{ty[0]}({store}, {_WRAP_BITS[out_dtype.name]}u)"
    defs = {
        "NIN": len(operands),
        "INPUTS": "\n".join(f"@group(0) @binding({k}) var<storage, read> in{k}: array<{o.storage}>;"
                            for k, o in enumerate(operands)),
        "LOADS": "\n    ".join([f"let x{k} = {o.compute}(in{k}[idx_x{k}]);" for k, o in enumerate(operands)]
                                  + ([body] if body else [])),
        "INDEX": index_code, "TY": ty, "STORE": store,
    }
    return [ctx.dispatch("elementwise/map.wgsl", label=label or f"map_{ctx.node.op_type}", defs=defs,
                         params={"N": n, **index_params, **(params or {})},
                         reads=[o.buffer for o in operands], writes=[output or ctx.output(0)],
                         workgroups=ctx.grid(n))]


def plan_map(ctx: PlanCtx, expr: str, inputs: list[int], compute: list[str] | None = None,
             label: str | None = None, params: Mapping[str, Any] | None = None) -> list[Step]:
    """One dispatch computing y = expr(x0, x1, ...) over node inputs `inputs` with broadcasting."""
    compute = compute or [None] * len(inputs)  # type: ignore[list-item]
    return map_dispatch(ctx, expr, [operand(ctx, i, c) for i, c in zip(inputs, compute)], label=label,
                        params=params)
