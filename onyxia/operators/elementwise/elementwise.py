"""Elementwise families: one class each, one table row per op.

A row gives the WGSL expression per dtype kind ("float", "int", "uint", "bool", computed in
f32 / i32 / u32 / u32 over `x0`, `x1`, ...) and the numpy function that folds it; attributes
with numeric values reach the expression as params (`ALPHA()`). Adding an elementwise op is
one row. Every family plans through `map_dispatch` (map_kernel.py): one dispatch of the shared
kernel shaders/elementwise/map.wgsl with NumPy broadcasting. Folds numpy gets wrong for ONNX
are in folds.py. The helpers the expressions call (NaN
propagating max, erf, C pow, ...) live in shaders/elementwise/math.wgsl.

Device numerics (storage and compute types: ir/dtypes.py):
- float16 and bfloat16 compute in f32 and are rounded once, when stored;
- int64 computes in i32, ±(2^31 - 1) exactly, -2^31 marking a lost value (codegen/storage.py;
  inputs are range-checked at upload); the ops whose result can leave that range (a row's `int64`
  expression: Add, Sub, Mul, Div, Pow, Neg, Abs) carry a lost operand and lose (and note) an
  out-of-range result instead of wrapping; the comparisons report a lost operand, the run raises a
  ComputeError naming the node, as it does for a lost value reaching an output. Max carries it,
  Min, Where and data movement do as the number -2^31 (Clip and ReduceMax may drop it); uint64
  computes in u32;
- int8/int16/uint8/uint16 compute in 32 bits and are wrapped to their width on store, so
  overflow wraps exactly as numpy and onnxruntime do;
- integer Div/Mod by zero give WGSL's defined results, where ONNX leaves them undefined.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape, numel, shape_str
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.elementwise.folds import div, erf, gelu, isinf, power, shift, symbolic_compare
from onyxia.operators.elementwise.map_kernel import Operand, map_dispatch, operand
from onyxia.operators.functions import expanded
from onyxia.plan import Step

FLOAT, INT, UINT, BOOL = "float", "int", "uint", "bool"
NUMERIC = (FLOAT, INT, UINT)
COMPUTE = {FLOAT: "f32", INT: "i32", UINT: "u32", BOOL: "u32"}  # the WGSL type each kind computes in
INT64_OVERFLOW = "an int64 result is outside ±(2^31 - 1), the range the GPU holds int64 in"
INT64_READ = ("reads an int64 value lost upstream (outside ±(2^31 - 1), the range the GPU holds int64 in: "
              "a Cast of NaN/±inf/|x| >= 2^31 or a result past that range)")
_KIND_NAMES = {FLOAT: "floating-point", INT: "signed integer", UINT: "unsigned integer", BOOL: "bool"}
REQUIRED = object()  # attribute default: the attribute must be given
MAX_MAP_INPUTS = 7  # storage bindings per dispatch: WebGPU guarantees 8, one is the output


def kind(dtype: DType) -> str:
    """The key of a row's expressions that applies to `dtype` (every float type is "float":
    float64 folds on the host, and planning it fails with a clear UnsupportedDtypeError)."""
    if dtype.kind in (BOOL, FLOAT, INT, UINT):
        return dtype.kind
    return dtype.name  # string: no row has it


def widen(value: np.ndarray) -> np.ndarray:
    """Fold the narrow float types in float32, rounding once at the end, as the device computes
    them."""
    if value.dtype != object and value.dtype.kind not in "biuf" or value.dtype == np.float16:
        return value.astype(np.float32)  # bfloat16, float8 (ml_dtypes) and float16
    return value


# ---- table rows ---------------------------------------------------------------------------

Wgsl = Mapping[str, str]


def for_kinds(kinds: Iterable[str], expr: str) -> dict[str, str]:
    """One WGSL expression for every dtype kind in `kinds`."""
    return dict.fromkeys(kinds, expr)


def floats(expr: str) -> dict[str, str]:
    return {FLOAT: expr}


def numeric(expr: str) -> dict[str, str]:
    return for_kinds(NUMERIC, expr)


def integers(expr: str) -> dict[str, str]:
    return for_kinds((INT, UINT), expr)


@dataclass(frozen=True)
class Row:
    """One elementwise op of a family table."""

    wgsl: Wgsl | Callable[..., Wgsl]  # expression per dtype kind; a callable gets the attributes
    fold: Callable[..., Any]  # numpy: fold(*input values, **attributes)
    since: int = 1  # opset version the op appeared in
    attrs: Mapping[str, Any] = field(default_factory=dict)  # ONNX attribute -> default (or REQUIRED)
    result: str = "same"  # output dtype: "same" as input 0, or "bool"
    exponent: bool = False  # input 1 has its own numeric dtype and computes in f32 (Pow's T1)
    int64: str | None = None  # for int64 inputs: the expression carrying/refusing lost values
    symbolic: bool = False  # the fold applies to symbolic dims (shape arithmetic)


class _TableOp(Operator):
    """An op backed by a Row: attribute lookup, dtype-kind checks, attribute params."""

    def __init__(self, op_type: str, row: Row):
        self.op_type, self.row = op_type, row

    def attrs(self, ctx: InferenceCtx) -> dict[str, Any]:
        return {name: ctx.attr(name) if default is REQUIRED else ctx.attr(name, default)
                for name, default in self.row.attrs.items()}

    def expr(self, ctx: InferenceCtx, attrs: Mapping[str, Any], dtype: DType) -> str:
        """The row's WGSL for `dtype`, or an error naming the node, the dtype and the attributes."""
        wgsl = self.row.wgsl
        if callable(wgsl):
            try:
                wgsl = wgsl(**attrs)
            except (KeyError, ValueError, TypeError):
                raise ctx.fail(f"attribute values {attrs} are not supported") from None
        if kind(dtype) not in wgsl:
            given = f" with {attrs}" if attrs else ""
            supported = ", ".join(_KIND_NAMES[k] for k in wgsl) or "nothing"
            raise ctx.fail(f"{self.op_type}{given} does not support dtype {dtype} (supported: {supported})", 0)
        return wgsl[kind(dtype)]

    @staticmethod
    def params(attrs: Mapping[str, Any], expr: str) -> dict[str, Any]:
        """Numeric attributes the expression reads, as params (`alpha` -> `ALPHA()`)."""
        return {k.upper(): v for k, v in attrs.items()
                if isinstance(v, (int, float)) and f"{k.upper()}()" in expr}

    def result(self, dtype: DType) -> DType:
        return dtypes.BOOL if self.row.result == "bool" else dtype

    def checked(self, dtype: DType, expr: str) -> tuple[str, str | None]:
        """(expression, report meaning): the row's int64 form for int64 inputs."""
        if dtype == dtypes.INT64 and self.row.int64:
            return self.row.int64, INT64_READ if self.row.result == "bool" else INT64_OVERFLOW
        return expr, None


