"""Selection operators."""

from __future__ import annotations

from onyxia.operators.base import Operator


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return []
