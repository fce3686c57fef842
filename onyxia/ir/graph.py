"""The graph IR: nodes in a networkx MultiDiGraph plus a side table of tensors.

Passes use only IrGraph's methods; networkx stays private. Node ids are integers that are
never reused, so a pass may hold ids across removals. Tensor ids are the (unique) tensor
names, which keeps plans and error messages readable.
"""

from __future__ import annotations

import copy
import enum
import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import networkx as nx
import numpy as np

from onyxia.errors import ModelLoadError
from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape, dim_symbols

TensorId = str
NodeId = int
# node.meta key: {domain: opset version} a node was written for when it differs from the
# graph's (nodes spliced in from a decomposition written against one opset).
OPSETS_META = "opsets"


class TensorKind(enum.Enum):
    INPUT = "input"
    OUTPUT = "output"
    WEIGHT = "weight"  # initializers and Constant values
    INTERMEDIATE = "intermediate"


@dataclass
class TensorDef:
    name: TensorId
    dtype: DType | None = None  # None until shape inference
    shape: Shape | None = None
    kind: TensorKind = TensorKind.INTERMEDIATE
    # Initializer, Constant, or folded value. May be an object array holding SymDims when a
    # shape computation folds over symbolic dimensions (Shape → Gather → Concat → Reshape).
    value: np.ndarray | None = None

    @property
    def is_symbolic_value(self) -> bool:
        return self.value is not None and self.value.dtype == object


@dataclass
class Node:
    op_type: str
    inputs: list[TensorId | None]  # None marks an absent optional input
    outputs: list[TensorId]
    attributes: dict[str, Any] = field(default_factory=dict)
    domain: str = ""  # "" is the default ONNX domain (ai.onnx)
    name: str = ""
    id: NodeId = -1
    meta: dict[str, Any] = field(default_factory=dict)  # scratch space for passes

    def describe(self) -> str:
        return f"node '{self.name}' ({self.op_type})"


