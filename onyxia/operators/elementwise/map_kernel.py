"""The shared elementwise kernel: one dispatch of shaders/elementwise/map.wgsl computing a WGSL
expression over broadcast operands. The elementwise families, Cast and the fused chains of
ElementwiseFusionPass all plan through `map_dispatch`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from onyxia.ir.shapes import Dim, Shape, numel
from onyxia.operators.base import Buf, PlanCtx
from onyxia.operators.common import broadcast_strides, collapse_dims, strided_index_params
from onyxia.plan import ALWAYS, Step, at_most

WORD_STORAGE = ("f32", "i32", "u32")  # one element per 32-bit word: vec4 loads and stores apply


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
                 index: tuple[dict, str] | None = None, shape: Shape | None = None) -> list[Step]:
    """One dispatch computing `expr` over `operands` (named x0, x1, ...) broadcast to the shape
    of output 0, written to `output` (default: output 0 itself) in its dtype: the value is
    rounded or wrapped once, when stored. `body` holds statements run after the loads (fused
    chains define their intermediate values there). With `raw_output` the expression gives the
    output's storage code (a u32) itself. `reports`: the expression may call onyxia_report()
    (the checked int64 arithmetic), meaning this. `index`: (params, code) defining idx_x0, ...
    from the flat output index i, instead of NumPy broadcasting. `shape`: the shape of
    `output` where that is not output 0 (a scratch)."""
    out_shape = ctx.output_shape(0) if shape is None else shape
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
    label = label or f"map_{ctx.node.op_type}"
    params = {"N": n, **index_params, **(params or {})}
    scalar = [ctx.dispatch("elementwise/map.wgsl", label=label, defs=defs, params=params,
                           reads={f"in{k}": o.buffer for k, o in enumerate(operands)},
                           writes={"y": Buf(out, whole_words=True, raw=raw_output)},
                           workgroups=ctx.unit_grid(n, out), reports=reports)]
    modes = None if index or raw_output else _quad_modes(ctx, out, out_shape, operands)
    if modes is None:
        return scalar
    inner, modes = modes
    quad = _quad_dispatch(ctx, label, expr, body, operands, modes, out, n, index_code, params, reports)
    if isinstance(inner, int):
        return quad
    return ctx.select(f"map4:{ctx.node.name}", [("quad", quad, at_most(inner % 4, 0), ALWAYS),
                                                ("scalar", scalar, ALWAYS, ALWAYS)], interchangeable=True)


def _quad_modes(ctx: PlanCtx, out: str, out_shape: Shape, operands: Sequence[Operand]) -> tuple[Dim, list[str]] | None:
    """Whether map4.wgsl applies, and how it reads each operand ("vec4": contiguous along the
    innermost broadcast axis, one aligned vec4; "splat": constant along it, one scalar; "lanes":
    contiguous but not a word type, four scalars), with that axis' length (a multiple of 4
    where static; a Select's guard checks a symbolic one). None: it does not apply (the output
    is not a 32-bit type, or an operand steps along that axis other than by 1 or 0)."""
    if ctx.tensor_dtype(out).storage not in WORD_STORAGE or not operands:
        return None
    strides = [broadcast_strides(o.shape, out_shape) for o in operands]
    dims, merged = collapse_dims(out_shape, strides)
    if not dims or (isinstance(dims[-1], int) and dims[-1] % 4):
        return None
    modes = []
    for o, m in zip(operands, merged):
        step = m[-1]
        if isinstance(step, int) and step == 0:
            modes.append("splat")
        elif isinstance(step, int) and step == 1:
            modes.append("vec4" if ctx.tensor_dtype(o.buffer).storage in WORD_STORAGE else "lanes")
        else:
            return None
    return dims[-1], modes


def _quad_dispatch(ctx: PlanCtx, label: str, expr: str, body: str, operands: Sequence[Operand], modes: list[str],
                   out: str, n: Dim, index_code: str, params: Mapping[str, Any],
                   reports: str | None = None) -> list[Step]:
    loads, lanes = [], []
    for k, (o, mode) in enumerate(zip(operands, modes)):
        if mode == "vec4":  # idx_xk is a multiple of 4: the axis and every outer stride are
            loads.append(f"let q{k} = in{k}_load4(idx_x{k} / 4u);")
        elif mode == "splat":
            loads.append(f"let s{k} = {o.compute}(in{k}_load(idx_x{k}));")
    for lane in range(4):
        lets = [f"let x{k} = " + (f"{o.compute}(q{k}[{lane}]);" if mode == "vec4" else f"s{k};" if mode == "splat"
                                  else f"{o.compute}(in{k}_load(idx_x{k} + {lane}u));")
                for k, (o, mode) in enumerate(zip(operands, modes))]
        statements = [f"let i = 4u * u + {lane}u;", *lets, *([body] if body else []), f"out[{lane}] = y_t({expr});"]
        lanes.append("{ " + " ".join(statements) + " }")
    defs = {"INDEX": index_code, "VLOADS": "\n    ".join(loads), "LANES": "\n    ".join(lanes)}
    if reports:  # int64's checked helpers (codegen/storage.py), as map.wgsl takes them
        defs["ONYXIA_CHECKED"] = True
    return [ctx.dispatch("elementwise/map4.wgsl", label=label, defs=defs, params=params,
                         reads={f"in{k}": Buf(o.buffer, vector=mode == "vec4")
                                for k, (o, mode) in enumerate(zip(operands, modes))},
                         writes={"y": Buf(out, vector=True)}, workgroups=ctx.grid((n + 3) // 4), reports=reports)]


def plan_map(ctx: PlanCtx, expr: str, inputs: list[int], compute: list[str] | None = None,
             label: str | None = None, params: Mapping[str, Any] | None = None,
             raw_output: bool = False, reports: str | None = None) -> list[Step]:
    """One dispatch computing y = expr(x0, x1, ...) over node inputs `inputs` with broadcasting."""
    compute = compute or [None] * len(inputs)  # type: ignore[list-item]
    return map_dispatch(ctx, expr, [operand(ctx, i, c) for i, c in zip(inputs, compute)], label=label,
                        params=params, raw_output=raw_output, reports=reports)
