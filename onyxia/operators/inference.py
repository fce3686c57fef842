"""The contexts operators infer and fold with: InferenceCtx (a node's inputs, attributes and the
compile's dims) and FoldCtx (its input values). operators/base.py re-exports both."""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

import numpy as np

from onyxia.errors import ShapeInferenceError, ValueRequiredError
from onyxia.ir.dim_env import DimEnv
from onyxia.ir.dtypes import DType
from onyxia.ir.graph import IrGraph, Node, TensorDef
from onyxia.ir.provenance import symbol_inputs, value_sources
from onyxia.ir.shapes import Dim, Shape, SymDim, dim_symbols
from onyxia.operators.common import broadcast_shapes
from onyxia.plan import Step

_REQUIRED = object()

class SubgraphServices(Protocol):
    """The compiler's side of operators owning subgraphs (If arms, Loop and Scan bodies): operators/
    never imports compiler/, so the compiler implements this (compiler/subgraphs.py) and passes it
    in explicitly, to InferenceCtx and to PlanState (operators/base.py); operators call ctx.infer/plan_subgraph."""

    def expand_subgraph(self, graph: IrGraph) -> object:
        """Replace `graph`'s function ops by their bodies, as FunctionExpansionPass does the graph's."""

    def infer_subgraph(self, graph: IrGraph, inputs: Sequence[tuple[DType, Shape]]) -> list[tuple[DType, Shape]]:
        """Type `graph`'s inputs `inputs`, expand, infer (and fold) its nodes; its outputs' types."""

    def plan_subgraph(self, graph: IrGraph, state: Any) -> list[Step]:
        """The steps of `graph`'s live, unfolded nodes planned into `state` (its tensors join it)."""


class InferenceCtx:
    """What an operator sees of one node: its inputs, attributes and the compile's dims (`env`)."""

    def __init__(self, graph: IrGraph, node: Node, env: DimEnv, subgraphs: SubgraphServices | None = None):
        self.graph = graph
        self.node = node
        self.env = env
        self.subgraphs = subgraphs

    def infer_subgraph(self, attr: str, inputs: Sequence[tuple[DType, Shape]] = ()) -> list[tuple[DType, Shape]]:
        """The output types of the subgraph in attribute `attr`, its inputs typed `inputs`."""
        graph = self.attr(attr)
        if not isinstance(graph, IrGraph):
            raise self.fail(f"attribute '{attr}' must be a graph")
        if self.subgraphs is None:
            raise self.fail("this node has subgraphs; infer it with the compiler's ShapeInferencePass")
        if len(inputs) != len(graph.inputs):
            raise self.fail(f"attribute '{attr}': the subgraph takes {len(graph.inputs)} inputs, the node gives "
                            f"it {len(inputs)}")
        return self.subgraphs.infer_subgraph(graph, inputs)

    @property
    def opset(self) -> int:
        return self.graph.opset_of(self.node)

    @property
    def num_inputs(self) -> int:
        return len(self.node.inputs)

    def has_input(self, i: int) -> bool:
        return i < len(self.node.inputs) and self.node.inputs[i] is not None

    def fail(self, message: str, input: int | None = None) -> ShapeInferenceError:
        """An error naming this node, its op type and (optionally) the input at fault."""
        return ShapeInferenceError(message, node=self.node.name, op_type=self.node.op_type, input_index=input)

    def literal(self, d: Dim, what: str, input: int | None = None, expected: int | None = None) -> int:
        """`d` as an int, for a rule that needs a literal: a channel count, a group's size, a
        head size, a Slice step. Every such rule asks here, so a symbol with a value (compile
        dims, InferenceSession feeds) is one everywhere: its value is used and `d = value`
        becomes one of the plan's constraints (DimEnv.literal), which update_dimensions holds the
        plan to. Otherwise a ValueRequiredError names the symbols and the feeds that would give
        them a value; `expected` is the value the rule would accept (Conv: the weights' C)."""
        return self.literals([d], what, input, expected, one=True)[0]

    def literals(self, values: Sequence[Dim], what: str, input: int | None = None,
                 expected: int | None = None, one: bool = False) -> list[int]:
        """`values` as ints, each as `literal` takes it (`one`: the error shows a single value)."""
        found = [self.env.literal(v, self.node.name, what) for v in values]
        if all(v is not None for v in found):
            return found  # type: ignore[return-value]
        unknown = [v for v, f in zip(values, found) if f is None]
        symbols = frozenset(s for v in unknown for s in dim_symbols(v))
        counted = symbols & self.env.data_symbols.keys()
        hints = []
        for s in sorted(symbols - counted):
            value = expected if expected is not None and [str(v) for v in unknown] == [s] else "N"
            feeds = symbol_inputs(self.graph, s)
            hints.append(f"pass dims={{'{s}': {value}}}" + (f" or feed {', '.join(feeds)}" if feeds else ""))
        if counted:
            hints.append(f"{', '.join(sorted(counted))}: counted from the data while the model runs")
        shown = f"a literal, got {values[0]}" if one else f"literal integers, got {[str(v) for v in values]}"
        name = self.node.inputs[input] if input is not None and self.has_input(input) else ""
        raise ValueRequiredError(f"{what} must be {shown}, which has no value here "
                                 f"({'; '.join(hints)})", node=self.node.name, op_type=self.node.op_type,
                                 input_index=input, tensor=name or "", symbols=symbols)

    def require_ints(self, values: Sequence[Dim], what: str, input: int | None = None) -> list[int]:
        """`values` (a Slice step or Squeeze axis computed from a dim) as plain ints: `literals`."""
        return self.literals(values, what, input)

    def input_tensor(self, i: int) -> TensorDef:
        if not self.has_input(i):
            raise self.fail("required input is missing", i)
        return self.graph.tensor(self.node.inputs[i])  # type: ignore[arg-type]

    def input_shape(self, i: int) -> Shape:
        t = self.input_tensor(i)
        if t.shape is None:
            raise self.fail(f"shape of '{t.name}' is not known", i)
        return t.shape

    def input_dtype(self, i: int) -> DType:
        t = self.input_tensor(i)
        if t.dtype is None:
            raise self.fail(f"dtype of '{t.name}' is not known", i)
        return t.dtype

    def input_rank(self, i: int) -> int:
        return len(self.input_shape(i))

    def input_value(self, i: int) -> np.ndarray | None:
        return self.input_tensor(i).value if self.has_input(i) else None

    def require_value(self, i: int, what: str = "input") -> np.ndarray:
        value = self.input_value(i)
        if value is None:
            name = self.node.inputs[i] if self.has_input(i) else ""
            sources, symbols = value_sources(self.graph, name) if name else (frozenset(), frozenset())
            raise ValueRequiredError(
                f"{what} ('{name}') must be a constant (an initializer or computable at compile time)",
                node=self.node.name, op_type=self.node.op_type, input_index=i, tensor=name or "",
                sources=sources, symbols=symbols)
        return value

    def require_dims(self, i: int, what: str = "shape input") -> list[Dim]:
        """A constant 1-D integer tensor as a list of dims (entries may be symbolic)."""
        value = self.require_value(i, what)
        return [d if isinstance(d, SymDim) else int(d) for d in np.asarray(value).reshape(-1).tolist()]

    def attr(self, name: str, default: Any = _REQUIRED) -> Any:
        if name in self.node.attributes:
            return self.node.attributes[name]
        if default is _REQUIRED:
            raise self.fail(f"attribute '{name}' is required")
        return default

    def broadcast(self, shapes: Sequence[Shape]) -> Shape:
        """NumPy broadcasting of `shapes`, failing with this node's name."""
        return broadcast_shapes(shapes, self.fail, self.same_dim, self.show_dim)

    def show_dim(self, d: Dim) -> str:
        """A dim for an error message: a symbolic one with its value for the dims given, which is
        what made two expressions differ ("(x + 1) // 2 = 3")."""
        value = self.env.value(d) if isinstance(d, SymDim) else None
        return str(d) if value is None else f"{d} = {value}"

    def same_dim(self, a: Dim, b: Dim) -> bool:
        """Whether dims `a` and `b` are one dim: every shape check comparing dims uses this.

        Equal dims are. A symbol whose value is known is as good as a literal: `kv_cache_dim`
        given as 64 matches 64, and two names of one length (input_ids [batch, seq],
        attention_mask [batch, mask_seq]) match when their values agree. Such an assumption is
        recorded in the plan's constraints and re-checked by every update_dimensions, so dims
        that break it fail clearly instead of computing garbage.
        """
        return self.env.assume_equal(a, b, self.node.name)

    def same_shape(self, a: Shape, b: Shape) -> bool:
        """Same rank and `same_dim` on every axis."""
        return len(a) == len(b) and all(self.same_dim(x, y) for x, y in zip(a, b))

    def axis(self, value: int, rank: int, what: str = "axis") -> int:
        """Normalize a possibly negative axis against `rank`, with a clear error."""
        if not -rank <= value < max(rank, 1):
            raise self.fail(f"{what} {value} is out of range for rank {rank}")
        return value % rank if rank else 0


