"""The window functions of STFT's callers: HannWindow, HammingWindow and BlackmanWindow, run as
their ONNX function bodies (operators/functions.py; a constant size folds them to a constant).
"""

from __future__ import annotations

from onyxia.operators.base import Operator
from onyxia.operators.functions import expanded


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [expanded("HannWindow"), expanded("HammingWindow"), expanded("BlackmanWindow")]


__all__ = ["operators"]
