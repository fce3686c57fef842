"""Shape operators: shape values and views (layout changes are in indexing/layout.py).

- Shape values: Shape, Size, Constant, ConstantOfShape, Range. Shape and Size always fold, to
  object arrays when dims are symbolic, so shape-computing chains (Shape → Gather → Concat →
  Reshape) become values at compile time and emit no steps.
- Views: Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout (inference). The output shares
  the input's buffer under a new shape: zero steps.
"""

from __future__ import annotations

import math

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, SymDim, numel, shape_str
from onyxia.operators.base import Buf, FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import is_zero
from onyxia.operators.indexing.indexing import fill_code, scalar_param
from onyxia.plan import Step

# Storage buffers one dispatch may bind: WebGPU's default maxStorageBuffersPerShaderStage is 8,
# so Concat/Split bind at most 7 inputs/outputs besides the other side.
MAX_PARTS = 7


def dims_array(dims: list[Dim] | tuple[Dim, ...]) -> np.ndarray:
    """An int64 array, or an object array when some dim is symbolic."""
    if any(isinstance(d, SymDim) for d in dims):
        return np.array(list(dims), dtype=object).reshape(len(dims))
    return np.array([int(d) for d in dims], dtype=np.int64)


def scalar_value(ctx: InferenceCtx, i: int, what: str) -> Dim | float:
    """A constant scalar input (int, float or SymDim)."""
    value = ctx.require_value(i, what)
    if value.size != 1:
        raise ctx.fail(f"{what} must be a scalar, got shape {list(value.shape)}", i)
    return value.reshape(-1)[0] if value.dtype == object else value.reshape(-1)[0].item()


def is_used(ctx: PlanCtx, out: int) -> bool:
    name = ctx.node.outputs[out]
    return bool(name) and (name in ctx.graph.outputs or bool(ctx.graph.consumers(name)))


def plan_fill(ctx: PlanCtx, out: int, start: object, delta: object = None) -> list[Step]:
    """fill.wgsl: output `out` = start (+ i * delta when delta is given)."""
    count = numel(ctx.output_shape(out))
    if is_zero(count):
        return []
    dtype = ctx.output_dtype(out)
    compute = ctx.compute_type(dtype, f"output {out}")
    defs: dict[str, object] = {}
    if delta is not None:
        params = {"N": count, "START": scalar_param(start, compute), "DELTA": scalar_param(delta, compute)}
        defs["RANGE"] = True
    else:  # a constant fill writes the value's storage code
        params = {"N": count, "START": fill_code(ctx, start, dtype)}
    return [ctx.dispatch("indexing/fill.wgsl", label="range" if delta is not None else "fill", defs=defs,
                         params=params, reads={},
                         writes={"y": Buf(ctx.output(out), whole_words=True, raw=delta is None)},
                         workgroups=ctx.unit_grid(count, ctx.output(out)))]


# ---- shape values ---------------------------------------------------------------------------

