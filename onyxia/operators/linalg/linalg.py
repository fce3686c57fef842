"""Linear-algebra operators: Einsum, Det.

An equation is parsed into labels: letters, plus one label per ellipsis dim (broadcast NumPy-
style across operands, right-aligned). Two plans:

- A two-operand contraction whose labels fall into groups laid out as a batched product —
  A = [batch, M.., K..] or [batch, K.., M..], B = [batch, K.., N..] or [batch, N.., K..],
  Y = [batch, M.., N..] ("bij,bjk->bik", "bhqd,bhkd->bhqk", "ij,jk->ik", "i,i->", "i,j->ij") —
  is a `Product` and runs on the tiled/gemv matmul kernels (onyxia.operators.matmul.matmul).
- Everything else (transposes, reductions, traces and diagonals, three or more operands) runs on
  shaders/linalg/einsum.wgsl: one thread per output element walks the product of the summed
  labels. Each operand's element offset is a sum of coordinate * stride; a label repeated in
  one term (a diagonal) has the sum of its positions' strides, a broadcast dim stride 0.
Dims and strides are params (immediates when symbolic), never shader defs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, numel
from onyxia.operators.base import MAX_TRIPS, FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import contiguous_strides, is_one, prefer_literal
from onyxia.operators.elementwise.elementwise import INT64_OVERFLOW
from onyxia.operators.matmul.matmul import Product, plan_product
from onyxia.operators.reduction.reduction import ACC_DTYPES, ReduceWalk, bound_of
from onyxia.plan import Step

Label = str | int  # a letter, or the index of an ellipsis dim counted from the right


@dataclass(frozen=True)
class Equation:
    terms: list[list[Label]]  # one label list per operand, in axis order
    output: list[Label]
    dims: dict[Label, Dim]  # the broadcast size of every label

    @property
    def summed(self) -> list[Label]:
        """Labels that are summed over, in first-appearance order."""
        seen = dict.fromkeys(label for term in self.terms for label in term)
        return [label for label in seen if label not in self.output]


def _split_term(term: str, rank: int | None, fail) -> list[Label]:
    """Labels of one term; with `rank`, the ellipsis expands to the dims left over."""
    if term.count("...") > 1 or "." in term.replace("...", ""):
        raise fail(f"term '{term}' has a malformed ellipsis")
    head, ellipsis, tail = term.partition("...")
    for ch in head + tail:
        if not ch.isalpha():
            raise fail(f"term '{term}' has an invalid label '{ch}'")
    if not ellipsis:
        if rank is not None and rank != len(term):
            raise fail(f"term '{term}' names {len(term)} axes but the operand has rank {rank}")
        return list(term)
    extra = 0 if rank is None else rank - len(head) - len(tail)
    if extra < 0:
        raise fail(f"term '{term}' names more axes than the operand's rank {rank}")
    return [*head, *range(extra - 1, -1, -1), *tail]


def parse_equation(equation: str, shapes: list[Shape], fail, same: Callable[[Dim, Dim], bool]) -> Equation:
    """Parse and check `equation` against the operand shapes; `fail(msg)` builds the error and
    `same(a, b)` (InferenceCtx.same_dim) says whether two sizes of one label agree."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(shapes):
        raise fail(f"equation '{equation}' has {len(inputs)} operand terms for {len(shapes)} inputs")
    terms = [_split_term(t, len(s), fail) for t, s in zip(inputs, shapes)]
    dims: dict[Label, Dim] = {}
    for term, shape in zip(terms, shapes):
        for label, d in zip(term, shape):
            prev = dims.get(label)
            if prev is None or is_one(prev):
                dims[label] = d
            elif not is_one(d):
                if not same(prev, d):
                    raise fail(f"label '{label}' has sizes {prev} and {d} in equation '{equation}'")
                dims[label] = prefer_literal(prev, d)
    ellipsis = sorted((label for label in dims if isinstance(label, int)), reverse=True)
    if arrow:
        if rhs.count("...") > 1:
            raise fail(f"output '{rhs}' has more than one ellipsis")
        # Ellipsis dims left out of an explicit output are summed over, as NumPy does.
        head, dots, tail = rhs.partition("...")
        output = [*_split_term(head, None, fail), *(ellipsis if dots else []), *_split_term(tail, None, fail)]
    else:  # implicit output: the ellipsis, then letters that appear once, alphabetically
        counts: dict[Label, int] = {}
        for term in terms:
            for label in term:
                counts[label] = counts.get(label, 0) + 1
        output = [*ellipsis, *sorted(label for label, c in counts.items() if c == 1 and isinstance(label, str))]
    if len(set(output)) != len(output):
        raise fail(f"output of '{equation}' repeats a label")
    for label in output:
        if label not in dims:
            raise fail(f"output label '{label}' of '{equation}' appears in no operand")
    return Equation(terms, output, dims)


@dataclass(frozen=True)
class ProductGroups:
    """A two-operand equation as a batched product: its labels grouped, and the operand layouts."""

    batch: list[Label]
    m: list[Label]
    n: list[Label]
    k: list[Label]  # summed
    trans_a: bool  # A is [batch, K.., M..]
    trans_b: bool  # B is [batch, N.., K..]


