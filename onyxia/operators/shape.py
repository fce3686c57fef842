"""Shape and view operators: Shape, Reshape, Unsqueeze, Constant.

Views (Reshape, Unsqueeze) never move data: the output shares the input's buffer.
Shape always folds, to an object array when dims are symbolic, so shape-computing chains
(Shape → Gather → Concat → Reshape) become values at compile time and emit no steps.
"""

from __future__ import annotations

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, SymDim, numel
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.plan import Step


def dims_array(dims: list[Dim] | tuple[Dim, ...]) -> np.ndarray:
    """An int64 array, or an object array when some dim is symbolic."""
    if any(isinstance(d, SymDim) for d in dims):
        return np.array(list(dims) or [], dtype=object).reshape(len(dims))
    return np.array([int(d) for d in dims], dtype=np.int64)


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
            if isinstance(known, int) and known == 0:
                raise ctx.fail("cannot infer -1 when other target dims are 0", 1)
            out[infer_at] = total // known
        if isinstance(total, int) and all(isinstance(d, int) for d in out) and numel(out) != total:
            raise ctx.fail(f"cannot reshape {list(in_shape)} ({total} elements) to {out}", 1)
        return tuple(out)


class Unsqueeze(ViewOp):
    op_type = "Unsqueeze"

    def out_shape(self, ctx: InferenceCtx) -> Shape:
        axes = ctx.attr("axes", None)
        if axes is None:
            axes = [int(a) for a in ctx.require_value(1, "axes").reshape(-1)]
        shape = list(ctx.input_shape(0))
        rank = len(shape) + len(axes)
        norm = sorted(ctx.axis(a, rank, "axis") for a in axes)
        if len(set(norm)) != len(norm):
            raise ctx.fail(f"axes {axes} repeat an axis")
        for a in norm:
            shape.insert(a, 1)
        return tuple(shape)


class ShapeOp(Operator):
    op_type = "Shape"
    folds_from_shapes = True

    def _slice(self, ctx: InferenceCtx) -> tuple[Dim, ...]:
        shape = ctx.input_shape(0)
        start, end = ctx.attr("start", 0), ctx.attr("end", None)
        return tuple(shape[slice(start, end)])

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        return [(dtypes.INT64, (len(self._slice(ctx)),))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        return [dims_array(self._slice(ctx))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        raise AssertionError("Shape always folds")


class Constant(Operator):
    """Constant nodes are turned into values by the loader; this covers ones passes create."""

    op_type = "Constant"

    def _value(self, ctx: InferenceCtx) -> np.ndarray:
        for key, dtype in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                           ("value_int", np.int64), ("value_ints", np.int64)):
            if key in ctx.node.attributes:
                return np.asarray(ctx.node.attributes[key], dtype=dtype)
        raise ctx.fail("needs a value attribute")

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        value = self._value(ctx)
        return [(dtypes.from_numpy(value.dtype), tuple(value.shape))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        return [self._value(ctx)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        raise AssertionError("Constant always folds")


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(ShapeOp(), 1), (Reshape(), 1), (Unsqueeze(), 1), (Constant(), 1)]
