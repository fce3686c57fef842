"""Indexing operators: Gather, GatherElements, GatherND, Slice, Trilu (the Scatters: scatter.py).

Also the index-code generation the data-movement operators share. Every such kernel is one
template, shaders/indexing/gather.wgsl (`y[dst] = x[src]`), specialized by generated WGSL that
computes `src` from the flat output index `i`; only that code differs between Transpose, Slice,
Expand, Tile, Pad, Trilu and the Gathers. Sizes and strides travel as params, so symbolic dims
become immediates and one compiled plan serves every sequence length.

Index tensors (int64 on the host) are i32 on the device; negative indices wrap once. An index
outside [-dim, dim) is refused, as onnxruntime does: at compile time when the indices are
constant, otherwise the kernel reports it through the status word (the run raises a
ComputeError naming the node) and clamps the read so it stays inside the buffer.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import WORD_STORAGE, DType
from onyxia.ir.shapes import Dim, Shape, SymDim, nonnegative, numel
from onyxia.operators.base import Buf, FoldCtx, InferenceCtx, Operator, PlanCtx, by_quads, quads_guard
from onyxia.operators.common import collapse_dims, contiguous_strides, is_one, is_zero
from onyxia.plan import NEVER, Step

GATHER = "indexing/gather.wgsl"
# A private attribute of the Gathers SplitLargeTensorsPass makes over a table's row pieces: their
# indices are shifted into each piece and fall outside it by design (the pieces are selected
# afterwards), so those Gathers clamp instead of reporting.
CLAMP_INDICES_ATTR = "_onyxia_clamp_indices"
# What a kernel's report of an index outside its axis means (the run raises naming the node).
INDEX_OUT_OF_RANGE = "an index outside [-dim, dim) of its axis (onnxruntime refuses it)"
# Sentinels exporters write for "to the end" (INT64_MAX, INT32_MAX, and their negatives).
UNBOUNDED = 2**31 - 1
END_OF_AXIS = (2**31 - 1, 2**63 - 1)


def scalar_param(value: object, compute: str) -> tuple[object, str]:
    """A range value as a param of the kernel's compute type."""
    if compute == "f32":
        return float(value), "f32"  # type: ignore[arg-type]
    if isinstance(value, SymDim):
        return value, compute
    return int(value), compute  # type: ignore[call-overload]


def fill_code(ctx: PlanCtx, value: object, dtype: DType) -> tuple[object, str]:
    """A fill value as the u32 storage code a raw kernel writes (an expression for a symbolic
    int32/int64 value: its word is the value itself)."""
    if isinstance(value, SymDim):
        if dtype.storage != "i32":
            raise ctx.fail(f"a symbolic fill value needs an int32/int64 tensor, not {dtype}")
        return value, "u32"
    raw = dtypes.to_device(np.asarray([value]).astype(dtype.numpy), dtype, f"{ctx.node.describe()} fill value")
    word = int(raw[:4].view(np.uint32)[0]) if raw.dtype == np.uint8 else int(raw.view(np.uint32)[0])
    return word & ((1 << dtype.bits) - 1), "u32"


# ---- generated index code -----------------------------------------------------------------

def coords_code(shape: Sequence[Dim], prefix: str = "D") -> tuple[dict[str, object], list[str]]:
    """WGSL splitting the flat index `i` of row-major `shape` into c0 (outermost) .. c{r-1}."""
    if not shape:
        return {}, []
    params: dict[str, object] = {}
    lines = ["var rem = i;"]
    for a in range(len(shape) - 1, 0, -1):
        params[f"{prefix}{a}"] = shape[a]
        lines.append(f"let c{a} = rem % {prefix}{a}(); rem = rem / {prefix}{a}();")
    lines.append("let c0 = rem;")
    return params, lines