class FoldCtx(InferenceCtx):
    def output_dtype(self, i: int = 0) -> DType:
        dtype = self.graph.tensor(self.node.outputs[i]).dtype
        assert dtype is not None, "fold runs after inference"
        return dtype

    def values(self) -> list[np.ndarray | None]:
        return [self.input_value(i) for i in range(self.num_inputs)]

    def numeric_values(self) -> list[np.ndarray | None] | None:
        """Input values, or None if any present input is unknown or symbolic."""
        vals = self.values()
        for i, v in enumerate(vals):
            if self.has_input(i) and (v is None or v.dtype == object):
                return None
        return vals

    def unary_fold(self, fn: Callable[[np.ndarray], np.ndarray],
                   symbolic: bool = False) -> list[np.ndarray | None] | None:
        """fn of input 0's value; of symbolic dims too where `symbolic` (Neg of a length: T5's
        `-seq` Slice start)."""
        vals = self.values()
        if not vals or vals[0] is None:
            return None
        if vals[0].dtype == object:
            return [np.asarray(fn(vals[0]), dtype=object)] if symbolic else None
        return [self.cast_output(fn(vals[0]))]

    def binary_fold(self, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> list[np.ndarray | None] | None:
        vals = self.values()
        if any(v is None for v in vals[:2]):
            return None
        a, b = vals[0], vals[1]
        if a.dtype == object or b.dtype == object:  # symbolic shape arithmetic
            try:
                return [np.asarray(fn(a, b), dtype=object)]
            except TypeError:
                return None
        return [self.cast_output(fn(a, b))]

    def cast_output(self, value: Any, i: int = 0) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(value).astype(self.output_dtype(i).numpy, copy=False)


__all__ = ["FoldCtx", "InferenceCtx", "SubgraphServices"]