def _product_groups(eq: Equation) -> ProductGroups | None:
    """The batched-product view of a two-operand equation, or None when it has none."""
    if len(eq.terms) != 2:
        return None
    a, b = eq.terms
    if len(set(a)) != len(a) or len(set(b)) != len(b):
        return None
    out = eq.output
    batch = [x for x in out if x in a and x in b]
    m = [x for x in out if x in a and x not in b]
    n = [x for x in out if x in b and x not in a]
    k = [x for x in a if x in b and x not in out]
    if set(a) - set(out) - set(b) or set(b) - set(out) - set(a):
        return None  # a label summed within one operand only
    if not k and not (m and n):
        return None  # elementwise products: no contraction, no outer product
    if out != batch + m + n:
        return None
    k_b = [x for x in b if x in k]
    if k_b != k:
        return None
    if a == batch + m + k:
        trans_a = False
    elif a == batch + k + m:
        trans_a = True
    else:
        return None
    if b == batch + k + n:
        trans_b = False
    elif b == batch + n + k:
        trans_b = True
    else:
        return None
    return ProductGroups(batch, m, n, k, trans_a, trans_b)


def _walk_code(var: str, labels: list[Label], dims: dict[Label, Dim], strides: list[dict[Label, Dim]],
               prefix: str) -> tuple[dict[str, Dim], list[str]]:
    """WGSL accumulating `off<k> += coordinate * stride` for each operand k over the row-major walk
    of `labels` indexed by `var`. Params: <prefix>D<j> (dims) and <prefix><k>S<j> (strides)."""
    params: dict[str, Dim] = {}
    lines = [f"var rem_{prefix} = {var};"]
    live = [label for label in labels if not is_one(dims[label])]
    for j, label in enumerate(reversed(live)):
        if j == len(live) - 1:  # the outermost label takes what is left
            lines.append(f"let {prefix}c{j} = rem_{prefix};")
        else:
            params[f"{prefix}D{j}"] = dims[label]
            rem, dim = f"rem_{prefix}", f"{prefix}D{j}()"
            lines.append(f"let {prefix}c{j} = {rem} % {dim}; {rem} = {rem} / {dim};")
        for k, st in enumerate(strides):
            s = st.get(label, 0)
            if isinstance(s, int) and s == 0:
                continue
            params[f"{prefix}{k}S{j}"] = s
            lines.append(f"off{k} += {prefix}c{j} * {prefix}{k}S{j}();")
    return params, lines


