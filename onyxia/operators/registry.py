"""OperatorRegistry: {(domain, op_type): {since_version: Operator}}, highest version ≤ opset wins."""

from __future__ import annotations

from typing import Iterator

from onyxia.operators.base import Operator


class OperatorRegistry:
    def __init__(self) -> None:
        self._ops: dict[tuple[str, str], dict[int, Operator]] = {}

    def register(self, op: Operator, since_version: int = 1, *, op_type: str | None = None,
                 domain: str | None = None) -> OperatorRegistry:
        """Add `op` for its (domain, op_type) from opset `since_version` on; chains."""
        key = (op.domain if domain is None else domain, op_type or op.op_type)
        if not key[1]:
            raise ValueError(f"{op!r} has no op_type")
        self._ops.setdefault(key, {})[since_version] = op
        return self

    def get(self, op_type: str, domain: str = "", opset: int | None = None) -> Operator | None:
        versions = self._ops.get(("" if domain == "ai.onnx" else domain, op_type))
        if not versions:
            return None
        eligible = [v for v in versions if opset is None or v <= opset]
        return versions[max(eligible)] if eligible else None

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._ops

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(sorted(self._ops))

    def __len__(self) -> int:
        return len(self._ops)

    def copy(self) -> OperatorRegistry:
        dup = OperatorRegistry()
        dup._ops = {k: dict(v) for k, v in self._ops.items()}
        return dup
