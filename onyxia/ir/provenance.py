"""Where a tensor's value comes from: the graph inputs and symbols it depends on.

Used to explain why a node cannot fold or why a shape is not static ("depends on the values of
input 'x'", "would fold once 'height' is known").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from onyxia.ir.shapes import dim_symbols

if TYPE_CHECKING:
    from onyxia.ir.graph import IrGraph, TensorId


def input_sources(graph: IrGraph, tid: TensorId) -> frozenset[TensorId]:
    """The graph inputs tensor `tid` is computed from (itself, if it is one). In a subgraph,
    the top-level graph's inputs reached through what it reads from enclosing graphs (its
    own formal inputs are not graph inputs)."""
    if graph.parent is not None:
        found: set[TensorId] = set()
        seen, stack = set(), [tid]
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if name not in graph.tensors:
                found |= input_sources(graph.parent, name)
            elif graph.producer(name) is not None:
                node = graph.node(graph.producer(name))
                stack.extend(t for t in (*node.inputs, *node.implicit_inputs) if t)
        return frozenset(found)
    if tid in graph.inputs:
        return frozenset((tid,))
    src = graph.producer(tid)
    if src is None:
        return frozenset()
    nodes = graph.ancestors(src) | {src}
    return frozenset(t for n in nodes for t in graph.node(n).inputs if t in graph.inputs)


def value_sources(graph: IrGraph, tid: TensorId) -> tuple[frozenset[TensorId], frozenset[str]]:
    """Why the value of `tid` is unknown: (graph inputs whose *values* it reads, symbols whose
    values would let it fold).

    The walk follows tensors without a value back to the nodes that block folding: a node
    whose inputs all have values, some of them symbolic (Cast to float of [height, width]),
    contributes the symbols of those; Shape and Size contribute the symbols of the dims they
    return, never their input's values. So a Resize size computed from Shape(image) through
    float math depends on `height` and `width`, not on the image's pixels nor on `batch`.
    In a subgraph (an If branch) the walk follows what it reads into the enclosing graphs.
    """
    if tid not in graph.tensors and graph.parent is not None:  # read from an enclosing graph
        return value_sources(graph.parent, tid)
    inputs: set[TensorId] = set()
    symbols: set[str] = set()
    seen: set[TensorId] = set()
    stack = [tid]
    start = graph.tensors.get(tid)
    if start is not None and start.is_symbolic_value:  # valued, but a consumer needs numbers
        return frozenset(), _value_symbols(start.value)
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in graph.inputs:
            if graph.parent is None:  # a subgraph's own inputs (a loop body's) are no feeds
                inputs.add(t)
            continue
        if t not in graph.tensors and graph.parent is not None:  # an If branch reading the graph
            outer_inputs, outer_symbols = value_sources(graph.parent, t)
            inputs |= outer_inputs
            symbols |= outer_symbols
            continue
        src = graph.producer(t)
        if src is None:
            continue
        node = graph.node(src)
        read = graph.tensors.get(node.inputs[0]) if node.inputs and node.inputs[0] else None
        if node.domain == "" and node.op_type in ("Shape", "Size") and read is not None \
                and read.shape is not None:
            dims = read.shape
            if node.op_type == "Shape":  # Python slicing clamps start/end as ONNX does
                dims = dims[node.attributes.get("start", 0):node.attributes.get("end", len(dims))]
            symbols.update(s for d in dims for s in dim_symbols(d))
            continue
        unvalued = [i for i in (*node.inputs, *node.implicit_inputs)
                    if i is not None and (i not in graph.tensors or graph.tensors[i].value is None)]
        if unvalued:
            stack.extend(unvalued)
            continue
        for i in node.inputs:  # every input known: the node could not fold symbolic values
            if i is not None and i in graph.tensors and graph.tensors[i].is_symbolic_value:
                symbols |= _value_symbols(graph.tensors[i].value)
    return frozenset(inputs), frozenset(symbols)


def _value_symbols(value: np.ndarray) -> frozenset[str]:
    return frozenset(s for d in value.reshape(-1) for s in dim_symbols(d))


def symbol_inputs(graph: IrGraph, symbol: str) -> list[TensorId]:
    """The (top-level) graph inputs whose shape uses `symbol`: the feeds that give it a value."""
    while graph.parent is not None:
        graph = graph.parent
    return [t for t in graph.inputs if any(symbol in dim_symbols(d) for d in graph.tensor(t).shape or ())]