class BinaryElementwise(_TableOp):
    """Add, Pow, Equal, BitShift, ...: two inputs with NumPy broadcasting (before opset 7 with
    the legacy `broadcast`/`axis` attributes)."""

    def legacy_pad(self, ctx: InferenceCtx) -> int:
        """Opset < 7's `broadcast=1, axis=k` aligns B's dims with A's from axis k: the number of
        trailing 1s that turn it into NumPy broadcasting (0 without those attributes)."""
        axis = ctx.attr("axis", None)
        if not ctx.attr("broadcast", 0) or axis is None:
            return 0
        rank_a, rank_b = ctx.input_rank(0), ctx.input_rank(1)
        pad = rank_a - ctx.axis(axis, rank_a) - rank_b
        if pad < 0:
            raise ctx.fail(f"legacy broadcast at axis {axis} overruns input 0's rank {rank_a}", 1)
        return pad

    def shapes(self, ctx: InferenceCtx) -> list[Shape]:
        return [ctx.input_shape(0), (*ctx.input_shape(1), *(1,) * self.legacy_pad(ctx))]

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        a, b = ctx.input_dtype(0), ctx.input_dtype(1)
        self.expr(ctx, self.attrs(ctx), a)
        if self.row.exponent:
            if kind(b) not in NUMERIC:
                raise ctx.fail(f"exponent dtype {b} is not numeric", 1)
        elif a != b:
            raise ctx.fail(f"inputs must have the same dtype, got {a} and {b}", 1)
        return [(self.result(a), ctx.broadcast(self.shapes(ctx)))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        attrs, pad = self.attrs(ctx), self.legacy_pad(ctx)
        with np.errstate(all="ignore"):
            return ctx.binary_fold(
                lambda a, b: self.row.fold(widen(a), widen(b).reshape(b.shape + (1,) * pad), **attrs))

    def plan(self, ctx: PlanCtx) -> list[Step]:
        attrs, shapes = self.attrs(ctx), self.shapes(ctx)
        expr, reports = self.checked(ctx.input_dtype(0), self.expr(ctx, attrs, ctx.input_dtype(0)))
        compute = COMPUTE[kind(ctx.input_dtype(0))]
        operands = [operand(ctx, 0, compute, shapes[0]),
                    operand(ctx, 1, "f32" if self.row.exponent else compute, shapes[1])]
        return map_dispatch(ctx, expr, operands, params=self.params(attrs, expr), reports=reports)


class UnaryElementwise(_TableOp):
    """Relu, Erf, IsNaN, LeakyRelu, ...: one input, same shape out."""

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        dtype = ctx.input_dtype(0)
        self.expr(ctx, self.attrs(ctx), dtype)
        return [(self.result(dtype), ctx.input_shape(0))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        attrs = self.attrs(ctx)
        with np.errstate(all="ignore"):
            return ctx.unary_fold(lambda x: self.row.fold(widen(x), **attrs), symbolic=self.row.symbolic)

    def plan(self, ctx: PlanCtx) -> list[Step]:
        attrs, dtype = self.attrs(ctx), ctx.input_dtype(0)
        expr, reports = self.checked(dtype, self.expr(ctx, attrs, dtype))
        return map_dispatch(ctx, expr, [operand(ctx, 0, COMPUTE[kind(dtype)])], params=self.params(attrs, expr),
                            reports=reports)


@dataclass(frozen=True)
class VariadicRow(Row):
    """`wgsl` combines two values "{a}" and "{b}"; `fold` is the binary numpy function."""

    mean: bool = False  # divide by the number of inputs at the end


class VariadicElementwise(_TableOp):
    """Max, Min, Sum, Mean: 1..N inputs of one dtype broadcast together (opset < 8 required
    equal shapes, a special case). One dispatch per MAX_MAP_INPUTS inputs; more chain partial
    results through scratch buffers."""

    row: VariadicRow

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        if ctx.num_inputs == 0:
            raise ctx.fail("needs at least one input")
        dtype = ctx.input_dtype(0)
        self.expr(ctx, {}, dtype)
        for i in range(1, ctx.num_inputs):
            if ctx.input_dtype(i) != dtype:
                raise ctx.fail(f"inputs must have the same dtype, got {dtype} and {ctx.input_dtype(i)}", i)
        return [(dtype, ctx.broadcast([ctx.input_shape(i) for i in range(ctx.num_inputs)]))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        values = ctx.values()
        if any(v is None for v in values):
            return None
        try:
            with np.errstate(all="ignore"):
                out = functools.reduce(self.row.fold, map(widen, values))
                if self.row.mean:
                    out = out / len(values)
        except TypeError:  # symbolic dims whose order depends on their values
            return None
        if any(v.dtype == object for v in values):
            return [np.asarray(out, dtype=object)]
        return [ctx.cast_output(out)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        out_shape, out_dtype = ctx.output_shape(0), ctx.output_dtype(0)
        combine, reports = self.checked(out_dtype, self.expr(ctx, {}, out_dtype))
        compute = COMPUTE[kind(out_dtype)]
        pending = [operand(ctx, i, compute) for i in range(ctx.num_inputs)]
        steps: list[Step] = []
        acc: Operand | None = None
        while pending:
            chunk = ([acc] if acc else []) + pending[:MAX_MAP_INPUTS - (acc is not None)]
            pending = pending[len(chunk) - (acc is not None):]
            expr = functools.reduce(lambda e, k: combine.format(a=e, b=f"x{k}"), range(1, len(chunk)), "x0")
            if pending:
                target = ctx.scratch(numel(out_shape), out_dtype.name, "partial")
                steps += map_dispatch(ctx, expr, chunk, output=target, reports=reports)
                acc = Operand(target, out_shape, compute)
            else:
                if self.row.mean:
                    expr = f"({expr}) / {float(ctx.num_inputs)}"
                steps += map_dispatch(ctx, expr, chunk, reports=reports)
        return steps


class Where(Operator):
    """Where(condition, X, Y): X where condition else Y, all three broadcast together."""

    op_type = "Where"

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        if not ctx.input_dtype(0).is_bool:
            raise ctx.fail(f"condition must be bool, got {ctx.input_dtype(0)}", 0)
        if ctx.input_dtype(1) != ctx.input_dtype(2):
            raise ctx.fail(f"X and Y must have the same dtype, got {ctx.input_dtype(1)} and {ctx.input_dtype(2)}", 2)
        return [(ctx.input_dtype(1), ctx.broadcast([ctx.input_shape(i) for i in range(3)]))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        cond, x, y = ctx.values()
        if cond is None or x is None or y is None or cond.dtype == object:
            return None
        out = np.where(cond, x, y)  # object arrays (shape values) pass through
        return [out if out.dtype == object else ctx.cast_output(out)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        compute = COMPUTE[kind(ctx.input_dtype(1))]
        return map_dispatch(ctx, "select(x2, x1, x0 != 0u)",
                            [operand(ctx, 0, "u32"), operand(ctx, 1, compute), operand(ctx, 2, compute)])


_F32_MAX = float(np.finfo(np.float32).max)


class Clip(Operator):
    """Clip(x, min, max) = min(max(x, min), max) (so min > max gives max), NaN propagating.

    Opset < 11 takes min/max as float attributes (defaults -+FLT_MAX, so +-inf clamp to them),
    later as optional scalar inputs: constant ones become kernel params, runtime tensors extra
    kernel inputs, absent ones no bound.
    """

    op_type = "Clip"

    def bounds(self, ctx: InferenceCtx) -> dict[str, tuple[str, Any] | None]:
        """{"min"|"max": ("value", v) | ("input", i) | None}."""
        if ctx.opset < 11:
            return {"min": ("value", ctx.attr("min", -_F32_MAX)), "max": ("value", ctx.attr("max", _F32_MAX))}
        out: dict[str, tuple[str, Any] | None] = {}
        for i, name in ((1, "min"), (2, "max")):
            value = ctx.input_value(i)
            out[name] = (None if not ctx.has_input(i) else ("input", i) if value is None or value.dtype == object
                         else ("value", np.asarray(value).reshape(-1)[0]))
        return out

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        dtype = ctx.input_dtype(0)
        if kind(dtype) not in NUMERIC:
            raise ctx.fail(f"Clip does not support dtype {dtype}", 0)
        for i in (1, 2):
            if ctx.opset >= 11 and ctx.has_input(i):
                if ctx.input_dtype(i) != dtype:
                    raise ctx.fail(f"bound dtype {ctx.input_dtype(i)} differs from input dtype {dtype}", i)
                if not ctx.same_dim(numel(ctx.input_shape(i)), 1):
                    raise ctx.fail(f"bound must be a scalar, got shape {shape_str(ctx.input_shape(i))}", i)
        return [(dtype, ctx.input_shape(0))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        x, bounds = ctx.input_value(0), self.bounds(ctx)
        if x is None or x.dtype == object or any(b and b[0] == "input" for b in bounds.values()):
            return None
        lo, hi = (b[1] if b else None for b in (bounds["min"], bounds["max"]))
        x = widen(x)
        with np.errstate(all="ignore"):
            out = x if lo is None else np.maximum(x, np.asarray(lo).astype(x.dtype))
            out = out if hi is None else np.minimum(out, np.asarray(hi).astype(x.dtype))
        return [ctx.cast_output(out)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        k = kind(ctx.input_dtype(0))
        compute = COMPUTE[k]
        fns = {"min": "onyxia_maxf", "max": "onyxia_minf"} if k == FLOAT else {"min": "max", "max": "min"}
        operands, params, expr = [operand(ctx, 0, compute)], {}, "x0"
        for name, bound in self.bounds(ctx).items():
            if bound is None:
                continue
            if bound[0] == "input":
                operands.append(operand(ctx, bound[1], compute, shape=()))
                ref = f"x{len(operands) - 1}"
            else:
                ref = f"CLIP_{name.upper()}()"
                params[ref[:-2]] = _scalar_param(bound[1], k)
            expr = f"{fns[name]}({expr}, {ref})"
        return map_dispatch(ctx, expr, operands, params=params)


def _scalar_param(value: Any, k: str) -> tuple[float | int, str]:
    """A bound as a param of the kernel's compute type; int64 bounds saturate to the i32 range."""
    if k == FLOAT:
        return float(value), "f32"
    if k == INT:
        return int(np.clip(int(value), -(2**31), 2**31 - 1)), "i32"
    return int(np.clip(int(value), 0, 2**32 - 1)), "u32"


# ---- tables -------------------------------------------------------------------------------

# fmod=0: the divisor's sign (floats since opset 28); fmod=1: C fmod (integers since opset 28)
_MOD = {0: {FLOAT: "onyxia_modf(x0, x1)", INT: "onyxia_modi(x0, x1)", UINT: "x0 % x1"},
        1: {FLOAT: "onyxia_fmodf(x0, x1)", **integers("x0 % x1")}}
# WGSL masks shift counts to 5 bits; ONNX shifts everything out (signed types since opset 28:
# arithmetic right shift; a negative count also shifts everything out). Narrow types finish
# shifting out when the result is wrapped to their width.
_SHIFT = {"LEFT": {UINT: "select(0u, x0 << x1, x1 < 32u)",
                   INT: "select(0i, x0 << u32(x1), x1 >= 0i && x1 < 32i)"},
          "RIGHT": {UINT: "select(0u, x0 >> x1, x1 < 32u)",
                    INT: "select(select(0i, -1i, x0 < 0i), x0 >> u32(x1), x1 >= 0i && x1 < 32i)"}}
_GELU = {"none": "0.5 * x0 * (1.0 + onyxia_erf(x0 * 0.7071067811865476))",
         "tanh": "0.5 * x0 * (1.0 + onyxia_tanh(0.7978845608028654 * (x0 + 0.044715 * x0 * x0 * x0)))"}

BINARY_OPS: dict[str, Row] = {
    "Add": Row(numeric("x0 + x1"), np.add, int64="onyxia_checked_add(x0, x1)"),
    "Sub": Row(numeric("x0 - x1"), np.subtract, int64="onyxia_checked_sub(x0, x1)"),
    "Mul": Row(numeric("x0 * x1"), np.multiply, int64="onyxia_checked_mul(x0, x1)"),
    "Div": Row(numeric("x0 / x1"), div, int64="onyxia_checked_div(x0, x1)"),
    "Pow": Row({FLOAT: "onyxia_powf(x0, x1)", INT: "onyxia_powi(x0, x1)"}, power, exponent=True,
               int64="onyxia_checked_powi(x0, x1)"),
    # slope broadcasts to X (unidirectionally: the output keeps X's shape in valid models)
    "PRelu": Row({FLOAT: "select(x0, x1 * x0, x0 < 0.0)", INT: "select(x0, x1 * x0, x0 < 0i)", UINT: "x0"},
                 lambda x, slope: np.where(x < 0, x * slope, x)),
    "Mod": Row(lambda fmod: _MOD[fmod], lambda a, b, fmod: np.fmod(a, b) if fmod else np.mod(a, b),
               since=10, attrs={"fmod": 0}),
    "BitShift": Row(lambda direction: _SHIFT[direction], shift, since=11, attrs={"direction": REQUIRED}),
    "And": Row({BOOL: "x0 & x1"}, np.logical_and),
    "Or": Row({BOOL: "x0 | x1"}, np.logical_or),
    "Xor": Row({BOOL: "x0 ^ x1"}, np.logical_xor),
    "BitwiseAnd": Row(integers("x0 & x1"), np.bitwise_and, since=18),
    "BitwiseOr": Row(integers("x0 | x1"), np.bitwise_or, since=18),
    "BitwiseXor": Row(integers("x0 ^ x1"), np.bitwise_xor, since=18),
}

# int64 comparisons refuse a lost operand (its order is unknown): onyxia_known reports.
_KNOWN = "onyxia_known(x0) {op} onyxia_known(x1)"
COMPARISON_OPS: dict[str, Row] = {
    "Equal": Row(for_kinds((*NUMERIC, BOOL), "x0 == x1"), symbolic_compare(np.equal, lambda o: o == 0),
                 result="bool", int64=_KNOWN.format(op="==")),
    "Greater": Row(numeric("x0 > x1"), symbolic_compare(np.greater, lambda o: o > 0), result="bool",
                   int64=_KNOWN.format(op=">")),
    "GreaterOrEqual": Row(numeric("x0 >= x1"), symbolic_compare(np.greater_equal, lambda o: o >= 0), since=12,
                          result="bool", int64=_KNOWN.format(op=">=")),
    "Less": Row(numeric("x0 < x1"), symbolic_compare(np.less, lambda o: o < 0), result="bool",
                int64=_KNOWN.format(op="<")),
    "LessOrEqual": Row(numeric("x0 <= x1"), symbolic_compare(np.less_equal, lambda o: o <= 0), since=12,
                       result="bool", int64=_KNOWN.format(op="<=")),
}

UNARY_OPS: dict[str, Row] = {
    "Abs": Row({FLOAT: "abs(x0)", INT: "abs(x0)", UINT: "x0"}, np.abs, int64="onyxia_checked_abs(x0)"),
    "Neg": Row({FLOAT: "-x0", INT: "-x0"}, np.negative, int64="onyxia_checked_neg(x0)", symbolic=True),
    "Sign": Row({FLOAT: "onyxia_signf(x0)", INT: "sign(x0)", UINT: "select(0u, 1u, x0 > 0u)"}, np.sign, since=9),
    "Relu": Row({FLOAT: "select(x0, 0.0, x0 < 0.0)", INT: "max(x0, 0i)"}, lambda x: np.maximum(x, 0)),
    "Not": Row({BOOL: "x0 ^ 1u"}, np.logical_not),
    "BitwiseNot": Row(integers("~x0"), np.invert, since=18),
    "Sqrt": Row(floats("sqrt(x0)"), np.sqrt),
    "Reciprocal": Row(floats("1.0 / x0"), np.reciprocal),
    "Exp": Row(floats("exp(x0)"), np.exp),
    "Log": Row(floats("onyxia_log(x0)"), np.log),
    "Floor": Row(floats("floor(x0)"), np.floor),
    "Ceil": Row(floats("ceil(x0)"), np.ceil),
    "Round": Row(floats("round(x0)"), np.round, since=11),  # both round half to even
    "Sin": Row(floats("sin(x0)"), np.sin, since=7),
    "Cos": Row(floats("cos(x0)"), np.cos, since=7),
    "Tan": Row(floats("tan(x0)"), np.tan, since=7),
    "Asin": Row(floats("onyxia_asin(x0)"), np.arcsin, since=7),
    "Acos": Row(floats("onyxia_acos(x0)"), np.arccos, since=7),
    "Atan": Row(floats("onyxia_atan(x0)"), np.arctan, since=7),
    "Sinh": Row(floats("onyxia_sinh(x0)"), np.sinh, since=9),
    "Cosh": Row(floats("cosh(x0)"), np.cosh, since=9),
    "Asinh": Row(floats("onyxia_asinh(x0)"), np.arcsinh, since=9),
    "Acosh": Row(floats("onyxia_acosh(x0)"), np.arccosh, since=9),
    "Atanh": Row(floats("onyxia_atanh(x0)"), np.arctanh, since=9),
    "Tanh": Row(floats("onyxia_tanh(x0)"), np.tanh),
    "Sigmoid": Row(floats("onyxia_sigmoid(x0)"), lambda x: 1 / (1 + np.exp(-x))),
    "Erf": Row(floats("onyxia_erf(x0)"), erf, since=9),
    "Softplus": Row(floats("onyxia_softplus(x0)"), lambda x: np.logaddexp(0, x)),
    "Softsign": Row(floats("x0 / (1.0 + abs(x0))"), lambda x: x / (1 + np.abs(x))),
    "Mish": Row(floats("x0 * onyxia_tanh(onyxia_softplus(x0))"), lambda x: x * np.tanh(np.logaddexp(0, x)), since=18),
    "HardSwish": Row(floats("x0 * onyxia_minf(onyxia_maxf(x0 / 6.0 + 0.5, 0.0), 1.0)"),
                     lambda x: x * np.clip(x / 6 + 0.5, 0, 1), since=14),
    "Swish": Row(floats("x0 * onyxia_sigmoid(ALPHA() * x0)"), lambda x, alpha: x / (1 + np.exp(-alpha * x)), since=24,
                 attrs={"alpha": 1.0}),
    "HardSigmoid": Row(floats("onyxia_minf(onyxia_maxf(ALPHA() * x0 + BETA(), 0.0), 1.0)"),
                       lambda x, alpha, beta: np.clip(alpha * x + beta, 0, 1), attrs={"alpha": 0.2, "beta": 0.5}),
    "LeakyRelu": Row(floats("select(x0, ALPHA() * x0, x0 < 0.0)"), lambda x, alpha: np.where(x < 0, alpha * x, x),
                     attrs={"alpha": 0.01}),
    "Elu": Row(floats("select(x0, ALPHA() * (exp(x0) - 1.0), x0 < 0.0)"),
               lambda x, alpha: np.where(x < 0, alpha * np.expm1(x), x), attrs={"alpha": 1.0}),
    "Selu": Row(floats("GAMMA() * select(x0, ALPHA() * (exp(x0) - 1.0), x0 <= 0.0)"),
                lambda x, alpha, gamma: gamma * np.where(x <= 0, alpha * np.expm1(x), x),
                attrs={"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}),
    "Celu": Row(floats("select(x0, ALPHA() * (exp(x0 / ALPHA()) - 1.0), x0 < 0.0)"),
                lambda x, alpha: np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha)), since=12,
                attrs={"alpha": 1.0}),
    "ThresholdedRelu": Row(floats("select(0.0, x0, x0 > ALPHA())"), lambda x, alpha: np.where(x > alpha, x, 0),
                           since=10, attrs={"alpha": 1.0}),
    "Shrink": Row(floats("select(select(0.0, x0 + BIAS(), x0 < -LAMBD()), x0 - BIAS(), x0 > LAMBD())"),
                  lambda x, bias, lambd: np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0)), since=9,
                  attrs={"bias": 0.0, "lambd": 0.5}),
    "Gelu": Row(lambda approximate: floats(_GELU[approximate]), gelu, since=20, attrs={"approximate": "none"}),
    "IsNaN": Row(floats("onyxia_isnan(x0)"), np.isnan, since=9, result="bool"),
    "IsInf": Row(floats("(x0 == onyxia_inf() && DETECT_POSITIVE() != 0u) || "
                     "(x0 == -onyxia_inf() && DETECT_NEGATIVE() != 0u)"), isinf, since=10,
                 attrs={"detect_negative": 1, "detect_positive": 1}, result="bool"),
}

_maximum = symbolic_compare(np.maximum, lambda o: o >= 0, choose=True)
_minimum = symbolic_compare(np.minimum, lambda o: o <= 0, choose=True)

VARIADIC_OPS: dict[str, VariadicRow] = {
    "Max": VariadicRow({FLOAT: "onyxia_maxf({a}, {b})", **integers("max({a}, {b})")}, _maximum,
                       int64="onyxia_checked_max({a}, {b})"),  # a lost int64 stays lost
    "Min": VariadicRow({FLOAT: "onyxia_minf({a}, {b})", **integers("min({a}, {b})")}, _minimum),
    "Sum": VariadicRow(floats("{a} + {b}"), np.add),
    "Mean": VariadicRow(floats("{a} + {b}"), np.add, mean=True),
}


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) for every row of the tables and the non-table ops."""
    ops: list[tuple[Operator, int]] = []
    ops += [(BinaryElementwise(name, row), row.since) for name, row in {**BINARY_OPS, **COMPARISON_OPS}.items()]
    ops += [(UnaryElementwise(name, row), row.since) for name, row in UNARY_OPS.items()]
    ops += [(VariadicElementwise(name, row), 1) for name, row in VARIADIC_OPS.items()]
    return ops + [(Where(), 9), (Clip(), 1), expanded("SwiGLU")]  # SwiGLU: its ONNX function body
