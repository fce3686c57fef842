"""Unique and NonMaxSuppression: data-dependent output sizes (see operators/selection/datadep.py).

Both are planned for their upper bound (every item distinct; every box kept), compute the count
on the device and read back only that count (ReadSymbol), which sizes the outputs and everything
after them. Both kernels loop over all items in every invocation, so the sizes they take are
bounded (lavapipe stops an invocation after ~65,535 loop iterations): Unique up to
MAX_UNIQUE_STEPS compared elements. NonMaxSuppression ranks and suppresses up to MAX_NMS_BOXES
boxes per class in one workgroup; past that (SSD, RetinaNet and Faster R-CNN concatenate thousands
of candidates) it ranks every box in its own thread, computes the suppression bit matrix of the
ranked candidates in parallel and scans it in bounded chunks, up to MAX_NMS_LARGE_BOXES boxes.
"""

from __future__ import annotations

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, numel
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import is_zero
from onyxia.plan import ReadSymbol, Step

MAX_UNIQUE_STEPS = 32768  # items * elements per item
MAX_NMS_BOXES = 1024  # per thread: (boxes / 256) * boxes ranking steps + boxes * (boxes / 256 + ~10)
# The large path (nms_rank / nms_mask / nms_scan): a rank is a loop over every box, a scan dispatch
# visits NMS_CHUNK ranks of (1 + words / 256) steps each; its removed bits fill workgroup memory.
MAX_NMS_LARGE_BOXES = 32768
NMS_CHUNK = 4096


def _static_value(ctx: InferenceCtx, d: Dim) -> int | None:
    return d if isinstance(d, int) else ctx.env.value(d)


