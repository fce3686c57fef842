"""Helpers shared by operator families: broadcasting, strides, generated index and binding code."""

from __future__ import annotations

from typing import Sequence

from onyxia.ir.shapes import Dim, Shape, SymDim, numel


def broadcast_shapes(shapes: Sequence[Shape], fail, unify=None) -> Shape:
    """NumPy broadcasting over int | SymDim dims. `fail(msg)` builds the error to raise.

    A symbolic dim against an int > 1 takes the int (the model promises they agree). Two
    different symbolic dims (say `seq` and `mask_seq`) broadcast only if `unify(a, b)` accepts
    them as equal — InferenceCtx.unify does when their current values agree, and records the
    assumption so the runtime rejects dims that break it.
    """
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for axis in range(rank):
        dims = [s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0]
        result: Dim = 1
        for d in dims:
            if isinstance(d, int) and d == 1:
                continue
            if isinstance(result, int) and result == 1:
                result = d
            elif d == result:
                continue
            elif isinstance(d, SymDim) and isinstance(result, int):
                continue
            elif isinstance(result, SymDim) and isinstance(d, int):
                result = d
            elif unify is not None and isinstance(d, SymDim) and isinstance(result, SymDim) and unify(result, d):
                continue
            else:
                raise fail(f"shapes {[list(map(str, s)) for s in shapes]} cannot be broadcast (axis {axis}: {result} vs {d})")
        out.append(result)
    return tuple(out)


def contiguous_strides(shape: Shape) -> list[Dim]:
    strides: list[Dim] = []
    acc: Dim = 1
    for d in reversed(shape):
        strides.append(acc)
        acc = acc * d
    return strides[::-1]


def broadcast_strides(in_shape: Shape, out_shape: Shape) -> list[Dim]:
    """Element strides of `in_shape` viewed as `out_shape` (0 on broadcast axes)."""
    pad = len(out_shape) - len(in_shape)
    full = (1,) * pad + tuple(in_shape)
    strides = contiguous_strides(full)
    return [0 if (isinstance(d, int) and d == 1 and not (isinstance(o, int) and o == 1)) else s
            for d, o, s in zip(full, out_shape, strides)]


def collapse_dims(out_shape: Shape, strides: list[list[Dim]]) -> tuple[list[Dim], list[list[Dim]]]:
    """Merge adjacent axes that are contiguous in every operand; drop size-1 axes.

    Fewer axes means less index arithmetic per element in the kernel.
    """
    dims: list[Dim] = []
    merged: list[list[Dim]] = [[] for _ in strides]
    for axis, d in enumerate(out_shape):
        if isinstance(d, int) and d == 1:
            continue
        if dims:
            # axis joins the previous one if, for every operand, stride[prev] == stride[axis] * d
            if all(m[-1] == s[axis] * d for m, s in zip(merged, strides)):
                dims[-1] = dims[-1] * d
                for m, s in zip(merged, strides):
                    m[-1] = s[axis]
                continue
        dims.append(d)
        for m, s in zip(merged, strides):
            m.append(s[axis])
    return dims, merged


def strided_index_params(out_shape: Shape, in_shapes: Sequence[Shape], names: Sequence[str]) -> tuple[dict, str]:
    """Params and WGSL code mapping a flat output index `i` to each input's element index.

    The code defines `var idx_<name>` for every operand; dims are params D0 (innermost) ...
    and strides <NAME>S0 ... so static ones are baked and dynamic ones are immediates.
    """
    strides = [broadcast_strides(s, out_shape) for s in in_shapes]
    dims, merged = collapse_dims(out_shape, strides)
    params: dict[str, Dim] = {}
    lines = [f"var idx_{n} = 0u;" for n in names]
    if all(m == contiguous_strides(dims) for m in merged):  # no broadcasting at all
        return params, "\n".join(f"let idx_{n} = i;" for n in names)
    lines.append("var rem = i;")
    for k, axis in enumerate(reversed(range(len(dims)))):
        params[f"D{k}"] = dims[axis]
        lines.append(f"let c{k} = rem % D{k}(); rem = rem / D{k}();")
        for n, m in zip(names, merged):
            if isinstance(m[axis], int) and m[axis] == 0:
                continue
            params[f"{n.upper()}S{k}"] = m[axis]
            lines.append(f"idx_{n} += c{k} * {n.upper()}S{k}();")
    return params, "\n".join(lines)


def binding_block(reads: list[tuple[str, str]], writes: list[tuple[str, str]]) -> str:
    """WGSL storage declarations, numbered in dispatch order (reads, then writes)."""
    lines = [f"@group(0) @binding({i}) var<storage, read> {name}: array<{ty}>;"
             for i, (name, ty) in enumerate(reads)]
    lines += [f"@group(0) @binding({len(reads) + i}) var<storage, read_write> {name}: array<{ty}>;"
              for i, (name, ty) in enumerate(writes)]
    return "\n".join(lines)


__all__ = ["binding_block", "broadcast_shapes", "broadcast_strides", "collapse_dims", "contiguous_strides", "numel",
           "strided_index_params"]