class Einsum(Operator):
    op_type = "Einsum"

    def _equation(self, ctx: InferenceCtx) -> Equation:
        shapes = [ctx.input_shape(i) for i in range(ctx.num_inputs)]
        equation = ctx.attr("equation")
        if isinstance(equation, bytes):
            equation = equation.decode()
        return parse_equation(equation, shapes, ctx.fail, ctx.same_dim)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        if ctx.num_inputs < 1:
            raise ctx.fail("Einsum needs at least one input")
        dtype = ctx.input_dtype(0)
        if dtype.is_bool:
            raise ctx.fail("Einsum does not accept bool inputs", 0)
        for i in range(1, ctx.num_inputs):
            if ctx.input_dtype(i) != dtype:
                raise ctx.fail(f"dtype {ctx.input_dtype(i)} differs from input 0's {dtype}", i)
        eq = self._equation(ctx)
        return [(dtype, tuple(eq.dims[label] for label in eq.output))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        vals = ctx.numeric_values()
        if vals is None:
            return None
        equation = ctx.attr("equation")
        return [ctx.cast_output(np.einsum(equation.decode() if isinstance(equation, bytes) else equation, *vals))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        eq = self._equation(ctx)
        count = numel(ctx.output_shape(0))
        if isinstance(count, int) and count == 0:
            return []
        dtype = ctx.compute_type(ctx.input_dtype(0), "input 0")
        groups = _product_groups(eq)
        # A summed label of size 1 in one operand broadcasts: the product kernels cannot do that.
        if groups is not None and all(ctx.same_dim(ctx.input_shape(i)[eq.terms[i].index(x)], eq.dims[x])
                                      for x in groups.k for i in (0, 1)):
            return self._plan_product(ctx, eq, groups, dtype)
        return self._plan_generic(ctx, eq, dtype, count)

    def _plan_product(self, ctx: PlanCtx, eq: Equation, g: ProductGroups, dtype: str) -> list[Step]:
        sa, sb = ctx.input_shape(0), ctx.input_shape(1)
        nb = len(g.batch)
        return plan_product(ctx, Product(
            ctx.input(0), ctx.input(1), ctx.output(0), dtype,
            m=numel(eq.dims[x] for x in g.m), n=numel(eq.dims[x] for x in g.n),
            k=numel(eq.dims[x] for x in g.k), batch_a=tuple(sa[:nb]), batch_b=tuple(sb[:nb]),
            batch=tuple(eq.dims[x] for x in g.batch), trans_a=g.trans_a, trans_b=g.trans_b))

    def _plan_generic(self, ctx: PlanCtx, eq: Equation, dtype: str, count: Dim) -> list[Step]:
        strides: list[dict[Label, Dim]] = []
        for i, term in enumerate(eq.terms):
            shape = ctx.input_shape(i)
            st: dict[Label, Dim] = {}
            for label, d, s in zip(term, shape, contiguous_strides(shape)):
                if not is_one(d):  # size-1 axes broadcast: stride 0
                    st[label] = st.get(label, 0) + s
            strides.append(st)
        summed = eq.summed
        out_params, out_code = _walk_code("i", eq.output, eq.dims, strides, "O")
        red_params, red_code = _walk_code("r", summed, eq.dims, strides, "R")
        n = len(eq.terms)
        loads = [f"{dtype}(x{k}_load(off{k}))" for k in range(n)]
        checked = ctx.output_dtype(0) == dtypes.INT64  # int64 in i32: report leaving its range
        term = functools.reduce(lambda a, b: f"onyxia_checked_mul({a}, {b})", loads) if checked else " * ".join(loads)
        defs = {
            "T": dtype,
            "BASE": "\n    ".join([f"var off{k} = 0u;" for k in range(n)] + out_code),
            "OFFSETS": "\n        ".join([f"off{k} = base{k};" for k in range(n)] + red_code),
            "SAVE": "\n    ".join(f"let base{k} = off{k};" for k in range(n)),
            "ACC": f"onyxia_checked_add(acc, {term})" if checked else f"acc + {term}",
        }
        red = numel(eq.dims[x] for x in summed)
        params = {"COUNT": count, "RED": red, **out_params, **red_params}
        reads, reports = {f"x{i}": ctx.input(i) for i in range(n)}, INT64_OVERFLOW if checked else None
        if bound_of(red) <= MAX_TRIPS:
            return [ctx.dispatch("linalg/einsum.wgsl", label="einsum", defs=defs, params=params, reads=reads,
                                 writes={"y": ctx.output(0)}, workgroups=ctx.grid(count), reports=reports)]
        # A long (or symbolic) sum: partial sums of MAX_TRIPS terms, then their sum (reduce.wgsl).
        parts = (red + MAX_TRIPS - 1) // MAX_TRIPS
        partial = ctx.scratch(count * parts, ACC_DTYPES[dtype], "einsum_partial")
        add = "onyxia_checked_add(a, b)" if checked else "a + b"
        sum_defs: dict[str, object] = {"A": dtype, "INIT": f"{dtype}(0)", "MAP": "x", "COMBINE": add, "FINAL": "acc"}
        walk = ReduceWalk(ctx, "einsum_sum", reports, sum_defs, sum_defs, parts)
        return [ctx.dispatch("linalg/einsum.wgsl", label="einsum", defs={**defs, "CHUNK": MAX_TRIPS},
                             params={**params, "PARTS": (parts, "u32")}, reads=reads, writes={"y": partial},
                             workgroups=ctx.grid(count * parts), reports=reports)] + \
            walk.plan({"src": partial}, ctx.output(0), (parts, count), {0}, count, bound_of(red) // MAX_TRIPS + 1)


MAX_DET = 32  # matrix size Det's one-thread-per-matrix kernel takes (about N^3 / 3 steps each)


class Det(Operator):
    """Det of [*, N, N] float matrices (shaders/linalg/det.wgsl): LU with partial pivoting, as
    onnxruntime does; N must be static and at most MAX_DET."""

    op_type = "Det"

    def size(self, ctx: InferenceCtx) -> int:
        shape = ctx.input_shape(0)
        if len(shape) < 2 or not ctx.same_dim(shape[-1], shape[-2]):
            raise ctx.fail(f"expects square matrices [*, N, N], got {list(shape)}", 0)
        if not ctx.input_dtype(0).is_float:
            raise ctx.fail(f"expects float input, got {ctx.input_dtype(0)}", 0)
        n = ctx.literal(shape[-1] if isinstance(shape[-1], int) else shape[-2], "the matrix size", 0)
        if not 1 <= n <= MAX_DET:
            raise ctx.fail(f"matrix size {n} must be static and at most {MAX_DET} (one thread per matrix)", 0)
        return n

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        self.size(ctx)
        return [(ctx.input_dtype(0), tuple(ctx.input_shape(0)[:-2]))]

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        x = ctx.input_value(0)
        if x is None or x.dtype == object:
            return None
        return [ctx.cast_output(np.linalg.det(x.astype(np.float64)))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        n = self.size(ctx)
        count = numel(ctx.input_shape(0)[:-2])
        ctx.compute_type(ctx.input_dtype(0), "input")
        return [ctx.dispatch("linalg/det.wgsl", label="det", defs={"N": n}, params={"COUNT": count},
                             reads={"x": ctx.input(0)}, writes={"y": ctx.output(0)}, workgroups=ctx.grid(count))]


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(Einsum(), 12), (Det(), 11)]