class Unique(Operator):
    """Y (distinct items, sorted or in order of first occurrence), indices (first occurrences),
    inverse_indices and counts, as np.unique / onnxruntime."""

    op_type = "Unique"

    def _layout(self, ctx: InferenceCtx) -> tuple[Shape, int | None, Dim, Dim, Dim]:
        """(shape, axis, items, outer, inner) with each item x[o, item, e]."""
        shape = ctx.input_shape(0)
        raw = ctx.attr("axis", None)
        if raw is None:
            return shape, None, numel(shape), 1, 1
        axis = ctx.axis(int(raw), len(shape))
        return shape, axis, shape[axis], numel(shape[:axis]), numel(shape[axis + 1:])

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        shape, axis, items, _, _ = self._layout(ctx)
        if ctx.input_value(0) is not None and ctx.input_value(0).dtype != object:
            u: Dim = len(self._fold(ctx, ctx.input_value(0))[0]) if axis is None else \
                self._fold(ctx, ctx.input_value(0))[0].shape[axis]
        elif is_zero(items):
            u = 0
        else:
            u = ctx.env.data_symbol(f"{ctx.node.name}_count", items)
        y = (u,) if axis is None else (*shape[:axis], u, *shape[axis + 1:])
        return [(ctx.input_dtype(0), y), (dtypes.INT64, (u,)), (dtypes.INT64, (items,)), (dtypes.INT64, (u,))]

    def _fold(self, ctx: InferenceCtx, x: np.ndarray) -> list[np.ndarray]:
        axis = ctx.attr("axis", None)
        sorted_ = bool(ctx.attr("sorted", 1))
        y, idx, inv, cnt = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                     axis=None if axis is None else int(axis))
        if not sorted_:  # first-occurrence order
            order = np.argsort(idx, kind="stable")
            y = np.take(y, order, axis=0 if axis is None else int(axis))
            remap = np.empty_like(order)
            remap[order] = np.arange(len(order))
            idx, cnt, inv = idx[order], cnt[order], remap[inv.reshape(-1)]
        return [y, idx.astype(np.int64), inv.reshape(-1).astype(np.int64), cnt.astype(np.int64)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        y, idx, inv, cnt = self._fold(ctx, vals[0])
        return [ctx.cast_output(y, 0), idx, inv, cnt]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        shape, axis, items, outer, inner = self._layout(ctx)
        if is_zero(items):
            return []
        steps_each = _static_value(ctx, numel(shape))  # items * elements per item
        if steps_each is not None and steps_each > MAX_UNIQUE_STEPS:
            raise ctx.fail(f"Unique compares {items} items of {outer * inner} elements in each thread; onyxia "
                           f"takes up to {MAX_UNIQUE_STEPS} (items * elements per item)")
        ctx.compute_type(ctx.input_dtype(0), "input")
        u = ctx.output_shape(1)[0]
        params = {"D": items, "S": outer * inner, "INNER": inner}
        first, cnt, rank = (ctx.scratch(items, "int32", h) for h in ("first", "counts", "rank"))
        count = ctx.scratch(1, "int32", "count")
        y, indices, inverse, counts = (ctx.output(i) for i in range(4))
        grid = ctx.grid(items)
        return [
            ctx.dispatch("selection/unique.wgsl", label="unique_first", params=params, workgroups=grid,
                         defs={"FIRST": True}, reads={"x": ctx.input(0)}, writes={"first": first, "cnt": cnt}),
            ctx.dispatch("selection/unique.wgsl", label="unique_rank", params=params, workgroups=grid,
                         defs={"RANK": True, "SORTED": bool(ctx.attr("sorted", 1))},
                         reads={"x": ctx.input(0), "first": first, "cnt": cnt},
                         writes={"rank": rank, "y": y, "indices": indices, "counts": counts, "count": count}),
            ReadSymbol(count, str(u), items),
            ctx.dispatch("selection/unique.wgsl", label="unique_inverse", params=params, workgroups=grid,
                         defs={"INVERSE": True}, reads={"first": first, "rank": rank}, writes={"inverse": inverse}),
        ]


class NonMaxSuppression(Operator):
    """Selected boxes [count, 3] (batch, class, box), per (batch, class) best score first.

    Not folded: constant boxes and scores are rare, and the GPU kernel handles them."""

    op_type = "NonMaxSuppression"

    def _layout(self, ctx: InferenceCtx) -> tuple[Dim, Dim, Dim]:
        boxes, scores = ctx.input_shape(0), ctx.input_shape(1)
        if len(boxes) != 3 or not ctx.same_dim(boxes[2], 4):
            raise ctx.fail(f"boxes must be [batch, boxes, 4], got {list(boxes)}", 0)
        if len(scores) != 3 or not ctx.same_dim(scores[0], boxes[0]) or not ctx.same_dim(scores[2], boxes[1]):
            raise ctx.fail(f"scores must be [batch, classes, boxes] = [{boxes[0]}, C, {boxes[1]}], got {list(scores)}",
                           1)
        if int(ctx.attr("center_point_box", 0)) not in (0, 1):
            raise ctx.fail(f"attribute 'center_point_box' must be 0 or 1, got {ctx.attr('center_point_box')}")
        return boxes[0], scores[1], boxes[1]

    def _max_out(self, ctx: InferenceCtx) -> int | None:
        """max_output_boxes_per_class when it is a constant (0 when absent), else None."""
        if not ctx.has_input(2):
            return 0
        value = ctx.input_value(2)
        if value is None or value.dtype == object:
            return None
        flat = np.asarray(value).reshape(-1)
        return max(int(flat[0]), 0) if flat.size else 0

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        batch, classes, boxes = self._layout(ctx)
        max_out = self._max_out(ctx)
        most = _static_value(ctx, boxes)  # a data-dependent count's bound, so at least its value
        per_class = boxes if max_out is None or (most is not None and most <= max_out) else max_out
        bound = batch * classes * per_class
        if is_zero(bound):
            return [(dtypes.INT64, (0, 3))]
        return [(dtypes.INT64, (ctx.env.data_symbol(f"{ctx.node.name}_count", bound), 3))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        batch, classes, boxes = self._layout(ctx)
        count = ctx.output_shape(0)[0]
        if is_zero(count) or is_zero(boxes):
            return []
        n_static = _static_value(ctx, boxes)
        if n_static is not None and n_static > MAX_NMS_LARGE_BOXES:
            raise ctx.fail(f"NonMaxSuppression ranks {boxes} (up to {n_static}) boxes per class; onyxia takes up "
                           f"to {MAX_NMS_LARGE_BOXES}", 0)
        pairs = batch * classes
        order, kept = ctx.scratch(pairs * boxes, "int32", "order"), ctx.scratch(pairs * boxes, "int32", "kept")
        nkept, total = ctx.scratch(pairs, "int32", "nkept"), ctx.scratch(1, "int32", "count")
        reads = [("boxes", 0), ("scores", 1)]
        defs: dict[str, object] = {"CENTER": bool(ctx.attr("center_point_box", 0))}
        max_out = self._max_out(ctx)
        if max_out is not None:  # a constant: a def, clamped to what the kernel counts in (int64 max is common)
            defs["MAX_OUT"] = min(max_out, 2**31 - 1)
        for name, i, flag in (("max_boxes", 2, "HAS_MAX"), ("iou_threshold", 3, "HAS_IOU"),
                              ("score_threshold", 4, "HAS_SCORE")):
            if ctx.has_input(i) and (i != 2 or max_out is None):
                reads.append((name, i))
                defs[flag] = True
        types = {name: ctx.compute_type(ctx.input_dtype(i), name) for name, i in reads}
        for name in ("boxes", "scores", "iou_threshold", "score_threshold"):
            if types.get(name, "f32") != "f32":
                raise ctx.fail(f"{name} must be floats, got {ctx.input_dtype(dict(reads)[name])}")
        inputs = {n: ctx.input(i) for n, i in reads}
        params = {"G": pairs, "C": classes, "N": boxes}
        if n_static is not None and n_static > MAX_NMS_BOXES:
            steps = self._plan_large(ctx, inputs, defs, params, n_static, order, kept, nkept)
        else:
            steps = [ctx.dispatch("selection/nms.wgsl", label="nms_select",
                                  defs={**defs, "SELECT": True, "SCORES": True, "BOXES": True},
                                  params=params, reads=inputs,
                                  writes={"order": order, "kept_boxes": kept, "nkept": nkept},
                                  workgroups=(pairs, 1, 1))]
        gather = ctx.dispatch("selection/nms.wgsl", label="nms_gather", params=params, defs={"GATHER": True},
                              reads={"nkept": nkept, "kept_boxes": kept}, writes={"y": ctx.output(0), "count": total},
                              workgroups=ctx.grid(pairs * boxes))
        return [*steps, gather, ReadSymbol(total, str(count), pairs * boxes)]

    @staticmethod
    def _plan_large(ctx: PlanCtx, inputs: dict[str, str], defs: dict[str, object], params: dict[str, object],
                    n_static: int, order: str, kept: str, nkept: str) -> list[Step]:
        """Rank in a thread per box, the suppression bit matrix in a thread per (rank, word), and
        ceil(n / NMS_CHUNK) scan dispatches (see shaders/selection/nms.wgsl)."""
        pairs, boxes = params["G"], params["N"]
        words = (boxes + 31) // 32
        state = ctx.scratch(pairs * 2, "int32", "state")
        removed = ctx.scratch(pairs * words, "int32", "removed")
        mask = ctx.scratch(pairs * boxes * words, "int32", "mask")
        shader = "selection/nms.wgsl"
        flags = {"max_boxes": "HAS_MAX", "iou_threshold": "HAS_IOU", "score_threshold": "HAS_SCORE"}

        def step(label: str, names: tuple[str, ...], reads: dict[str, str], writes: dict[str, str],
                 workgroups: object, **extra: object) -> Step:
            bound = {n: inputs[n] for n in names if n in inputs}
            kind = {flags[n]: True for n in bound if n in flags} | {"CENTER": defs["CENTER"]}
            kind |= {"MAX_OUT": defs["MAX_OUT"]} if "MAX_OUT" in defs and "max_boxes" in names else {}
            kind |= {"SCORES": "scores" in bound} if "scores" in bound else {}
            kind |= {"BOXES": True} if "boxes" in bound else {}
            return ctx.dispatch(shader, label=f"nms_{label}", defs={**kind, label.upper(): True, **extra},
                                params=params, reads=bound | reads, writes=writes, workgroups=workgroups)

        scored = ("scores", "score_threshold")
        steps = [
            step("rank", scored, {}, {"order": order}, ctx.grid(pairs * boxes)),
            step("init", scored, {}, {"state": state, "removed": removed, "nkept": nkept}, (pairs, 1, 1)),
            step("mask", ("boxes", "iou_threshold"), {"order": order, "state": state}, {"mask": mask},
                 ctx.grid(pairs * boxes * words)),
        ]
        for _ in range(-(-n_static // NMS_CHUNK)):
            steps.append(step("scan", ("max_boxes",), {"order": order, "mask": mask},
                              {"state": state, "removed": removed, "kept_boxes": kept, "nkept": nkept}, (pairs, 1, 1),
                              CHUNK=NMS_CHUNK, MAX_WORDS=MAX_NMS_LARGE_BOXES // 32))
        return steps


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(Unique(), 11), (NonMaxSuppression(), 10)]