class ShapeOp(Operator):
    op_type = "Shape"
    folds_from_shapes = True

    def _slice(self, ctx: InferenceCtx) -> tuple[Dim, ...]:
        shape = ctx.input_shape(0)
        start, end = ctx.attr("start", 0), ctx.attr("end", None)
        return tuple(shape[slice(start, end)])  # Python's slice clamps exactly as the spec does

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        return [(dtypes.INT64, (len(self._slice(ctx)),))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        return [dims_array(self._slice(ctx))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        raise AssertionError("Shape always folds")


class Size(Operator):
    op_type = "Size"
    folds_from_shapes = True

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        return [(dtypes.INT64, ())]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        n = numel(ctx.input_shape(0))
        return [np.array(n, dtype=object) if isinstance(n, SymDim) else np.array(n, dtype=np.int64)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        raise AssertionError("Size always folds")


class Constant(Operator):
    """Constant nodes are turned into values by the loader; this covers ones passes create."""

    op_type = "Constant"

    def _value(self, ctx: InferenceCtx) -> np.ndarray:
        for key, dtype in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                           ("value_int", np.int64), ("value_ints", np.int64)):
            if key in ctx.node.attributes:
                return np.asarray(ctx.node.attributes[key], dtype=dtype)
        raise ctx.fail("needs a value attribute (value, value_float(s) or value_int(s))")

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        value = self._value(ctx)
        return [(dtypes.from_numpy(value.dtype), tuple(value.shape))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        return [self._value(ctx)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        raise AssertionError("Constant always folds")


class ConstantOfShape(Operator):
    """Folds for static shapes; a shape over symbols becomes a fill kernel of symbolic size."""

    op_type = "ConstantOfShape"

    def _value(self, ctx: InferenceCtx) -> np.ndarray:
        value = np.asarray(ctx.attr("value", np.zeros(1, np.float32)))
        if value.size != 1:
            raise ctx.fail(f"attribute 'value' must hold one element, got {value.size}")
        return value.reshape(-1)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        dims = ctx.require_dims(0, "the shape")
        if any(isinstance(d, int) and d < 0 for d in dims):
            raise ctx.fail(f"shape {dims} has a negative dim", 0)
        return [(dtypes.from_numpy(self._value(ctx).dtype), tuple(dims))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        dims = ctx.require_dims(0)
        if not all(isinstance(d, int) for d in dims):
            return None
        return [np.full(dims, self._value(ctx)[0])]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        return plan_fill(ctx, 0, self._value(ctx)[0].item())


class Range(Operator):
    """Folds over numbers; Range(0, seq_len, 1) over a symbolic limit is a GPU kernel."""

    op_type = "Range"

    def _values(self, ctx: InferenceCtx) -> tuple[object, object, object]:
        start, limit, delta = (scalar_value(ctx, i, what) for i, what in enumerate(("start", "limit", "delta")))
        return start, limit, delta

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        start, limit, delta = self._values(ctx)
        if not isinstance(delta, SymDim) and delta == 0:
            raise ctx.fail("delta must be non-zero", 2)
        if not any(isinstance(v, SymDim) for v in (start, limit, delta)):
            return [(ctx.input_dtype(0), (max(math.ceil((limit - start) / delta), 0),))]  # type: ignore[operator]
        if isinstance(delta, SymDim):
            delta = ctx.literal(delta, "delta (when start/limit are symbolic)", 2)
        if not isinstance(delta, int):
            raise ctx.fail(f"delta must be a constant integer when start/limit are symbolic, got {delta}", 2)
        # ceil((limit - start) / delta); a symbolic count cannot be clamped at 0, so the model
        # must not produce an empty range in the wrong direction.
        span: Dim = limit - start if delta > 0 else start - limit  # type: ignore[operator]
        n = (span + abs(delta) - 1) // abs(delta)
        return [(ctx.input_dtype(0), (max(n, 0) if isinstance(n, int) else n,))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        start, limit, delta = self._values(ctx)
        if any(isinstance(v, SymDim) for v in (start, limit, delta)):
            return None
        return [np.arange(start, limit, delta).astype(ctx.output_dtype().numpy)]  # as onnx.reference does

    def plan(self, ctx: PlanCtx) -> list[Step]:
        start, _, delta = self._values(ctx)
        return plan_fill(ctx, 0, start, delta)


# ---- views ----------------------------------------------------------------------------------

class ViewOp(Operator):
    """Base for ops whose output is the input's bytes under a new shape."""

    def out_shape(self, ctx: InferenceCtx) -> Shape:
        raise NotImplementedError

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        return [(ctx.input_dtype(0), self.out_shape(ctx))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        value = ctx.input_value(0)
        shape = ctx.graph.tensor(ctx.node.outputs[0]).shape
        if value is None or shape is None or not all(isinstance(d, int) for d in shape):
            return None
        return [value.reshape(shape)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        return ctx.alias_output(0, 0)


class Reshape(ViewOp):
    op_type = "Reshape"

    def out_shape(self, ctx: InferenceCtx) -> Shape:
        in_shape = ctx.input_shape(0)
        if "shape" in ctx.node.attributes:  # Reshape-1 took the shape as an attribute
            target: list[Dim] = list(ctx.attr("shape"))
        else:
            target = ctx.require_dims(1, "the target shape")
        allowzero = ctx.attr("allowzero", 0)
        out: list[Dim] = []
        infer_at = None
        for i, d in enumerate(target):
            if isinstance(d, int) and d == -1:
                if infer_at is not None:
                    raise ctx.fail("the target shape has more than one -1", 1)
                infer_at = i
                out.append(1)
            elif isinstance(d, int) and d == 0 and not allowzero:
                if i >= len(in_shape):
                    raise ctx.fail(f"target dim {i} is 0 (copy) but the input has rank {len(in_shape)}", 1)
                out.append(in_shape[i])
            elif isinstance(d, int) and d < -1:
                raise ctx.fail(f"target dim {i} is {d}", 1)
            else:
                out.append(d)
        total = numel(in_shape)
        if infer_at is not None:
            known = numel(out)
            if is_zero(known):
                raise ctx.fail("cannot infer -1 when other target dims are 0", 1)
            out[infer_at] = total // known
        if not ctx.same_dim(numel(out), total):
            raise ctx.fail(f"cannot reshape {shape_str(in_shape)} ({total} elements) to {shape_str(out)}", 1)
        return tuple(out)


class Flatten(ViewOp):
    op_type = "Flatten"

    def out_shape(self, ctx: InferenceCtx) -> Shape:
        shape = ctx.input_shape(0)
        axis = ctx.attr("axis", 1)
        if not -len(shape) <= axis <= len(shape):
            raise ctx.fail(f"attribute 'axis' {axis} is out of range for rank {len(shape)}")
        axis = axis + len(shape) if axis < 0 else axis
        return (numel(shape[:axis]), numel(shape[axis:]))


def _axes(ctx: InferenceCtx, required: bool) -> list[int] | None:
    """The `axes` of (Un)Squeeze: an attribute before opset 13, an input from 13 on."""
    if "axes" in ctx.node.attributes:
        return [int(a) for a in ctx.attr("axes")]
    if ctx.has_input(1):
        return ctx.require_ints(ctx.require_dims(1, "axes"), "axes", 1)
    if required:
        raise ctx.fail("needs axes (attribute before opset 13, input 1 from 13)")
    return None


class Squeeze(ViewOp):
    op_type = "Squeeze"

    def out_shape(self, ctx: InferenceCtx) -> Shape:
        shape = ctx.input_shape(0)
        axes = _axes(ctx, required=False)
        if axes is None:
            # Only dims known to be 1 go: a symbolic dim might be 1 at runtime, but squeezing
            # it would change the rank with the dims, which a compiled plan cannot do.
            return tuple(d for d in shape if not (isinstance(d, int) and d == 1))
        drop = {ctx.axis(a, len(shape)) for a in axes}
        for a in sorted(drop):
            if not ctx.same_dim(shape[a], 1):
                raise ctx.fail(f"cannot squeeze axis {a} of size {shape[a]}", 0)
        return tuple(d for a, d in enumerate(shape) if a not in drop)


class Unsqueeze(ViewOp):
    op_type = "Unsqueeze"

    def out_shape(self, ctx: InferenceCtx) -> Shape:
        axes = _axes(ctx, required=True)
        assert axes is not None
        shape = list(ctx.input_shape(0))
        rank = len(shape) + len(axes)
        norm = sorted(ctx.axis(a, rank, "axis") for a in axes)
        if len(set(norm)) != len(norm):
            raise ctx.fail(f"axes {axes} repeat an axis")
        for a in norm:
            shape.insert(a, 1)
        return tuple(shape)


class Identity(ViewOp):
    op_type = "Identity"

    def out_shape(self, ctx: InferenceCtx) -> Shape:
        return ctx.input_shape(0)


class Dropout(ViewOp):
    """Inference only: the output is the input; the optional mask is all true."""

    op_type = "Dropout"

    def out_shape(self, ctx: InferenceCtx) -> Shape:
        return ctx.input_shape(0)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        if ctx.has_input(2):
            training = ctx.require_value(2, "training_mode")
            ratio = float(ctx.require_value(1, "ratio").reshape(-1)[0]) if ctx.has_input(1) else 0.5
            if bool(training.reshape(-1)[0]) and ratio != 0:
                raise ctx.fail("training_mode=True with a non-zero ratio (random dropout) is not supported", 2)
        mask = dtypes.BOOL if ctx.opset >= 10 else ctx.input_dtype(0)  # Dropout-7 masks in T
        shape = ctx.input_shape(0)
        return [(ctx.input_dtype(0), shape), (mask, shape)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        value = ctx.input_value(0)
        if value is None:
            return None
        return [value, np.ones(value.shape, ctx.output_dtype(1).numpy)][:len(ctx.node.outputs)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        steps = ctx.alias_output(0, 0)
        if len(ctx.node.outputs) > 1 and is_used(ctx, 1):
            steps += plan_fill(ctx, 1, 1)
        return steps


# ---- layout ---------------------------------------------------------------------------------

def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(ShapeOp(), 1), (Size(), 1), (Constant(), 1), (ConstantOfShape(), 9), (Range(), 11),
            (Reshape(), 1), (Flatten(), 1), (Squeeze(), 1), (Unsqueeze(), 1), (Identity(), 1), (Dropout(), 1)]