def strided_code(shape: Shape, operands: Mapping[str, tuple[Sequence[Dim], Dim]]) -> tuple[dict[str, object], str]:
    """WGSL defining `let <name> = offset + sum(c_k * stride_k)` for each operand.

    The iteration space is the row-major `shape` (flat index `i`); each operand gives its
    element stride per axis and an element offset. Axes that are contiguous in every operand
    are merged first (collapse_dims), so slicing the last axis of [b, s, d] (x[..., :k]) indexes
    two coordinates (b*s, k), not three. Strides may be negative (reversed slices): params are u32 and WGSL
    u32 arithmetic wraps, which is two's complement.
    """
    dims, merged = collapse_dims(shape, [list(s) for s, _ in operands.values()])
    contiguous = contiguous_strides(dims)
    plain = [m == contiguous and is_zero(off) for m, (_, off) in zip(merged, operands.values())]
    params: dict[str, object] = {}
    lines: list[str] = []
    if not all(plain):
        params, lines = coords_code(dims)
    for (name, (_, off)), m, identity in zip(operands.items(), merged, plain):
        if identity:
            lines.append(f"let {name} = i;")
            continue
        terms = []
        if not is_zero(off):
            params[f"{name.upper()}_OFF"] = (off, "u32")
            terms.append(f"{name.upper()}_OFF()")
        for a, s in enumerate(m):
            if is_zero(s):
                continue
            if isinstance(s, int) and s == 1:
                terms.append(f"c{a}")
            else:
                params[f"{name.upper()}_S{a}"] = (s, "u32")
                terms.append(f"c{a} * {name.upper()}_S{a}()")
        lines.append(f"let {name} = {' + '.join(terms) or '0u'};")
    return params, "\n    ".join(lines)


def dispatch_gather(ctx: PlanCtx, index: str, params: Mapping[str, object], *, x: str, y: str, count: Dim,
                    idx: str | None = None, fill: object = None, fill_buffer: str | None = None,
                    label: str | None = None, scatter: bool = False, reports: str | None = None) -> list[Step]:
    """One gather.wgsl dispatch over `count` output elements (none when statically empty).

    `index` is WGSL computing `src` (and `inside` when a fill applies) from `i`: y[i] = x[src],
    a thread writing whole words of y. With `scatter` it computes `dst` too: y[dst] = x[src]
    (element stores, atomic ones for packed dtypes). `reports`: what the index code's
    onyxia_report() calls mean (onyxia_checked_index: INDEX_OUT_OF_RANGE).
    """
    if is_zero(count):
        return []
    dtype = ctx.tensor_dtype(y)
    ctx.compute_type(dtype, "output")
    reads: dict[str, str | Buf] = {"x": Buf(x, raw=True)}
    if idx:
        reads["idx"] = idx
    defs: dict[str, object] = {"INDEX": index}
    all_params = {"N": count, **params}
    if fill is not None or fill_buffer:
        defs["MASKED"] = True
    if fill_buffer:
        defs["FILL_BUFFER"] = True
        reads["fill_value"] = Buf(fill_buffer, raw=True)
    elif fill is not None:
        all_params["FILL"] = fill_code(ctx, fill, dtype)
    if scatter:
        defs["SCATTER"] = True
    return [ctx.dispatch(GATHER, label=label or f"gather_{ctx.node.op_type}", defs=defs, params=all_params,
                         reads=reads, writes={"y": Buf(y, whole_words=not scatter, raw=True)},
                         workgroups=ctx.grid(count) if scatter else ctx.unit_grid(count, y), reports=reports)]