class IrGraph:
    def __init__(self, name: str = "graph", opsets: dict[str, int] | None = None):
        self.name = name
        self.opsets: dict[str, int] = dict(opsets or {"": 21})
        self.tensors: dict[TensorId, TensorDef] = {}
        self.inputs: list[TensorId] = []
        self.outputs: list[TensorId] = []
        self.metadata: dict[str, str] = {}
        self._g = nx.MultiDiGraph()
        self._next_id = 0  # node ids are never reused
        self._producer: dict[TensorId, NodeId] = {}
        self._consumers: dict[TensorId, set[NodeId]] = {}

    # ---- tensors -------------------------------------------------------------------------
    def tensor(self, tid: TensorId) -> TensorDef:
        try:
            return self.tensors[tid]
        except KeyError:
            raise KeyError(f"unknown tensor '{tid}'") from None

    def add_tensor(self, tensor: TensorDef) -> TensorDef:
        if tensor.name in self.tensors:
            raise ValueError(f"tensor '{tensor.name}' already exists")
        self.tensors[tensor.name] = tensor
        return tensor

    def fresh_name(self, hint: str) -> TensorId:
        """A tensor name not yet used in the graph, derived from `hint`."""
        if hint not in self.tensors:
            return hint
        for i in itertools.count(1):
            name = f"{hint}_{i}"
            if name not in self.tensors:
                return name
        raise AssertionError("unreachable")

    # ---- nodes ---------------------------------------------------------------------------
    def node(self, nid: NodeId) -> Node:
        return self._g.nodes[nid]["node"]

    @property
    def nodes(self) -> Iterator[Node]:
        return (self.node(n) for n in sorted(self._g.nodes))

    def __len__(self) -> int:
        return self._g.number_of_nodes()

    def opset_of(self, node: Node) -> int:
        """The opset version `node` is interpreted at: its own (OPSETS_META), else the graph's."""
        own = node.meta.get(OPSETS_META)
        if own and node.domain in own:
            return own[node.domain]
        return self.opsets.get(node.domain, 1)

    def producer(self, tid: TensorId) -> NodeId | None:
        return self._producer.get(tid)

    def consumers(self, tid: TensorId) -> list[NodeId]:
        return sorted(self._consumers.get(tid, ()))

    def add_node(
        self,
        op_type: str,
        inputs: Iterable[TensorId | None],
        outputs: Iterable[TensorId],
        attributes: dict[str, Any] | None = None,
        *,
        domain: str = "",
        name: str | None = None,
    ) -> NodeId:
        """Add a node; its output tensors are created when they do not exist yet."""
        nid = self._next_id
        self._next_id += 1
        node = Node(op_type, list(inputs), list(outputs), dict(attributes or {}), domain,
                    name or f"{op_type}_{nid}", nid)
        for out in node.outputs:
            if out in self._producer:
                other = self.node(self._producer[out])
                raise ModelLoadError(f"tensor '{out}' is produced twice: by {other.describe()} and {node.describe()}")
            if out not in self.tensors:
                self.tensors[out] = TensorDef(out)
        self._g.add_node(nid, node=node)
        self._link(node)
        return nid

    def remove_node(self, nid: NodeId) -> Node:
        """Disconnect and remove a node; its output tensors stay in the table unless unused."""
        node = self.node(nid)
        self._unlink(node)
        self._g.remove_node(nid)
        for out in node.outputs:
            t = self.tensors.get(out)
            if t is not None and not self._consumers.get(out) and out not in self.outputs and t.value is None:
                del self.tensors[out]
        return node

    def replace_node(self, nid: NodeId, op_type: str, inputs: Iterable[TensorId | None],
                     attributes: dict[str, Any] | None = None, *, domain: str = "") -> None:
        """Rewrite a node in place (same id and outputs), e.g. to a fused operator."""
        node = self.node(nid)
        self._unlink(node)
        node.op_type, node.domain = op_type, domain
        node.inputs = list(inputs)
        node.attributes = dict(attributes or {})
        self._link(node)

    def replace_all_uses(self, old: TensorId, new: TensorId) -> None:
        """Make every consumer (and graph output slot) of `old` read `new` instead."""
        for nid in self.consumers(old):
            node = self.node(nid)
            self._unlink(node)
            node.inputs = [new if t == old else t for t in node.inputs]
            self._link(node)
        self.outputs = [new if t == old else t for t in self.outputs]

    def set_inputs(self, nid: NodeId, inputs: Iterable[TensorId | None]) -> None:
        node = self.node(nid)
        self._unlink(node)
        node.inputs = list(inputs)
        self._link(node)

    def _link(self, node: Node) -> None:
        for out in node.outputs:
            self._producer[out] = node.id
            for c in self._consumers.get(out, ()):
                self._g.add_edge(node.id, c, key=out)
        for tid in node.inputs:
            if tid is None:
                continue
            self._consumers.setdefault(tid, set()).add(node.id)
            src = self._producer.get(tid)
            if src is not None:
                self._g.add_edge(src, node.id, key=tid)

    def _unlink(self, node: Node) -> None:
        for tid in node.inputs:
            if tid is None:
                continue
            self._consumers.get(tid, set()).discard(node.id)
            src = self._producer.get(tid)
            if src is not None and self._g.has_edge(src, node.id, key=tid):
                self._g.remove_edge(src, node.id, key=tid)
        for out in node.outputs:
            if self._producer.get(out) == node.id:
                del self._producer[out]
            for c in self._consumers.get(out, ()):
                while self._g.has_edge(node.id, c, key=out):
                    self._g.remove_edge(node.id, c, key=out)

    # ---- traversal -----------------------------------------------------------------------
    def topological_order(self) -> list[NodeId]:
        """Deterministic topological order (ties broken by node id, i.e. model order)."""
        try:
            return list(nx.lexicographical_topological_sort(self._g))
        except nx.NetworkXUnfeasible:
            cycle = nx.find_cycle(self._g)
            names = " -> ".join(self.node(u).name for u, _v, *_ in cycle)
            raise ModelLoadError(f"the graph has a cycle: {names}") from None

    def ancestors(self, nid: NodeId) -> set[NodeId]:
        return nx.ancestors(self._g, nid)

    def input_sources(self, tid: TensorId) -> frozenset[TensorId]:
        """The graph inputs tensor `tid` is computed from (itself, if it is one)."""
        if tid in self.inputs:
            return frozenset((tid,))
        src = self._producer.get(tid)
        if src is None:
            return frozenset()
        nodes = nx.ancestors(self._g, src) | {src}
        return frozenset(t for n in nodes for t in self.node(n).inputs if t in self.inputs)

    def value_sources(self, tid: TensorId) -> tuple[frozenset[TensorId], frozenset[str]]:
        """Why the value of `tid` is unknown: (graph inputs whose *values* it reads, symbols whose
        values would let it fold).

        The walk follows tensors without a value back to the nodes that block folding: a node
        whose inputs all have values, some of them symbolic (Cast to float of [height, width]),
        contributes the symbols of those; Shape and Size contribute the symbols of the dims they
        return, never their input's values. So a Resize size computed from Shape(image) through
        float math depends on `height` and `width`, not on the image's pixels nor on `batch`.
        """
        inputs: set[TensorId] = set()
        symbols: set[str] = set()
        seen: set[TensorId] = set()
        stack = [tid]
        start = self.tensors.get(tid)
        if start is not None and start.is_symbolic_value:  # valued, but a consumer needs numbers
            return frozenset(), _value_symbols(start.value)
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            if t in self.inputs:
                inputs.add(t)
                continue
            src = self._producer.get(t)
            if src is None:
                continue
            node = self.node(src)
            read = self.tensors.get(node.inputs[0]) if node.inputs and node.inputs[0] else None
            if node.domain == "" and node.op_type in ("Shape", "Size") and read is not None \
                    and read.shape is not None:
                dims = read.shape
                if node.op_type == "Shape":  # Python slicing clamps start/end as ONNX does
                    dims = dims[node.attributes.get("start", 0):node.attributes.get("end", len(dims))]
                symbols.update(s for d in dims for s in dim_symbols(d))
                continue
            unvalued = [i for i in node.inputs if i is not None and self.tensors[i].value is None]
            if unvalued:
                stack.extend(unvalued)
                continue
            for i in node.inputs:  # every input known: the node could not fold symbolic values
                if i is not None and self.tensors[i].is_symbolic_value:
                    symbols |= _value_symbols(self.tensors[i].value)
        return frozenset(inputs), frozenset(symbols)

    def live_nodes(self) -> set[NodeId]:
        """Nodes that (transitively) produce a graph output."""
        live: set[NodeId] = set()
        for out in self.outputs:
            src = self._producer.get(out)
            if src is not None and src not in live:
                live.add(src)
                live |= nx.ancestors(self._g, src)
        return live

    def validate(self) -> None:
        """Every referenced tensor must be a graph input, a valued tensor, or produced."""
        for node in self.nodes:
            for i, tid in enumerate(node.inputs):
                if tid is None:
                    continue
                if tid not in self._producer and tid not in self.inputs and (
                    tid not in self.tensors or self.tensors[tid].value is None
                ):
                    raise ModelLoadError(f"{node.describe()} input {i} reads tensor '{tid}', which nothing produces")
        for tid in self.outputs:
            if tid not in self._producer and tid not in self.inputs and (
                tid not in self.tensors or self.tensors[tid].value is None
            ):
                raise ModelLoadError(f"graph output '{tid}' is not produced by any node")
        self.topological_order()

    def copy(self) -> IrGraph:
        """A deep copy; tensor values (numpy arrays) are shared since nothing mutates them."""
        values = {tid: t.value for tid, t in self.tensors.items()}
        for t in self.tensors.values():
            t.value = None
        try:
            dup = copy.deepcopy(self)
        finally:
            for tid, v in values.items():
                self.tensors[tid].value = v
        for tid, v in values.items():
            dup.tensors[tid].value = v
        return dup

    def __repr__(self) -> str:
        return f"IrGraph({self.name!r}, {len(self)} nodes, {len(self.tensors)} tensors)"


def _value_symbols(value: np.ndarray) -> frozenset[str]:
    return frozenset(s for d in value.reshape(-1) for s in dim_symbols(d))
