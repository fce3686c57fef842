"""CumSum / CumProd: prefix scans along one axis (shaders/reduction/cumsum.wgsl), their long lines
in parts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape, numel
from onyxia.operators.base import MAX_TRIPS, WORKGROUP_SIZE, FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.elementwise.elementwise import INT64_OVERFLOW
from onyxia.operators.reduction.reduction import CHECKED, bound_of, lanes_for
from onyxia.plan import ALWAYS, Step, at_least


@dataclass(frozen=True)
class ScanRow:
    """A prefix scan: the WGSL operator combining two values, its identity, numpy's scan."""

    op: str
    identity: int
    fold: Callable[..., np.ndarray]
    since: int


SCAN_OPS = {"CumSum": ScanRow("+", 0, np.cumsum, 11), "CumProd": ScanRow("*", 1, np.cumprod, 26)}


class CumulativeScan(Operator):
    """CumSum / CumProd: inclusive (or exclusive) prefix scans along a constant axis, optionally
    reversed.

    shaders/reduction/cumsum.wgsl: LANES threads per line scan it in chunks of LANES
    elements (Hillis-Steele in shared memory) and carry the running result between chunks.
    """

    def __init__(self, op_type: str, row: ScanRow):
        self.op_type, self.row = op_type, row

    def axis_of(self, ctx: InferenceCtx, rank: int) -> int:
        value = np.asarray(ctx.require_value(1, "axis")).reshape(-1)
        if value.size != 1 or value.dtype == object:
            raise ctx.fail(f"axis must hold one integer, got {value.tolist()}", 1)
        return ctx.axis(int(value[0]), rank)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        if ctx.input_dtype(0).is_bool:
            raise ctx.fail(f"{self.op_type} does not accept bool input", 0)
        shape = ctx.input_shape(0)
        self.axis_of(ctx, len(shape))
        return [(ctx.input_dtype(0), shape)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        x = ctx.input_value(0)
        if x is None or (x.dtype == object and self.row.op != "+"):
            return None
        axis = self.axis_of(ctx, x.ndim)
        reverse, exclusive = bool(ctx.attr("reverse", 0)), bool(ctx.attr("exclusive", 0))
        v = np.flip(x, axis) if reverse else x
        out = self.row.fold(v, axis=axis, dtype=None if x.dtype == object else x.dtype)
        if exclusive:  # shift by one along the axis, the identity first
            moved = np.moveaxis(out, axis, 0)
            first = np.full_like(moved[:1], self.row.identity)
            out = np.moveaxis(np.concatenate([first, moved[:-1]]), 0, axis)
        out = np.flip(out, axis) if reverse else out
        return [np.asarray(out, dtype=object) if x.dtype == object else ctx.cast_output(out)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        shape = ctx.input_shape(0)
        axis = self.axis_of(ctx, len(shape))
        k, inner = shape[axis], numel(shape[axis + 1:])
        lines = numel(shape[:axis]) * inner
        if isinstance(lines, int) and lines == 0:
            return []
        lanes = lanes_for(lines, k, True)
        ctx.compute_type(ctx.input_dtype(0), "input")
        combine = f"a {self.row.op} b"
        checked = ctx.input_dtype(0) == dtypes.INT64  # int64 in i32: report leaving its range
        defs: dict[str, object] = {"LANES": lanes, "RED_INNER": 1, "IDENTITY": self.row.identity,
                                   "COMBINE": CHECKED[combine] if checked else combine,
                                   "REVERSE": bool(ctx.attr("reverse", 0)), "EXCLUSIVE": bool(ctx.attr("exclusive", 0))}
        params: dict[str, object] = {"L": lines, "K": k, "INNER": inner}
        reports = INT64_OVERFLOW if checked else None
        # Each chunk of LANES elements costs a lane 1 + log2(LANES) loop iterations.
        chunk = lanes * (MAX_TRIPS // 4)
        if bound_of(k) <= chunk:
            return [ctx.dispatch("reduction/cumsum.wgsl", defs=defs, params=params,
                                 reads={"src": ctx.input(0)}, writes={"dst": ctx.output(0)},
                                 workgroups=ctx.grid(lines, WORKGROUP_SIZE // lanes), reports=reports)]
        # Parts: their totals, then each part scanned from the totals before it (a symbolic line
        # of one part skips the first pass: a Select).
        parts = (k + chunk - 1) // chunk
        totals = ctx.scratch(lines * parts, ctx.output_dtype(0).name, "part_totals")
        params["PARTS"] = (parts, "u32")
        defs["CHUNK"] = chunk
        totals_pass = ctx.dispatch("reduction/cumsum.wgsl", defs={**defs, "PART_TOTALS": True}, params=params,
                                   reads={"src": ctx.input(0)}, writes={"dst": ctx.output(0), "totals": totals},
                                   workgroups=ctx.grid(lines * parts, WORKGROUP_SIZE // lanes), reports=reports)
        return [*ctx.select("cumsum/parts", [("parts", [totals_pass], at_least(parts, 2), ALWAYS),
                                             ("one part", [], ALWAYS, ALWAYS)]),
                ctx.dispatch("reduction/cumsum.wgsl", defs={**defs, "PART_CARRY": True}, params=params,
                             reads={"src": ctx.input(0), "totals": totals}, writes={"dst": ctx.output(0)},
                             workgroups=ctx.grid(lines * parts, WORKGROUP_SIZE // lanes), reports=reports)]


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(CumulativeScan(name, row), row.since) for name, row in SCAN_OPS.items()]
