"""Sequence and optional operators: registry rows for ops that never reach a kernel.

A sequence (or optional) is host-side bookkeeping: which element tensors it holds, known at
compile time. compiler/passes/sequences.py (SequenceLoweringPass) rewrites these ops into that
bookkeeping and plain tensor ops (SequenceAt into an Identity of the element, ConcatFromSequence
into a Concat, SplitToSequence into a Split, SequenceMap and Loops over sequences unrolled);
the elements stay on the device. An op left over names what the lowering needed and lacked.
"""

from __future__ import annotations

from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape
from onyxia.operators.base import InferenceCtx, Operator

SEQUENCE_OPS = ("SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceAt",
                "SequenceLength", "SplitToSequence", "ConcatFromSequence", "SequenceMap", "Optional",
                "OptionalHasElement", "OptionalGetElement")
SINCE = {"SequenceMap": 17, "Optional": 15, "OptionalHasElement": 15, "OptionalGetElement": 15}


class SequenceOp(Operator):
    """A sequence/optional op the lowering could not resolve at compile time."""

    def __init__(self, op_type: str):
        self.op_type = op_type

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        raise ctx.fail("sequences and optionals are resolved at compile time, and this one's structure (its "
                       "length, a position, a condition choosing it) is not known there; it must come from "
                       "constants or fed values the session can specialize on")


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(SequenceOp(op), SINCE.get(op, 11)) for op in SEQUENCE_OPS]
