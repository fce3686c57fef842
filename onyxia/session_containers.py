"""Sequence and optional graph inputs and outputs of an InferenceSession (onyxia/session.py).

A fed sequence [a, b] of input "s" becomes the tensor inputs "s.0", "s.1" and a SequenceConstruct
producing "s" (an optional: an Optional node, empty for None); the compiler lowers the rest, and
outputs come back assembled as onnxruntime gives them.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from onyxia.errors import InputError
from onyxia.ir import dtypes
from onyxia.ir.graph import IrGraph, TensorDef, TensorKind


def _kind(value: Any) -> str:
    return "sequence" if isinstance(value, (list, tuple)) else "tensor"


def elements(containers: Mapping[str, str], feeds: Mapping[str, Any]) -> list[tuple[str, str, Any]]:
    """(container input, element input name, array) for every element fed."""
    out: list[tuple[str, str, Any]] = []

    def walk(name: str, prefix: str, value: Any, kind: str) -> None:
        if kind == "optional":
            if value is not None:
                walk(name, f"{prefix}.0", value, _kind(value))
        elif kind == "sequence":
            if not isinstance(value, (list, tuple)):
                raise InputError(f"input '{name}' is a sequence: feed a list of arrays, got {type(value).__name__}")
            for k, item in enumerate(value):
                walk(name, f"{prefix}.{k}", item, _kind(item))
        else:
            out.append((name, prefix, value))

    for name, kind in containers.items():
        walk(name, name, feeds[name], kind)
    return out


def flatten(containers: Mapping[str, str], feeds: Mapping[str, Any]) -> dict[str, Any]:
    return {element: np.asarray(value) for _, element, value in elements(containers, feeds)}


def feed_structure(graph: IrGraph, name: str, value: Any) -> None:
    """Replace container input `name` by its fed elements and the nodes building it (the same
    element names elements gives the feeds)."""
    index = graph.inputs.index(name)
    t = graph.tensor(name)
    t.kind = TensorKind.INTERMEDIATE
    added: list[str] = []

    def build(prefix: str, value: Any, kind: str) -> None:
        if kind == "optional":
            inner = [f"{prefix}.0"] if value is not None else []
            if value is not None:
                build(inner[0], value, _kind(value))
            graph.add_node("Optional", inner, [prefix], name=graph.fresh_name(f"{prefix}/fed"))
        elif kind == "sequence":
            items = [f"{prefix}.{k}" for k in range(len(value))]
            for item, v in zip(items, value):
                build(item, v, _kind(v))
            graph.add_node("SequenceConstruct", items, [prefix], name=graph.fresh_name(f"{prefix}/fed"))
        else:
            array = np.asarray(value)
            graph.add_tensor(TensorDef(prefix, dtypes.from_numpy(array.dtype), tuple(array.shape), TensorKind.INPUT))
            added.append(prefix)

    build(name, value, t.container or "sequence")
    graph.inputs[index:index + 1] = added


def leaves(described: Any) -> list[str]:
    if isinstance(described, str):
        return [described]
    return [leaf for item in described["items"] for leaf in leaves(item)]


def assemble(described: Any, results: Mapping[str, Any]) -> Any:
    """An output as onnxruntime gives it: an array, a list (sequence), None (empty optional)."""
    if isinstance(described, str):
        return results[described]
    items = [assemble(item, results) for item in described["items"]]
    if described["kind"] == "sequence":
        return items
    return items[0] if items else None


__all__ = ["assemble", "elements", "feed_structure", "flatten", "leaves"]
