"""Helpers shared by operator families: broadcasting, strides, generated index and binding code."""

from __future__ import annotations

from typing import Callable, Sequence

from onyxia.ir.shapes import Dim, Shape, numel, shape_str


def is_one(d: Dim) -> bool:
    return isinstance(d, int) and d == 1


def is_zero(d: Dim) -> bool:
    return isinstance(d, int) and d == 0


def ceil_div(a: Dim, b: int) -> Dim:
    """a / b rounded up; `a` may be symbolic (the expression stays exact for every value)."""
    return (a + b - 1) // b


def prefer_literal(a: Dim, b: Dim) -> Dim:
    """Of two dims known to be equal, the literal one if either is: it can be baked into shaders."""
    return b if isinstance(b, int) and not isinstance(a, int) else a


def broadcast_shapes(shapes: Sequence[Shape], fail: Callable[[str], Exception],
                     same: Callable[[Dim, Dim], bool], show: Callable[[Dim], str] = str) -> Shape:
    """NumPy broadcasting over int | SymDim dims. `fail(msg)` builds the error to raise;
    `show(d)` writes a dim in it (InferenceCtx adds a symbolic dim's value).

    Two dims other than 1 broadcast when `same(a, b)` accepts them as one dim
    (InferenceCtx.same_dim: equal, or equal in value at compile time, an assumption the runtime
    re-checks); the result keeps the literal of the two.
    """
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for axis in range(rank):
        dims = [s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0]
        result: Dim = 1
        for d in dims:
            if is_one(d):
                continue
            if is_one(result):
                result = d
            elif same(result, d):
                result = prefer_literal(result, d)
            else:
                raise fail(f"shapes {', '.join(shape_str(s) for s in shapes)} cannot be broadcast "
                           f"(axis {axis}: {show(result)} vs {show(d)})")
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


__all__ = ["broadcast_shapes", "broadcast_strides", "ceil_div", "collapse_dims", "contiguous_strides",
           "is_one", "is_zero", "numel", "prefer_literal", "strided_index_params"]
