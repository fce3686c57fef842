"""Layout operators: Transpose, Expand, Tile, Pad, ReverseSequence (one gather.wgsl dispatch each,
see indexing.py), Concat and Split (one dispatch per MAX_PARTS inputs/outputs)."""

from __future__ import annotations

import numpy as np

from onyxia.ir.dtypes import WORD_STORAGE, DType
from onyxia.ir.shapes import Dim, Shape, numel
from onyxia.operators.base import Buf, FoldCtx, InferenceCtx, Operator, PlanCtx, by_quads, quads_guard
from onyxia.operators.common import broadcast_strides, contiguous_strides, is_zero, prefer_literal
from onyxia.operators.functions import expanded
from onyxia.operators.indexing.indexing import coords_code, dispatch_gather, plan_strided_copy
from onyxia.operators.shape.shape import MAX_PARTS, is_used
from onyxia.plan import NEVER, Step


class Transpose(Operator):
    op_type = "Transpose"

    def perm(self, ctx: InferenceCtx) -> list[int]:
        rank = ctx.input_rank(0)
        perm = [int(p) for p in ctx.attr("perm", range(rank - 1, -1, -1))]
        if sorted(perm) != list(range(rank)):
            raise ctx.fail(f"attribute 'perm' {perm} is not a permutation of the input's {rank} axes")
        return perm

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        shape = ctx.input_shape(0)
        return [(ctx.input_dtype(0), tuple(shape[p] for p in self.perm(ctx)))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        value = ctx.input_value(0)
        return None if value is None else [np.transpose(value, self.perm(ctx))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        strides = contiguous_strides(ctx.input_shape(0))
        return plan_strided_copy(ctx, ctx.output_shape(0), [strides[p] for p in self.perm(ctx)])


class Expand(Operator):
    op_type = "Expand"

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        target = tuple(ctx.require_dims(1, "the target shape"))
        return [(ctx.input_dtype(0), ctx.broadcast([ctx.input_shape(0), target]))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        value, shape = ctx.input_value(0), ctx.graph.tensor(ctx.node.outputs[0]).shape
        if value is None or not all(isinstance(d, int) for d in shape or ()):
            return None
        return [np.broadcast_to(value, shape).copy()]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        out = ctx.output_shape(0)
        return plan_strided_copy(ctx, out, broadcast_strides(ctx.input_shape(0), out))


class Tile(Operator):
    op_type = "Tile"

    def repeats(self, ctx: InferenceCtx) -> list[Dim]:
        repeats = ctx.require_dims(1, "repeats")
        if len(repeats) != ctx.input_rank(0):
            raise ctx.fail(f"repeats has {len(repeats)} entries for an input of rank {ctx.input_rank(0)}", 1)
        return repeats

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        return [(ctx.input_dtype(0), tuple(d * r for d, r in zip(ctx.input_shape(0), self.repeats(ctx))))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        value, repeats = ctx.input_value(0), self.repeats(ctx)
        if value is None or not all(isinstance(r, int) for r in repeats):
            return None
        return [np.tile(value, repeats)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        # The output [r0*d0, r1*d1, ...] is laid out as [r0, d0, r1, d1, ...]: a broadcast copy
        # with stride 0 on each repeat axis.
        shape, strides = ctx.input_shape(0), contiguous_strides(ctx.input_shape(0))
        view = tuple(v for r, d in zip(self.repeats(ctx), shape) for v in (r, d))
        return plan_strided_copy(ctx, view, [v for s in strides for v in (0, s)])


class Concat(Operator):
    op_type = "Concat"

    def _axis(self, ctx: InferenceCtx, rank: int) -> int:
        return ctx.axis(ctx.attr("axis", 1) if ctx.opset < 4 else ctx.attr("axis"), rank)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        present = [i for i in range(ctx.num_inputs) if ctx.has_input(i)]
        if not present:
            raise ctx.fail("needs at least one input")
        shapes = [ctx.input_shape(i) for i in present]
        rank = len(shapes[0])
        axis = self._axis(ctx, rank)
        out = list(shapes[0])
        total: Dim = 0
        for i, s in zip(present, shapes):
            if len(s) != rank:
                raise ctx.fail(f"rank {len(s)} differs from input 0's rank {rank}", i)
            if ctx.input_dtype(i) != ctx.input_dtype(present[0]):
                raise ctx.fail(f"dtype {ctx.input_dtype(i)} differs from input 0's {ctx.input_dtype(0)}", i)
            for a, d in enumerate(s):
                if a == axis:
                    continue
                if not ctx.same_dim(out[a], d):
                    raise ctx.fail(f"dim {a} is {d}, input 0 has {out[a]}", i)
                out[a] = prefer_literal(out[a], d)
            total = total + s[axis]
        out[axis] = total
        return [(ctx.input_dtype(present[0]), tuple(out))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        values = [v for v in ctx.values() if v is not None]
        if len(values) != ctx.num_inputs:
            return None
        axis = self._axis(ctx, values[0].ndim)
        if any(v.dtype == object for v in values):
            return [np.concatenate([v.astype(object) for v in values], axis=axis)]
        return [np.concatenate(values, axis=axis).astype(ctx.output_dtype().numpy)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        # One kernel over the output's columns rather than a CopyBuffer per input: the inputs of
        # a KV-cache concat are strided (outer > 1), and a copy would also split the compute pass.
        out = ctx.output_shape(0)
        axis = self._axis(ctx, len(out))
        inner, outer = numel(out[axis + 1:]), numel(out[:axis])
        ctx.compute_type(ctx.output_dtype(0), "output")
        parts = [(ctx.input(i), ctx.input_shape(i)[axis] * inner) for i in range(ctx.num_inputs) if ctx.has_input(i)]
        parts = [(name, row) for name, row in parts if not is_zero(row)]
        # by quads where every row is a multiple of 4 words (NCHW channel concats of images whose
        # H x W is: yolo_style's 17 at 320x320, lavapipe 13.8 -> 4.8 ms): decided here, or by
        # the run's dims where they are symbolic
        guard = quads_guard([out[axis] * inner, *(r for _, r in parts)]) \
            if ctx.tensor_dtype(ctx.output(0)).storage in WORD_STORAGE else NEVER
        row = out[axis] * inner
        return by_quads(ctx, "concat/quads", guard, lambda quads: self._groups(ctx, parts, outer, row, quads))

    @staticmethod
    def _groups(ctx: PlanCtx, parts: list[tuple[str, Dim]], outer: Dim, out_row: Dim, quads: bool) -> list[Step]:
        """A dispatch per MAX_PARTS inputs (`parts`: name, row length), element- or quad-wise."""
        steps: list[Step] = []
        group_off: Dim = 0
        for g in range(0, len(parts), MAX_PARTS):
            group = parts[g:g + MAX_PARTS]
            params: dict[str, object] = {"OUT_ROW": out_row, "GROUP_OFF": group_off}
            branches, end = [], 0
            for k, (_, row) in enumerate(group):
                params[f"R{k}"] = row
                shift = f" - E{k - 1}()" if k else ""
                copy = (f"y_store4(dst / 4u, x{k}_load4((o * R{k}() + r{shift}) / 4u));" if quads
                        else f"y_store(dst, x{k}_load(o * R{k}() + r{shift}));")
                if k < len(group) - 1:
                    end = end + row
                    params[f"E{k}"] = end
                    branches.append(f"if (r < E{k}()) {{ {copy} }}")
                else:
                    branches.append(f"{{ {copy} }}" if k else copy)
            group_row = sum((row for _, row in group), 0)
            count = outer * group_row // 4 if quads else outer * group_row
            group_off = group_off + group_row
            if is_zero(count):
                continue
            # Raw codes: exact for every dtype. Groups meet inside words of a packed output, so
            # its stores are the atomic per-element ones.
            steps.append(ctx.dispatch("indexing/concat.wgsl", label="concat",
                                      defs={"SELECT": " else ".join(branches), **({"QUADS": True} if quads else {})},
                                      params={"N": count, "GROUP_ROW": group_row, **params},
                                      reads={f"x{k}": Buf(name, raw=True, vector=quads)
                                             for k, (name, _) in enumerate(group)},
                                      writes={"y": Buf(ctx.output(0), raw=True, vector=quads)},
                                      workgroups=ctx.grid(count)))
        return steps


class Split(Operator):
    op_type = "Split"

    def sizes(self, ctx: InferenceCtx) -> tuple[int, list[Dim]]:
        shape = ctx.input_shape(0)
        axis = ctx.axis(ctx.attr("axis", 0), len(shape))
        d, n = shape[axis], len(ctx.node.outputs)
        if ctx.has_input(1):
            sizes = ctx.require_dims(1, "split")
        elif "split" in ctx.node.attributes:
            sizes = [int(s) for s in ctx.attr("split")]
        else:
            num = ctx.attr("num_outputs", n)
            if num != n:
                raise ctx.fail(f"attribute 'num_outputs' is {num} but the node has {n} outputs")
            # Equal parts; opset 18 makes the last one smaller when the dim does not divide.
            chunk = (d + n - 1) // n
            sizes = [chunk] * (n - 1) + [d - chunk * (n - 1)]
        if len(sizes) != n:
            raise ctx.fail(f"split has {len(sizes)} entries for {n} outputs")
        total = sum(sizes, 0)
        if not ctx.same_dim(total, d):
            raise ctx.fail(f"split sizes {sizes} do not add up to dim {axis} ({d})")
        return axis, sizes

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        shape = ctx.input_shape(0)
        axis, sizes = self.sizes(ctx)
        return [(ctx.input_dtype(0), tuple(shape[:axis]) + (s,) + tuple(shape[axis + 1:])) for s in sizes]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        value = ctx.input_value(0)
        axis, sizes = self.sizes(ctx)
        if value is None or not all(isinstance(s, int) for s in sizes):
            return None
        return np.split(value, np.cumsum(sizes)[:-1], axis=axis)

    def plan(self, ctx: PlanCtx) -> list[Step]:
        shape = ctx.input_shape(0)
        axis, sizes = self.sizes(ctx)
        inner, outer = numel(shape[axis + 1:]), numel(shape[:axis])
        ctx.compute_type(ctx.input_dtype(0), "input")
        # (output index, first column, columns): unused and empty outputs are not written.
        parts, col = [], 0
        for k, s in enumerate(sizes):
            if is_used(ctx, k) and not is_zero(s * inner):
                parts.append((k, col, s * inner))
            col = col + s * inner
        # by quads where every row is a multiple of 4 words (as Concat: timm's q, k, v Split of
        # [3, B, H, N, D], lavapipe ~0.9 -> ~0.38 ms a layer)
        row = shape[axis] * inner
        guard = quads_guard([row, *(s * inner for s in sizes)]) \
            if ctx.tensor_dtype(ctx.input(0)).storage in WORD_STORAGE else NEVER
        return by_quads(ctx, "split/quads", guard, lambda quads: self._groups(ctx, parts, outer, row, quads))

    @staticmethod
    def _groups(ctx: PlanCtx, parts: list[tuple[int, Dim, Dim]], outer: Dim, in_row: Dim, quads: bool) -> list[Step]:
        """A dispatch per MAX_PARTS outputs (`parts`: output, first column, columns)."""
        steps: list[Step] = []
        for g in range(0, len(parts), MAX_PARTS):
            group = parts[g:g + MAX_PARTS]
            group_off, group_row = group[0][1], group[-1][1] + group[-1][2] - group[0][1]
            params: dict[str, object] = {"IN_ROW": in_row, "GROUP_OFF": group_off}
            branches = []
            for j, (_, first, row) in enumerate(group):
                params[f"R{j}"] = row
                start = first - group_off
                at = f"o * R{j}() + r{f' - B{j}()' if not is_zero(start) else ''}"
                write = f"y{j}_store4(({at}) / 4u, v);" if quads else f"y{j}_store({at}, v);"
                if j == len(group) - 1 and len(group) == 1:
                    branches.append(write)
                    continue
                params[f"E{j}"] = start + row
                cond = f"r < E{j}()"
                if not is_zero(start):
                    params[f"B{j}"] = start
                    cond = f"r >= B{j}() && {cond}"
                branches.append(f"if ({cond}) {{ {write} }}")
            count = outer * group_row // 4 if quads else outer * group_row
            if is_zero(count):
                continue
            steps.append(ctx.dispatch("indexing/split.wgsl", label="split",
                                      defs={"SELECT": " else ".join(branches), **({"QUADS": True} if quads else {})},
                                      params={"N": count, "GROUP_ROW": group_row, **params},
                                      reads={"x": Buf(ctx.input(0), raw=True, vector=quads)},
                                      writes={f"y{j}": Buf(ctx.output(k), raw=True, vector=quads)
                                              for j, (k, _, _) in enumerate(group)},
                                      workgroups=ctx.grid(count)))
        return steps


PAD_MODES = ("constant", "reflect", "edge", "wrap")


class Pad(Operator):
    op_type = "Pad"

    def pads(self, ctx: InferenceCtx) -> tuple[str, list[Dim], list[Dim]]:
        """(mode, begin pads, end pads) for every axis of the input."""
        rank = ctx.input_rank(0)
        mode = ctx.attr("mode", "constant")
        if mode not in PAD_MODES:
            raise ctx.fail(f"attribute 'mode' '{mode}' is not one of {', '.join(PAD_MODES)}")
        if ctx.has_input(1):
            pads = ctx.require_dims(1, "pads")
        else:  # Pad before opset 11: attributes ('paddings' in Pad-1)
            pads = [int(p) for p in ctx.attr("pads", None) or ctx.attr("paddings")]
        axes = list(range(rank))
        if ctx.has_input(3):
            axes = [ctx.axis(int(a), rank) for a in ctx.require_dims(3, "axes")]
        if len(pads) != 2 * len(axes):
            raise ctx.fail(f"pads has {len(pads)} entries, expected {2 * len(axes)} (begin and end per axis)", 1)
        begin: list[Dim] = [0] * rank
        end: list[Dim] = [0] * rank
        for a, b, e in zip(axes, pads[:len(axes)], pads[len(axes):]):
            begin[a], end[a] = b, e
        return mode, begin, end

    def constant(self, ctx: InferenceCtx) -> tuple[object, str | None]:
        """(fill value, or None when it is a GPU tensor; that tensor's name)."""
        if ctx.has_input(2):
            value = ctx.input_value(2)
            if value is None:
                return None, ctx.input_tensor(2).name
            return value.reshape(-1)[0].item() if value.size else 0, None
        return ctx.attr("value", 0.0), None

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        _, begin, end = self.pads(ctx)
        return [(ctx.input_dtype(0), tuple(d + b + e for d, b, e in zip(ctx.input_shape(0), begin, end)))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        value, (fill, _) = ctx.input_value(0), self.constant(ctx)
        mode, begin, end = self.pads(ctx)
        if value is None or value.dtype == object or not all(isinstance(p, int) for p in (*begin, *end)):
            return None
        # Negative pads crop; np.pad only grows.
        value = value[tuple(slice(max(-b, 0), d - max(-e, 0)) for b, e, d in zip(begin, end, value.shape))]
        widths = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
        if mode == "constant":
            return [np.pad(value, widths, mode="constant", constant_values=fill)]
        return [np.pad(value, widths, mode=mode)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        mode, begin, end = self.pads(ctx)
        fill, fill_tensor = self.constant(ctx)
        shape, out = ctx.input_shape(0), ctx.output_shape(0)
        strides = contiguous_strides(shape)
        params, lines = coords_code(out)
        terms, inside = [], []
        for a, (d, b, e) in enumerate(zip(shape, begin, end)):
            stride = "" if isinstance(strides[a], int) and strides[a] == 1 else f" * PS{a}()"
            if stride:
                params[f"PS{a}"] = strides[a]
            if is_zero(b) and is_zero(e):
                terms.append(f"c{a}{stride}")
                continue
            # Negative pads crop first, then the rest pads the cropped axis (as onnxruntime does):
            # j is the coordinate in the cropped axis of PD elements starting at element PO.
            # In i32: a padded position lies before the axis' start.
            crop_b, crop_e = (-b if isinstance(b, int) and b < 0 else 0), (-e if isinstance(e, int) and e < 0 else 0)
            params[f"PB{a}"], params[f"PD{a}"] = (b + crop_b, "i32"), (d - crop_b - crop_e, "i32")
            lines.append(f"var j{a} = i32(c{a}) - PB{a}();")
            if mode == "constant":
                inside.append(f"j{a} >= 0 && j{a} < PD{a}()")
            elif mode == "edge":
                lines.append(f"j{a} = clamp(j{a}, 0, PD{a}() - 1);")
            elif mode == "reflect":  # period 2(d-1): ... 2 1 [0 1 2 3] 2 1 0 1 ...
                lines += [f"let p{a} = max(2 * (PD{a}() - 1), 1);", f"let m{a} = ((j{a} % p{a}) + p{a}) % p{a};",
                          f"j{a} = select(m{a}, p{a} - m{a}, m{a} >= PD{a}());"]
            else:  # wrap
                lines += [f"let d{a} = max(PD{a}(), 1);", f"j{a} = ((j{a} % d{a}) + d{a}) % d{a};"]
            if crop_b:
                params[f"PO{a}"] = crop_b
                terms.append(f"(u32(j{a}) + PO{a}()){stride}")
            else:
                terms.append(f"u32(j{a}){stride}")
        lines.append(f"let s = {' + '.join(terms) or '0u'};")
        if mode == "constant":
            lines.append(f"let inside = {' && '.join(inside) or 'true'};")
            lines.append("let src = select(0u, s, inside);")
        else:
            lines.append("let src = s;")
        lines.append("let dst = i;")
        masked = mode == "constant"
        return dispatch_gather(ctx, "\n    ".join(lines), params, x=ctx.input(0), y=ctx.output(0), count=numel(out),
                               fill=fill if masked and fill_tensor is None else None,
                               fill_buffer=fill_tensor if masked else None, label="pad")


class ReverseSequence(Operator):
    """Reverse the first sequence_lens[b] steps of each batch entry along the time axis (axes 0
    and 1, either order); the steps after them are copied. One gather reading the lengths."""

    op_type = "ReverseSequence"

    def axes(self, ctx: InferenceCtx) -> tuple[int, int]:
        batch, time = int(ctx.attr("batch_axis", 1)), int(ctx.attr("time_axis", 0))
        if {batch, time} != {0, 1}:
            raise ctx.fail(f"attributes 'batch_axis' = {batch} and 'time_axis' = {time} must be 0 and 1")
        return batch, time

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        shape = ctx.input_shape(0)
        if len(shape) < 2:
            raise ctx.fail(f"input must have rank >= 2, got {len(shape)}", 0)
        batch, _ = self.axes(ctx)
        if not ctx.input_dtype(1).is_integer or not ctx.same_shape(ctx.input_shape(1), (shape[batch],)):
            raise ctx.fail(f"sequence_lens must be integers of shape [{shape[batch]}], got "
                           f"{ctx.input_dtype(1)}{list(ctx.input_shape(1))}", 1)
        return [(ctx.input_dtype(0), shape)]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        x, lens = ctx.input_value(0), ctx.input_value(1)
        if x is None or lens is None or x.dtype == object:
            return None
        batch, time = self.axes(ctx)
        out = x.copy()
        for b, n in enumerate(np.asarray(lens, np.int64)):
            index = [slice(None)] * x.ndim
            index[batch], index[time] = b, slice(0, int(n))
            out[tuple(index)] = np.flip(x[tuple(index)], axis=0)
        return [out]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        shape = ctx.input_shape(0)
        batch, _ = self.axes(ctx)
        inner = numel(shape[2:])
        # a0, a1: the coordinates on axes 0 and 1; the time one is mirrored below its length
        b, t = ("a0", "a1") if batch == 0 else ("a1", "a0")
        code = (f"let inner = i % INNER(); let r = i / INNER(); let a1 = r % D1(); let a0 = r / D1();\n"
                f"    let n = u32(clamp(idx_load({b}), 0, i32(TIME())));\n"
                f"    let t = select({t}, n - 1u - {t}, {t} < n);\n"
                f"    let src = ({'a0 * D1() + t' if batch == 0 else 't * D1() + a1'}) * INNER() + inner;\n"
                "    let dst = i;")
        params = {"INNER": inner, "D1": shape[1], "TIME": shape[1 - batch]}
        return dispatch_gather(ctx, code, params, x=ctx.input(0), y=ctx.output(0), idx=ctx.input(1),
                               count=numel(shape), label="reverse_sequence")


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(Transpose(), 1), (Expand(), 8), (Tile(), 6), (Concat(), 1), (Split(), 1), (Pad(), 1),
            (ReverseSequence(), 10),
            expanded("CenterCropPad")]  # its ONNX function body: Slice and Pad
