"""Hypothesis strategies for random small ONNX graphs over broadcasting, partly symbolic shapes.

A dim is a monomial: an integer coefficient times a product of symbols ("a", "b"), so shapes stay
exact under the rewrites the generator uses (a Reshape that merges dims multiplies them). Two dims
broadcast when they are equal or one is the literal 1; the generator never relies on a symbol's
value, so every graph is valid for any assignment of the symbols, which is what
update_dimensions explores.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import helper as h

from tests.helpers import make_model

SYMBOLS = ("a", "b")


@dataclass(frozen=True, order=True)
class Mono:
    """coef * prod(symbols): one dimension."""

    coef: int
    syms: tuple[str, ...] = ()

    def __mul__(self, other: Mono) -> Mono:
        return Mono(self.coef * other.coef, tuple(sorted(self.syms + other.syms)))

    @property
    def is_one(self) -> bool:
        return self.coef == 1 and not self.syms

    def onnx_dim(self) -> int | str:
        if not self.syms:
            return self.coef
        return " * ".join(([str(self.coef)] if self.coef != 1 else []) + list(self.syms))

    def value(self, dims: dict[str, int]) -> int:
        out = self.coef
        for s in self.syms:
            out *= dims[s]
        return out


ONE = Mono(1)
Shape = tuple[Mono, ...]


def broadcast(a: Shape, b: Shape) -> Shape | None:
    """numpy broadcasting over monomials; None when the shapes need a symbol's value to agree."""
    rank = max(len(a), len(b))
    a, b = (ONE,) * (rank - len(a)) + a, (ONE,) * (rank - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x == y or y.is_one:
            out.append(x)
        elif x.is_one:
            out.append(y)
        else:
            return None
    return tuple(out)


UNARY = ["Relu", "Neg", "Abs", "Sigmoid", "Tanh", "Sin", "Cos", "Erf", "Softsign", "Floor", "Ceil",
         "Round", "Sign", "Identity", "LeakyRelu", "Elu", "HardSigmoid"]  # no Exp: chains overflow to inf
BINARY = ["Add", "Sub", "Mul", "Max", "Min"]
REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceSumSquare"]
# int32 graphs: ops onnxruntime implements for int32 (wrapping arithmetic on both sides).
INT_UNARY = ["Relu", "Neg", "Abs", "Sign", "Identity"]
INT_REDUCE = ["ReduceSum", "ReduceMax", "ReduceMin"]


@dataclass
class GraphBuilder:
    """Accumulates nodes and initializers; tensors are (name, shape); all of one dtype."""

    inputs: list[tuple[str, Shape]]
    dtype: type = np.float32
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: dict[str, np.ndarray] = field(default_factory=dict)
    tensors: list[tuple[str, Shape]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tensors = list(self.inputs)

    def new(self, shape: Shape) -> str:
        name = f"t{len(self.nodes)}"
        self.tensors.append((name, shape))
        return name

    def const(self, values: list[int]) -> str:
        name = f"c{len(self.inits)}"
        self.inits[name] = np.asarray(values, dtype=np.int64)
        return name

    def model(self, outputs: list[str]) -> onnx.ModelProto:
        inputs = [(n, self.dtype, [d.onnx_dim() for d in s]) for n, s in self.inputs]
        return make_model(self.nodes, inputs, outputs, self.inits, opset=18)


@st.composite
def base_shape(draw) -> Shape:
    rank = draw(st.integers(1, 4))
    pool = [Mono(1), Mono(2), Mono(3), Mono(4), Mono(1, ("a",)), Mono(1, ("b",))]
    return tuple(draw(st.sampled_from(pool)) for _ in range(rank))


@st.composite
def input_shapes(draw, base: Shape) -> list[Shape]:
    """1-3 inputs that broadcast to `base`: suffixes of it with some dims set to 1."""
    shapes = [base]
    for _ in range(draw(st.integers(0, 2))):
        start = draw(st.integers(0, len(base) - 1))
        shapes.append(tuple(ONE if draw(st.booleans()) and draw(st.booleans()) else d for d in base[start:]))
    return shapes


def _pick(draw, g: GraphBuilder) -> tuple[str, Shape]:
    # Half the time the newest tensor, so chains grow deep rather than wide.
    if draw(st.booleans()):
        return g.tensors[-1]
    return draw(st.sampled_from(g.tensors))


@st.composite
def add_op(draw, g: GraphBuilder, families: tuple[str, ...]) -> None:
    integer = g.dtype == np.int32
    family = draw(st.sampled_from(families))
    if integer and family in ("softmax", "cumsum"):
        family = "unary"
    x, xs = _pick(draw, g)
    if family == "unary":
        op = draw(st.sampled_from(INT_UNARY if integer else UNARY))
        out = g.new(xs)
        g.nodes.append(h.make_node(op, [x], [out]))
    elif family == "binary":
        y, ys = _pick(draw, g)
        shape = broadcast(xs, ys)
        if shape is None:
            y, ys = x, xs
            shape = xs
        op = draw(st.sampled_from(BINARY + ["Where"]))
        out = g.new(shape)
        if op == "Where":
            cond = f"cond{len(g.nodes)}"
            g.nodes.append(h.make_node("Greater", [x, y], [cond]))
            g.nodes.append(h.make_node("Where", [cond, x, y], [out]))
        else:
            g.nodes.append(h.make_node(op, [x, y], [out]))
    elif family == "reduce":
        op = draw(st.sampled_from(INT_REDUCE if integer else REDUCE))
        axes = sorted(draw(st.sets(st.integers(0, len(xs) - 1), min_size=1, max_size=len(xs))))
        keep = draw(st.booleans()) or len(axes) == len(xs)
        shape = tuple(ONE if i in axes else d for i, d in enumerate(xs)) if keep else \
            tuple(d for i, d in enumerate(xs) if i not in axes)
        out = g.new(shape)
        g.nodes.append(h.make_node(op, [x, g.const(axes)], [out], keepdims=int(keep)))
    elif family == "softmax":
        axis = draw(st.integers(-len(xs), len(xs) - 1))
        out = g.new(xs)
        g.nodes.append(h.make_node(draw(st.sampled_from(["Softmax", "LogSoftmax"])), [x], [out], axis=axis))
    elif family == "reshape":
        kind = draw(st.sampled_from(["flatten", "merge_tail", "transpose", "unsqueeze", "squeeze", "split_last"]))
        if kind == "flatten" or (kind == "merge_tail" and len(xs) < 2):
            merged = ONE
            for d in xs:
                merged = merged * d
            shape, target = (merged,), [-1]
        elif kind == "merge_tail":
            keep = draw(st.integers(1, len(xs) - 1))
            merged = ONE
            for d in xs[keep:]:
                merged = merged * d
            shape, target = xs[:keep] + (merged,), [0] * keep + [-1]
        elif kind == "split_last" and not xs[-1].syms and xs[-1].coef in (4, 6, 8, 9, 12, 16):
            p = 2 if xs[-1].coef % 2 == 0 else 3
            shape, target = xs[:-1] + (Mono(p), Mono(xs[-1].coef // p)), [0] * (len(xs) - 1) + [p, -1]
        elif kind == "transpose":
            perm = draw(st.permutations(range(len(xs))))
            out = g.new(tuple(xs[i] for i in perm))
            g.nodes.append(h.make_node("Transpose", [x], [out], perm=list(perm)))
            return
        elif kind == "unsqueeze" and len(xs) < 5:
            axis = draw(st.integers(0, len(xs)))
            out = g.new(xs[:axis] + (ONE,) + xs[axis:])
            g.nodes.append(h.make_node("Unsqueeze", [x, g.const([axis])], [out]))
            return
        elif kind == "squeeze" and any(d.is_one for d in xs) and len(xs) > 1:
            axis = next(i for i, d in enumerate(xs) if d.is_one)
            out = g.new(xs[:axis] + xs[axis + 1:])
            g.nodes.append(h.make_node("Squeeze", [x, g.const([axis])], [out]))
            return
        else:
            out = g.new(xs)
            g.nodes.append(h.make_node("Identity", [x], [out]))
            return
        out = g.new(shape)
        g.nodes.append(h.make_node("Reshape", [x, g.const(target)], [out]))
    elif family in ("slice", "pad", "gather"):
        static_axes = [i for i, d in enumerate(xs) if not d.syms]
        if not static_axes:
            out = g.new(xs)
            g.nodes.append(h.make_node("Identity", [x], [out]))
            return
        axis = draw(st.sampled_from(static_axes))
        n = xs[axis].coef
        if family == "slice" and n > 0:
            step = draw(st.sampled_from([1, 1, 2, -1, -2]))
            a, b = sorted(draw(st.lists(st.integers(-n - 1, n + 1), min_size=2, max_size=2)))
            start, end = (a, b) if step > 0 else (b, a)
            length = len(range(*slice(start, end, step).indices(n)))
            if length == 0:  # keep shapes non-empty: a zero-length slice ends the chain's interest
                start, end, step, length = 0, n, 1, n
            out = g.new(xs[:axis] + (Mono(length),) + xs[axis + 1:])
            g.nodes.append(h.make_node("Slice", [x, g.const([start]), g.const([end]), g.const([axis]),
                                       g.const([step])], [out]))
        elif family == "pad":
            before, after = draw(st.integers(0, 2)), draw(st.integers(0, 2))
            pads = [0] * (2 * len(xs))
            pads[axis], pads[len(xs) + axis] = before, after
            mode = draw(st.sampled_from(["constant", "edge", "reflect"] if n > max(before, after) else ["constant"]))
            out = g.new(xs[:axis] + (Mono(n + before + after),) + xs[axis + 1:])
            g.nodes.append(h.make_node("Pad", [x, g.const(pads)], [out], mode=mode))
        else:
            count = draw(st.integers(1, 4))
            indices = draw(st.lists(st.integers(-n, n - 1), min_size=count, max_size=count)) if n else [0]
            out = g.new(xs[:axis] + (Mono(count),) + xs[axis + 1:])
            g.nodes.append(h.make_node("Gather", [x, g.const(indices)], [out], axis=axis))
    elif family == "matmul":
        k = xs[-1]
        if k.syms or integer:
            out = g.new(xs)
            g.nodes.append(h.make_node("Identity", [x], [out]))
            return
        n = draw(st.integers(1, 5))
        name = f"w{len(g.inits)}"
        g.inits[name] = np.linspace(-1, 1, k.coef * n, dtype=np.float32).reshape(k.coef, n)
        out = g.new(xs[:-1] + (Mono(n),))
        g.nodes.append(h.make_node("MatMul", [x, name], [out]))
    elif family == "cumsum":
        axis = draw(st.integers(-len(xs), len(xs) - 1))
        out = g.new(xs)
        g.nodes.append(h.make_node("CumSum", [x, g.const([axis])], [out], exclusive=int(draw(st.booleans())),
                                   reverse=int(draw(st.booleans()))))
    elif family == "clip":
        lo, hi = sorted(draw(st.lists(st.integers(-3, 3), min_size=2, max_size=2)))
        name = f"clip{len(g.inits)}"
        g.inits[name + "_lo"], g.inits[name + "_hi"] = (np.array(lo, dtype=g.dtype), np.array(hi, dtype=g.dtype))
        out = g.new(xs)
        g.nodes.append(h.make_node("Clip", [x, name + "_lo", name + "_hi"], [out]))
    elif family == "concat":
        axis = draw(st.integers(0, len(xs) - 1))
        out = g.new(xs[:axis] + (xs[axis] * Mono(2),) + xs[axis + 1:])
        g.nodes.append(h.make_node("Concat", [x, x], [out], axis=axis))
    elif family == "expand":
        y, ys = _pick(draw, g)
        shape = broadcast(xs, ys)
        if shape is None:
            y, shape = x, xs
        shape_of = f"shape{len(g.nodes)}"
        g.nodes.append(h.make_node("Shape", [y], [shape_of]))
        out = g.new(shape)
        g.nodes.append(h.make_node("Expand", [x, shape_of], [out]))
    else:
        raise AssertionError(family)


@dataclass
class Case:
    model: onnx.ModelProto
    input_shapes: list[Shape]
    dims_sequence: list[dict[str, int]]  # compile with the first, then update_dimensions to each
    dtype: type = np.float32
    static: tuple[str, ...] = ()  # symbols baked into the shaders (a change recompiles them)

    def feeds(self, dims: dict[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
        out = {}
        for vi, shape in zip(self.model.graph.input, self.input_shapes):
            size = [d.value(dims) for d in shape]
            out[vi.name] = (rng.integers(-4, 5, size=size).astype(np.int32) if self.dtype == np.int32
                            else rng.uniform(-2, 2, size=size).astype(np.float32))
        return out


@st.composite
def graphs(draw, families: tuple[str, ...], max_ops: int = 6, max_updates: int = 3) -> Case:
    base = draw(base_shape())
    shapes = draw(input_shapes(base))
    dtype = np.int32 if draw(st.integers(0, 4)) == 0 else np.float32  # one graph in five is int32
    g = GraphBuilder([(f"x{i}", s) for i, s in enumerate(shapes)], dtype)
    for _ in range(draw(st.integers(1, max_ops))):
        draw(add_op(g, families))
    produced = [t for t in g.tensors if t[0].startswith("t")]
    outputs = [produced[-1][0]]
    if len(produced) > 1 and draw(st.booleans()):
        extra = draw(st.sampled_from(produced[:-1]))[0]
        outputs.append(extra)
    used = {s for shape in shapes for d in shape for s in d.syms}
    # Zero-size dims too, except where a Reshape's -1 would be ambiguous (onnxruntime refuses it).
    low = 1 if any(n.op_type == "Reshape" for n in g.nodes) else 0
    dim_values = st.fixed_dictionaries({s: st.integers(low, 5) for s in sorted(used)})
    sequence = draw(st.lists(dim_values, min_size=1, max_size=1 + max_updates))
    static = tuple(sorted(draw(st.sets(st.sampled_from(sorted(used))))) if used else ())
    return Case(g.model(outputs), shapes, sequence, dtype, static)
