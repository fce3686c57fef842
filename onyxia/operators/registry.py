"""OperatorRegistry: {(domain, op_type): {since_version: Operator}}, highest version ≤ opset wins;
`resolve_operator` / `check_supported`: the operator of a graph's node, at the node's opset."""

from __future__ import annotations

from typing import Iterator

from onyxia.errors import UnsupportedOperatorError
from onyxia.ir.graph import OPSETS_META, IrGraph, Node
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


def resolve_operator(graph: IrGraph, registry: OperatorRegistry, node: Node) -> Operator | None:
    """The operator `registry` runs `node` with, at the opset the node was written for (None: none)."""
    # A domain the model does not import resolves to the newest version (None).
    opset = node.meta.get(OPSETS_META, {}).get(node.domain, graph.opsets.get(node.domain))
    return registry.get(node.op_type, node.domain, opset)


def check_supported(graph: IrGraph, registry: OperatorRegistry) -> None:
    """Raise one error listing every unsupported op and its nodes (in subgraphs too)."""
    missing: dict[tuple[str, str], list[str]] = {}
    for g in (graph, *graph.all_subgraphs()):
        for node in g.nodes:
            if resolve_operator(g, registry, node) is None:
                missing.setdefault((node.domain, node.op_type), []).append(node.name)
    if missing:
        raise UnsupportedOperatorError(missing)
