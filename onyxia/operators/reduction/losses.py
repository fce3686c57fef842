"""The loss ops, run as their ONNX function bodies (operators/functions.py): a LogSoftmax, a
GatherElements of the targets' entries and a weighted reduction (this family's kernels).
"""

from __future__ import annotations

from onyxia.operators.base import Operator
from onyxia.operators.functions import expanded


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [expanded("NegativeLogLikelihoodLoss"),
            expanded("SoftmaxCrossEntropyLoss")]  # its body calls NegativeLogLikelihoodLoss: expanded in turn


__all__ = ["operators"]
