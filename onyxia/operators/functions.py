"""Ops that run as a body of other ops: one class, FunctionOp, registered as rows of the
family it belongs to.

The ONNX spec defines many ops as functions of other ops (a fixed body, or a context-dependent
one built from the input types: NegativeLogLikelihoodLoss, RotaryEmbedding, ...). Where onyxia
has no kernel of its own for such an op, it registers a `FunctionOp` for it and
FunctionExpansionPass (compiler/passes/expansion.py) replaces each of its nodes by the body that
onnx builds for it, before shape inference; every op of the body then plans as usual.

That body comes from onnx itself (`onnx.inliner` with the op's schema), never from onyxia. An op
is registered so, with `expanded(op_type, domain)`, when every op its body uses is supported
(LinearAttention's needs Scan, a host LoopStep: operators/control/control.py); its row sits in
the `operators()` of its family's module (spectral/windows.py, reduction/losses.py,
attention/onnx_attention.py, ...), from the first opset version whose schema has a body.

Ops the spec does not define as functions can still be exact compositions of supported ops
(the quantized ops: integer products, then a requantization): a FunctionOp built with a
`decompose` function gives that body itself, as ONNX nodes written against a fixed opset
(operators/quantized/qlinear.py, normalization/lrn.py, ...). The same pass splices them in, so
constants fold through the body.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import onnx
import onnx.defs
import onnx.numpy_helper

from onyxia.errors import ShapeInferenceError, ValueRequiredError
from onyxia.ir.dtypes import DType
from onyxia.ir.graph import Node
from onyxia.ir.shapes import Dim, Shape
from onyxia.operators.base import InferenceCtx, Operator, PlanCtx
from onyxia.plan import Step

# The opset the decompositions written in onyxia (normalization/lrn.py, conv/col2im.py, ...) use.
BODY_OPSET = {"": 21}


def has_body(schema: onnx.defs.OpSchema) -> bool:
    return bool(schema.has_function or schema.has_context_dependent_function)


@functools.cache
def _body_versions() -> dict[tuple[str, str], list[int]]:
    versions: dict[tuple[str, str], list[int]] = {}
    for s in onnx.defs.get_all_schemas_with_history():
        if has_body(s):
            versions.setdefault(("" if s.domain == "ai.onnx" else s.domain, s.name), []).append(s.since_version)
    return versions


def first_body_version(domain: str, op_type: str) -> int:
    """The first opset version of `op_type` whose schema has a function body."""
    versions = _body_versions().get((domain, op_type))
    if not versions:
        raise ValueError(f"{domain or 'ai.onnx'}::{op_type} has no function body in onnx {onnx.__version__}")
    return min(versions)


@dataclass(frozen=True)
class Call:
    """A node as a decomposition sees it: its inputs' dtypes and shapes (None where absent)."""

    node: Node
    dtypes: tuple[DType | None, ...]
    shapes: tuple[Shape | None, ...]
    values: tuple[np.ndarray | None, ...]  # constant inputs (initializers, folded values)
    ctx: InferenceCtx | None = None  # the node's inference context: the compile's dims

    def literal(self, d: Dim, what: str, input: int | None = None) -> int:
        """`d` as an int where the body needs one (InferenceCtx.literal: a symbol with a value is one)."""
        if isinstance(d, int):
            return d
        if self.ctx is None:
            raise self.fail(f"{what} must be static, got {d}", input)
        return self.ctx.literal(d, what, input)

    def has(self, i: int) -> bool:
        return i < len(self.dtypes) and self.dtypes[i] is not None

    def input(self, i: int) -> str:
        return self.node.inputs[i] or ""

    def output(self, i: int = 0) -> str:
        return self.node.outputs[i]

    def attr(self, name: str, default: Any = None) -> Any:
        return self.node.attributes.get(name, default)

    def require_value(self, i: int, what: str) -> np.ndarray:
        """Input i's value; else a ValueRequiredError (FunctionExpansionPass adds the graph inputs it
        depends on, so that InferenceSession can specialize on their fed values)."""
        value = self.values[i] if i < len(self.values) else None
        if value is None or value.dtype == object:
            raise ValueRequiredError(f"{what} must be a constant (an initializer or computable at compile time)",
                                     node=self.node.name, op_type=self.node.op_type, input_index=i,
                                     tensor=self.input(i))
        return value

    def fail(self, message: str, input: int | None = None) -> ShapeInferenceError:
        return ShapeInferenceError(message, node=self.node.name, op_type=self.node.op_type, input_index=input)


@dataclass(frozen=True)
class Decomposition:
    """A body of ONNX nodes reading the node's inputs and writing its outputs (other tensor
    names are the body's own), interpreted at `opsets` whatever the model imports."""

    nodes: Sequence[onnx.NodeProto]
    opsets: dict[str, int]


Decompose = Callable[[Call], Decomposition]


class BodyBuilder:
    """Collects a decomposition's nodes; internal tensors get short names (the pass prefixes them)."""

    def __init__(self, call: Call, opsets: dict[str, int]):
        self.call, self.opsets = call, opsets
        self.nodes: list[onnx.NodeProto] = []

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs: Any) -> str:
        """Append a node with one output (named `out`, or a fresh name) and return that name."""
        name = out or f"t{len(self.nodes)}"
        self.nodes.append(onnx.helper.make_node(op_type, list(inputs), [name], **attrs))
        return name

    def const(self, value: Any, dtype: Any = np.int64) -> str:
        return self.op("Constant", value=onnx.numpy_helper.from_array(np.asarray(value, dtype)))

    def done(self) -> Decomposition:
        return Decomposition(self.nodes, self.opsets)


class FunctionOp(Operator):
    """An op without a kernel: FunctionExpansionPass replaces its nodes by their body, the
    one `decompose` builds or else the ONNX schema's function.

    Reaching `infer` means the pass did not run (a pipeline built without it).
    """

    def __init__(self, domain: str, op_type: str, decompose: Decompose | None = None):
        self.domain, self.op_type, self.decompose = domain, op_type, decompose

    def runs_as_function(self, node: Node) -> bool:
        return True

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        raise ctx.fail("runs as its ONNX function body, which FunctionExpansionPass inserts before shape "
                       "inference; that pass is not in this pipeline")

    def plan(self, ctx: PlanCtx) -> list[Step]:
        raise AssertionError("a FunctionOp never reaches planning")


def expanded(op_type: str, domain: str = "") -> tuple[Operator, int]:
    """The registry row of an op that runs as its ONNX function body: a FunctionOp, from the
    first opset version whose schema has that body."""
    return FunctionOp(domain, op_type), first_body_version(domain, op_type)


__all__ = ["BODY_OPSET", "BodyBuilder", "Call", "Decompose", "Decomposition", "FunctionOp", "expanded",
           "first_body_version"]