def plan_strided_copy(ctx: PlanCtx, shape: Shape, src_strides: Sequence[Dim], src_offset: Dim = 0, *,
                      x: str | None = None, y: str | None = None) -> list[Step]:
    """y (contiguous, `shape` as the iteration space) = x read through strides and an offset;
    by quads (QUADS in gather.wgsl) where the elements are words and the innermost axis is
    contiguous, a multiple of 4 long, at quad offsets and strides: decided here where those are
    static (or symbolic multiples of 4, as 512 * seq), else by a Select whose guard checks them at
    the run's dims (an image's width: yolo_style's channel Slices, lavapipe ~4x fewer accesses)."""
    x, y = x or ctx.input(0), y or ctx.output(0)
    if not (ctx.tensor_dtype(y).storage in WORD_STORAGE and len(shape) > 0 and is_one(src_strides[-1])):
        guard = NEVER
    else:
        guard = quads_guard((shape[-1], *src_strides[:-1], src_offset))

    def copy(quads: bool) -> list[Step]:
        if not quads:
            params, code = strided_code(shape, {"src": (src_strides, src_offset),
                                                "dst": (contiguous_strides(shape), 0)})
            return dispatch_gather(ctx, code, params, x=x, y=y, count=numel(shape), label="strided_copy")
        by4 = (*shape[:-1], shape[-1] // 4)
        params, code = strided_code(by4, {"src": ([s // 4 for s in src_strides[:-1]] + [1], src_offset // 4),
                                          "dst": (contiguous_strides(by4), 0)})
        count = numel(by4)
        return [] if is_zero(count) else [ctx.dispatch(
            GATHER, label="strided_copy", defs={"INDEX": code, "QUADS": True}, params={"N": count, **params},
            reads={"x": Buf(x, raw=True, vector=True)}, writes={"y": Buf(y, raw=True, vector=True)},
            workgroups=ctx.grid(count))]

    return by_quads(ctx, "strided_copy/quads", guard, copy)


def copy_elements(ctx: PlanCtx, src: str, dst: str, count: Dim, src_offset: Dim = 0, dst_offset: Dim = 0) -> list[Step]:
    """dst[dst_offset:][:count] = src[src_offset:][:count], in elements of the tensors' dtype.

    A CopyBuffer where the bytes allow it (WebGPU copies whole words: word-sized dtypes, or
    packed ones whose counts and offsets are static multiples of a word's elements); otherwise a
    gather.wgsl copy that moves the storage codes (element stores merged into their words).
    """
    if is_zero(count):
        return []
    dtype = ctx.tensor_dtype(src)
    per = dtype.per_word if dtype.packed else 1
    if per == 1:
        return [ctx.copy(src, dst, count * 4, src_offset * 4, dst_offset * 4)]
    if all(isinstance(v, int) and v % per == 0 for v in (count, src_offset, dst_offset)):
        return [ctx.copy(src, dst, count // per * 4, src_offset // per * 4, dst_offset // per * 4)]
    params: dict[str, object] = {"SRC_OFF": (src_offset, "u32"), "DST_OFF": (dst_offset, "u32")}
    return dispatch_gather(ctx, "let src = SRC_OFF() + i;\n    let dst = DST_OFF() + i;", params, x=src, y=dst,
                           count=count, label="copy_elements", scatter=True)


def check_indices(ctx: InferenceCtx, i: int, dims: Sequence[Dim], column: bool = False) -> str:
    """Refuse constant indices (input `i`) outside [-dim, dim) of their axis, naming the node.

    `dims`: the axis length each index addresses: one for all, or with `column` one per position
    along the last axis (GatherND/ScatterND). Returns the WGSL function the kernel maps an index
    with: a plain wrap when every index was checked here, else one that reports (INDEX_OUT_OF_RANGE).
    """
    value = ctx.input_value(i)
    if value is None or value.dtype == object or not all(isinstance(d, int) for d in dims):
        return "onyxia_checked_index"
    idx = value.astype(np.int64).reshape(-1, len(dims) if column else 1)
    bound = np.asarray(dims, np.int64).reshape(1, -1)
    bad = np.argwhere((idx < -bound) | (idx >= bound))
    if bad.size:
        row, col = bad[0]
        raise ctx.fail(f"index {int(idx[row, col])} is outside [-{dims[col]}, {dims[col]}) of the axis it addresses", i)
    return "onyxia_wrap_index"


def wrap_reports(fn: str) -> str | None:
    """The `reports` of a dispatch whose index code uses `fn` (from check_indices)."""
    return INDEX_OUT_OF_RANGE if fn == "onyxia_checked_index" else None


def index_values(ctx: FoldCtx, i: int) -> np.ndarray | None:
    """A numeric index input as int64, or None when unknown or symbolic."""
    value = ctx.input_value(i)
    if value is None or value.dtype == object:
        return None
    return value.astype(np.int64)


# ---- Gather family --------------------------------------------------------------------------

class Gather(Operator):
    op_type = "Gather"

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        data, idx = ctx.input_shape(0), ctx.input_shape(1)
        if not ctx.input_dtype(1).is_integer:
            raise ctx.fail(f"indices must be int32/int64, got {ctx.input_dtype(1)}", 1)
        axis = ctx.axis(ctx.attr("axis", 0), len(data))
        check_indices(ctx, 1, [data[axis]])
        return [(ctx.input_dtype(0), tuple(data[:axis]) + tuple(idx) + tuple(data[axis + 1:]))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        data, idx = ctx.input_value(0), index_values(ctx, 1)
        if data is None or idx is None:
            return None
        axis = ctx.axis(ctx.attr("axis", 0), data.ndim)
        # np.take handles negative indices and object arrays (Shape → Gather over symbols).
        return [np.asarray(np.take(data, idx, axis=axis))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        data = ctx.input_shape(0)
        axis = ctx.axis(ctx.attr("axis", 0), len(data))
        wrap = "onyxia_wrap_index" if ctx.attr(CLAMP_INDICES_ATTR, 0) else check_indices(ctx, 1, [data[axis]])
        code = ("let inner = i % INNER(); let t = i / INNER(); let j = t % NIDX(); let outer = t / NIDX();\n"
                f"    let src = (outer * AXIS_DIM() + {wrap}(idx_load(j), AXIS_DIM())) * INNER() + inner;\n"
                "    let dst = i;")
        params = {"INNER": numel(data[axis + 1:]), "NIDX": numel(ctx.input_shape(1)), "AXIS_DIM": data[axis]}
        return dispatch_gather(ctx, code, params, x=ctx.input(0), y=ctx.output(0), idx=ctx.input(1),
                               count=numel(ctx.output_shape(0)), reports=wrap_reports(wrap))


class GatherElements(Operator):
    op_type = "GatherElements"

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        data, idx = ctx.input_shape(0), ctx.input_shape(1)
        if len(data) != len(idx):
            raise ctx.fail(f"indices must have the data's rank {len(data)}, got {len(idx)}", 1)
        check_indices(ctx, 1, [data[ctx.axis(ctx.attr("axis", 0), len(data))]])
        return [(ctx.input_dtype(0), tuple(idx))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        data, idx = ctx.input_value(0), index_values(ctx, 1)
        if data is None or idx is None:
            return None
        axis = ctx.axis(ctx.attr("axis", 0), data.ndim)
        # indices may be smaller than the data on the other axes: those read data[:n] there.
        data = data[tuple(slice(None) if a == axis else slice(0, n) for a, n in enumerate(idx.shape))]
        return [np.take_along_axis(data, np.where(idx < 0, idx + data.shape[axis], idx), axis=axis)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        data, idx_shape = ctx.input_shape(0), ctx.input_shape(1)
        axis = ctx.axis(ctx.attr("axis", 0), len(data))
        strides = contiguous_strides(data)
        # The other axes address data at the index's coordinates; the axis comes from idx.
        params, code = strided_code(idx_shape, {"base": ([0 if a == axis else s for a, s in enumerate(strides)], 0)})
        wrap = check_indices(ctx, 1, [data[axis]])
        code += f"\n    let src = base + {wrap}(idx_load(i), DAX()) * DSAX();\n    let dst = i;"
        params |= {"DAX": data[axis], "DSAX": strides[axis]}
        return dispatch_gather(ctx, code, params, x=ctx.input(0), y=ctx.output(0), idx=ctx.input(1),
                               count=numel(idx_shape), reports=wrap_reports(wrap))


def nd_layout(ctx: InferenceCtx, batch_dims: int) -> tuple[Shape, Shape, int]:
    """(data shape, indices shape, k) for GatherND/ScatterND, with k = indices.shape[-1] checked."""
    data, idx = ctx.input_shape(0), ctx.input_shape(1)
    if not idx:
        raise ctx.fail("indices must have rank >= 1", 1)
    k = ctx.literal(idx[-1], "the last dim of indices", 1)
    if batch_dims < 0 or (batch_dims and batch_dims >= min(len(data), len(idx))):
        raise ctx.fail(f"batch_dims {batch_dims} must be smaller than both ranks")
    if k > len(data) - batch_dims:
        raise ctx.fail(f"indices address {k} axes but the data has only {len(data) - batch_dims} after batch dims", 1)
    return data, idx, k


def nd_offset_code(data_tail: Shape, k: int, wrap: str) -> tuple[dict[str, object], str]:
    """WGSL adding the k indices idx[p*K + m] (mapped by `wrap`) times the strides of `data_tail` to `off`."""
    strides = contiguous_strides(data_tail)
    params: dict[str, object] = {}
    lines = []
    for m in range(k):
        params[f"DIM{m}"], params[f"STR{m}"] = data_tail[m], strides[m]
        lines.append(f"off += {wrap}(idx_load(p * {k}u + {m}u), DIM{m}()) * STR{m}();")
    return params, "\n    ".join(lines)


class GatherND(Operator):
    op_type = "GatherND"

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        b = ctx.attr("batch_dims", 0)
        data, idx, k = nd_layout(ctx, b)
        check_indices(ctx, 1, data[b:b + k], column=True)
        return [(ctx.input_dtype(0), tuple(idx[:-1]) + tuple(data[b + k:]))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        data, idx = ctx.input_value(0), index_values(ctx, 1)
        if data is None or idx is None:
            return None
        b = ctx.attr("batch_dims", 0)
        batch = int(np.prod(data.shape[:b], dtype=np.int64))
        flat_data = data.reshape((batch,) + data.shape[b:])
        flat_idx = idx.reshape((batch, int(np.prod(idx.shape[b:-1], dtype=np.int64)), idx.shape[-1]))
        out = [flat_data[n][tuple(flat_idx[n].T)] for n in range(batch)]
        shape = tuple(ctx.graph.tensor(ctx.node.outputs[0]).shape)  # type: ignore[arg-type]
        return [np.asarray(out, dtype=data.dtype).reshape(shape)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        b = ctx.attr("batch_dims", 0)
        data, idx, k = nd_layout(ctx, b)
        wrap = check_indices(ctx, 1, data[b:b + k], column=True) if k else "onyxia_wrap_index"
        params, offsets = nd_offset_code(data[b:], k, wrap)
        params |= {"SLICE": numel(data[b + k:]), "NPB": numel(idx[b:-1]), "BSTR": numel(data[b:])}
        code = (f"let p = i / SLICE();\n    var off = (p / NPB()) * BSTR() + i % SLICE();\n    {offsets}\n"
                "    let src = off;\n    let dst = i;")
        return dispatch_gather(ctx, code, params, x=ctx.input(0), y=ctx.output(0), idx=ctx.input(1),
                               count=numel(ctx.output_shape(0)), reports=wrap_reports(wrap))


# ---- Slice ----------------------------------------------------------------------------------

def _int_slice(d: int, start: int, end: int, step: int) -> tuple[int, int]:
    """(first index, length) of an ONNX slice over a static dim, clamped per the spec."""
    if d == 0:
        return 0, 0
    if step < 0 and end in END_OF_AXIS:
        end = -d - 1  # onnxruntime reads INT_MAX as numpy's None: through index 0
    start = start + d if start < 0 else start
    end = end + d if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), d), min(max(end, 0), d)
        return start, max(0, -(-(end - start) // step))
    start, end = min(max(start, 0), d - 1), min(max(end, -1), d - 1)
    return start, max(0, -(-(start - end) // -step))


_DIM_LIMIT = 2**31  # dims are below it: what the indicators ([x >= 0] = (x + 2**31) // 2**31) divide by


def _sym_bound(v: Dim, d: Dim, step: int, is_end: bool) -> Dim:
    """A start/end against a symbolic dim: sentinels clamp, negatives count from the end.

    Without the dim's value we cannot clamp an in-between constant; the model promises it is
    in range (as exporters' constant slices are). A symbolic bound that is minus a length
    (`x[:, -seq:]`, T5's position bias) counts from the end too, as dim arithmetic: the plan
    follows every value of the length without a recompile.
    """
    if isinstance(v, SymDim):
        if step > 0 and nonnegative(-v):  # -s for a length s: from the end unless s = 0, clamped at 0
            x = v + d * ((-v + _DIM_LIMIT - 1) // _DIM_LIMIT)  # v + d * [s >= 1]
            return x * ((x + _DIM_LIMIT) // _DIM_LIMIT)  # max(x, 0); x <= d already
        return v
    if v >= UNBOUNDED:
        return d if step > 0 else (-1 if is_end and v in END_OF_AXIS else d - 1)
    if v <= -UNBOUNDED:
        return (-1 if is_end else 0) if step < 0 else 0
    return v + d if v < 0 else v


def slice_dim(d: Dim, start: Dim, end: Dim, step: Dim) -> tuple[Dim, Dim]:
    """(first index, length) of the slice of one axis; symbolic when the dim or bounds are."""
    if not isinstance(step, int) or step == 0:
        raise ValueError(f"step must be a non-zero constant, got {step}")
    if isinstance(d, int) and isinstance(start, int) and isinstance(end, int):
        return _int_slice(d, start, end, step)
    first, last = _sym_bound(start, d, step, False), _sym_bound(end, d, step, True)
    length = (last - first + step - 1) // step if step > 0 else (first - last - step - 1) // -step
    return first, max(length, 0) if isinstance(length, int) else length


def at_most(d: Dim, c: int) -> Dim:
    """min(d, c) for a dim d in [0, 2**31) and a constant c >= 0, as a dim expression: the
    indicator [d >= c] is (d - c + 2**31) // 2**31 for such d, so min = d - (d - c) * [d >= c]."""
    if isinstance(d, int):
        return min(d, c)
    return d - (d - c) * ((d - c + _DIM_LIMIT) // _DIM_LIMIT)


class Slice(Operator):
    """A constant start/end within a data-dependent dim (NonZero's, NonMaxSuppression's count)
    is clamped to it at run time (`keep[:100]` of 7 kept boxes is 7 rows); against other symbolic
    dims the model promises it is in range (_sym_bound)."""

    op_type = "Slice"

    def params(self, ctx: InferenceCtx) -> list[tuple[int, Dim, Dim, int]]:
        """(axis, start, end, step) per sliced axis, from inputs (opset >= 10) or attributes."""
        rank = ctx.input_rank(0)
        if ctx.has_input(1):
            starts, ends = ctx.require_dims(1, "starts"), ctx.require_dims(2, "ends")
            axes = ctx.require_dims(3, "axes") if ctx.has_input(3) else list(range(len(starts)))
            steps = ctx.require_dims(4, "steps") if ctx.has_input(4) else [1] * len(starts)
        else:
            starts, ends = ctx.attr("starts"), ctx.attr("ends")
            axes, steps = ctx.attr("axes", list(range(len(starts)))), [1] * len(starts)
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise ctx.fail(f"starts, ends, axes and steps differ in length "
                           f"({len(starts)}, {len(ends)}, {len(axes)}, {len(steps)})")
        axes, steps = ctx.require_ints(axes, "axes", 3), ctx.require_ints(steps, "steps", 4)
        norm = [ctx.axis(a, rank) for a in axes]
        if len(set(norm)) != len(norm):
            raise ctx.fail(f"axes {axes} repeat an axis")
        if any(s == 0 for s in steps):
            raise ctx.fail("steps must be non-zero")
        return list(zip(norm, starts, ends, steps))

    def ranges(self, ctx: InferenceCtx) -> tuple[list[Dim], list[Dim], list[int]]:
        """Per axis of the data: first index, length and step (1 for unsliced axes)."""
        shape = ctx.input_shape(0)
        first: list[Dim] = [0] * len(shape)
        length, steps = list(shape), [1] * len(shape)
        for axis, start, end, step in self.params(ctx):
            d = shape[axis]
            if step > 0 and not isinstance(d, int) and ctx.env.data_symbols.keys() & d.symbols:
                start, end = (at_most(d, v) if isinstance(v, int) and 0 < v < UNBOUNDED else v
                              for v in (start, end))
            first[axis], length[axis] = slice_dim(d, start, end, step)
            steps[axis] = step
        return first, length, steps

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        return [(ctx.input_dtype(0), tuple(self.ranges(ctx)[1]))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        data = ctx.input_value(0)
        first, length, steps = self.ranges(ctx)
        if data is None or not all(isinstance(v, int) for v in (*first, *length)):
            return None
        index = tuple(slice(f, f + n * s if f + n * s >= 0 else None, s) for f, n, s in zip(first, length, steps))
        return [data[index]]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        first, length, steps = self.ranges(ctx)
        strides = contiguous_strides(ctx.input_shape(0))
        offset: Dim = sum((f * s for f, s in zip(first, strides)), 0)
        return plan_strided_copy(ctx, tuple(length), [st * s for st, s in zip(steps, strides)], offset)


# ---- Trilu ----------------------------------------------------------------------------------

class Trilu(Operator):
    op_type = "Trilu"

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        if ctx.input_rank(0) < 2:
            raise ctx.fail(f"input must have rank >= 2, got {ctx.input_rank(0)}", 0)
        return [(ctx.input_dtype(0), ctx.input_shape(0))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        x, k = ctx.input_value(0), index_values(ctx, 1) if ctx.has_input(1) else np.int64(0)
        if x is None or k is None:
            return None
        return [(np.triu if ctx.attr("upper", 1) else np.tril)(x, int(k))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        shape = ctx.input_shape(0)
        k = ctx.input_value(1) if ctx.has_input(1) else np.int64(0)
        params: dict[str, object] = {"M": shape[-1], "NR": shape[-2]}
        if k is not None:
            params["K"] = (k.reshape(()).item() if isinstance(k, np.ndarray) else int(k), "i32")
        k_expr = "K()" if k is not None else "idx_load(0u)"  # k computed on the GPU: read it there
        cmp = ">=" if ctx.attr("upper", 1) else "<="
        code = (f"let col = i % M(); let row = (i / M()) % NR();\n"
                f"    let inside = i32(col) - i32(row) {cmp} {k_expr};\n    let src = i;\n    let dst = i;")
        return dispatch_gather(ctx, code, params, x=ctx.input(0), y=ctx.output(0), count=numel(shape), fill=0,
                               idx=None if k is not None else ctx.input(1))


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(Gather(), 1), (GatherElements(), 11), (GatherND(), 11), (Slice(), 1), (Trilu(), 14)]
