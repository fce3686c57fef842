"""Ops that run as their ONNX function body: one table, one class.

The ONNX spec defines many ops as functions of other ops (a fixed body, or a context-dependent
one built from the input types: NegativeLogLikelihoodLoss, RotaryEmbedding, ...). Where onyxia
has no kernel of its own for such an op, it registers a `FunctionOp` for it and
FunctionExpansionPass (compiler/passes/expansion.py) replaces each of its nodes by the body that
onnx builds for it, before shape inference; every op of the body then plans as usual.

The body comes from onnx itself (`onnx.inliner` with the op's schema), never from onyxia. An op
joins the table when every op its body uses is supported; LinearAttention's body, for one,
needs Scan and is not listed. A FunctionOp is registered from the first opset version whose
schema has a body.
"""

from __future__ import annotations

import functools

import onnx.defs

from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape
from onyxia.operators.base import InferenceCtx, Operator, PlanCtx
from onyxia.plan import Step

# (domain, op_type) of every op onyxia runs through its function body.
EXPANDED: tuple[tuple[str, str], ...] = (
    ("", "NegativeLogLikelihoodLoss"),
    ("", "SoftmaxCrossEntropyLoss"),  # its body calls NegativeLogLikelihoodLoss: expanded in turn
    ("", "HannWindow"),
    ("", "HammingWindow"),
    ("", "BlackmanWindow"),
    ("", "CenterCropPad"),
    ("", "RotaryEmbedding"),
    ("", "SwiGLU"),
    ("ai.onnx.preview", "FlexAttention"),  # score_mod / prob_mod subgraphs are inlined too
)


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


class FunctionOp(Operator):
    """An op without a kernel: FunctionExpansionPass replaces its nodes by their function body.

    Reaching `infer` means the pass did not run (a pipeline built without it).
    """

    def __init__(self, domain: str, op_type: str):
        self.domain, self.op_type = domain, op_type

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        raise ctx.fail("runs as its ONNX function body, which FunctionExpansionPass inserts before shape "
                       "inference; that pass is not in this pipeline")

    def plan(self, ctx: PlanCtx) -> list[Step]:
        raise AssertionError("a FunctionOp never reaches planning")


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(FunctionOp(domain, op), first_body_version(domain, op)) for domain, op in EXPANDED]


__all__ = ["EXPANDED", "FunctionOp", "operators"]
