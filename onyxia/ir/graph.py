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
    # "sequence" or "optional" for a value that is not a tensor (a graph input or output, a
    # subgraph parameter); dtype is then the element type, if known. The compiler lowers these
    # to their element tensors before shape inference (SequenceLoweringPass).
    container: str | None = None

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
    # Outer-scope tensors its subgraphs read (If/Loop/Scan bodies): consumers like `inputs` for
    # ordering, liveness and lifetimes, but no operand of the op (kept by add_node/replace_node).
    implicit_inputs: list[TensorId] = field(default_factory=list)

    def describe(self) -> str:
        return f"node '{self.name}' ({self.op_type})"

    def subgraphs(self) -> list[tuple[str, IrGraph]]:
        """(attribute name, subgraph) for each graph-valued attribute (GRAPHS lists flattened)."""
        found: list[tuple[str, IrGraph]] = []
        for key, value in self.attributes.items():
            if isinstance(value, IrGraph):
                found.append((key, value))
            elif isinstance(value, list) and value and all(isinstance(v, IrGraph) for v in value):
                found.extend((key, v) for v in value)
        return found


class IrGraph:
    """A graph; a subgraph (an If branch, a Loop or Scan body) has a `parent` whose tensors it
    may read: `tensor()` resolves a name through the enclosing graphs."""

    def __init__(self, name: str = "graph", opsets: dict[str, int] | None = None, parent: IrGraph | None = None):
        self.name = name
        self.parent = parent
        # What a subgraph was loaded from (an onnx GraphProto), for passes that hand its node
        # back to onnx (FunctionExpansionPass); the IR never reads it.
        self.source: object = None
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
        graph: IrGraph | None = self
        while graph is not None:
            found = graph.tensors.get(tid)
            if found is not None:
                return found
            graph = graph.parent
        raise KeyError(f"unknown tensor '{tid}'")

    def free_tensors(self) -> list[TensorId]:
        """Tensors this graph (its nested subgraphs included) reads from enclosing graphs."""
        free: dict[TensorId, None] = {}
        for node in self.nodes:
            for tid in (*node.inputs, *node.implicit_inputs):
                if tid is not None and tid not in self.tensors:
                    free[tid] = None
        for tid in self.outputs:
            if tid not in self.tensors:
                free[tid] = None
        return sorted(free)

    def add_tensor(self, tensor: TensorDef) -> TensorDef:
        if tensor.name in self.tensors:
            raise ValueError(f"tensor '{tensor.name}' already exists")
        self.tensors[tensor.name] = tensor
        return tensor

    def fresh_name(self, hint: str) -> TensorId:
        """A tensor name not yet used in the graph, derived from `hint`."""
        if not self._defined(hint):
            return hint
        for i in itertools.count(1):
            name = f"{hint}_{i}"
            if not self._defined(name):
                return name
        raise AssertionError("unreachable")

    def _defined(self, tid: TensorId) -> bool:
        graph: IrGraph | None = self
        while graph is not None:
            if tid in graph.tensors:
                return True
            graph = graph.parent
        return False

    # ---- nodes ---------------------------------------------------------------------------
    def node(self, nid: NodeId) -> Node:
        return self._g.nodes[nid]["node"]

    @property
    def nodes(self) -> Iterator[Node]:
        return (self.node(n) for n in sorted(self._g.nodes))

    def __len__(self) -> int:
        return self._g.number_of_nodes()

    def has_node(self, nid: NodeId) -> bool:
        return self._g.has_node(nid)

    @property
    def next_node_id(self) -> NodeId:
        """The id the next added node gets (ids only grow: nodes added since are those >= it)."""
        return self._next_id

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
        node.implicit_inputs = _implicit_inputs(node)
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
        node.implicit_inputs = _implicit_inputs(node)
        self._link(node)

    def replace_all_uses(self, old: TensorId, new: TensorId) -> None:
        """Make every consumer (and graph output slot) of `old` read `new` instead."""
        for nid in self.consumers(old):
            node = self.node(nid)
            self._unlink(node)
            node.inputs = [new if t == old else t for t in node.inputs]
            if old in node.implicit_inputs:  # read inside a subgraph: rename it there too
                for _, sub in node.subgraphs():
                    sub.rename_outer(old, new)
                node.implicit_inputs = _implicit_inputs(node)
            self._link(node)
        self.outputs = [new if t == old else t for t in self.outputs]

    def rename_outer(self, old: TensorId, new: TensorId) -> None:
        """Read `new` wherever this subgraph reads the enclosing graphs' tensor `old`."""
        if old in self.tensors:
            return  # shadowed: this graph's own tensor
        for node in list(self.nodes):
            if old in node.inputs or old in node.implicit_inputs:
                self._unlink(node)
                node.inputs = [new if t == old else t for t in node.inputs]
                for _, sub in node.subgraphs():
                    sub.rename_outer(old, new)
                node.implicit_inputs = _implicit_inputs(node)
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
        for tid in (*node.inputs, *node.implicit_inputs):
            if tid is None:
                continue
            self._consumers.setdefault(tid, set()).add(node.id)
            src = self._producer.get(tid)
            if src is not None:
                self._g.add_edge(src, node.id, key=tid)

    def _unlink(self, node: Node) -> None:
        for tid in (*node.inputs, *node.implicit_inputs):
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
        """Deterministic topological order (ties broken by node id, i.e. model order), with each
        node after the node that sets a data-dependent symbol it uses (ConstantOfShape of a
        folded Shape(TopK(...)) has no edge from TopK, yet is sized by its read-back count)."""
        try:
            order = list(nx.lexicographical_topological_sort(self._g))
        except nx.NetworkXUnfeasible:
            cycle = nx.find_cycle(self._g)
            names = " -> ".join(self.node(u).name for u, _v, *_ in cycle)
            raise ModelLoadError(f"the graph has a cycle: {names}") from None
        setters = self._symbol_setters(order)
        if not setters:
            return order
        g = self._g.copy()
        for node in self.nodes:
            for sym in self._tensor_symbols(node.inputs) | self._tensor_symbols(node.outputs):
                src = setters.get(sym)
                if src is not None and src != node.id:
                    g.add_edge(src, node.id)
        try:
            return list(nx.lexicographical_topological_sort(g))
        except nx.NetworkXUnfeasible:  # a symbol used before the node that introduces it
            return order

    def ancestors(self, nid: NodeId) -> set[NodeId]:
        return nx.ancestors(self._g, nid)

    def live_nodes(self) -> set[NodeId]:
        """Nodes that (transitively) produce a graph output, and the nodes that set a
        data-dependent symbol (`dd_…`, read back at run time) that a live tensor's shape or
        folded value uses: NonZero whose output only Shape reads still sizes what follows."""
        live: set[NodeId] = set()

        def keep(src: NodeId | None) -> None:
            if src is not None and src not in live:
                live.add(src)
                live.update(nx.ancestors(self._g, src))

        for out in self.outputs:
            keep(self._producer.get(out))
        setters = self._symbol_setters(list(nx.lexicographical_topological_sort(self._g)))
        if not setters:
            return live
        seen: set[NodeId] = set()
        while True:
            used: set[str] = set()
            for nid in live - seen:
                node = self.node(nid)
                used |= self._tensor_symbols(node.inputs) | self._tensor_symbols(node.outputs)
            seen |= live
            added = {setters[s] for s in used if s in setters} - live
            if not added:
                return live
            for nid in added:
                keep(nid)

    def _tensor_symbols(self, tids: Iterable[TensorId | None]) -> set[str]:
        """The symbols in the shapes and folded (symbolic) values of these tensors."""
        out: set[str] = set()
        for tid in tids:
            t = self.tensors.get(tid) if tid is not None else None
            if t is None:
                continue
            for d in t.shape or ():
                out |= dim_symbols(d)
            if t.value is not None and t.value.dtype == object:
                for v in t.value.reshape(-1):
                    out |= dim_symbols(v)
        return out

    def _symbol_setters(self, order: list[NodeId] | None = None) -> dict[str, NodeId]:
        """Each data-dependent symbol and the first node (in `order`) whose outputs introduce it."""
        setters: dict[str, NodeId] = {}
        for node in (self.node(n) for n in order) if order is not None else self.nodes:
            fresh = self._tensor_symbols(node.outputs) - self._tensor_symbols(node.inputs)
            for sym in fresh:
                if sym.startswith("dd_"):
                    setters.setdefault(sym, node.id)
        return setters

    def validate(self) -> None:
        """Every referenced tensor must be a graph input, a valued tensor, produced, or (in a
        subgraph) an enclosing graph's tensor; subgraphs are checked too."""
        def known(tid: TensorId) -> bool:
            own = self.tensors.get(tid)
            if tid in self._producer or tid in self.inputs or (own is not None and own.value is not None):
                return True
            return self.parent is not None and self.parent._visible(tid)

        for node in self.nodes:
            for i, tid in enumerate(node.inputs):
                if tid is not None and not known(tid):
                    raise ModelLoadError(f"{node.describe()} input {i} reads tensor '{tid}', which nothing produces")
            for key, sub in node.subgraphs():
                for tid in sub.free_tensors():
                    if not known(tid):
                        raise ModelLoadError(f"{node.describe()} attribute '{key}' reads tensor '{tid}', which "
                                             "nothing produces")
                sub.validate()
        for tid in self.outputs:
            if not known(tid):
                raise ModelLoadError(f"graph output '{tid}' is not produced by any node")
        self.topological_order()

    def _visible(self, tid: TensorId) -> bool:
        """Whether `tid` exists in this graph or an enclosing one (for a subgraph's references)."""
        return self._defined(tid)

    def copy(self) -> IrGraph:
        """A deep copy; tensor values (numpy arrays) are shared since nothing mutates them.
        Subgraphs are copied with it (their parent links pointing into the copy)."""
        graphs = [self, *self.all_subgraphs()]
        values = [{tid: t.value for tid, t in g.tensors.items()} for g in graphs]
        for g in graphs:
            for t in g.tensors.values():
                t.value = None
        try:
            dup = copy.deepcopy(self)
        finally:
            for g, vals in zip(graphs, values):
                for tid, v in vals.items():
                    g.tensors[tid].value = v
        for g, vals in zip([dup, *dup.all_subgraphs()], values):
            for tid, v in vals.items():
                g.tensors[tid].value = v
        return dup

    def inline(self, sub: IrGraph, inputs: dict[TensorId, TensorId], prefix: str,
               node_prefix: str | None = None) -> dict[TensorId, TensorId]:
        """Copy `sub`'s nodes into this graph (an If branch taken, a loop iteration unrolled).

        `inputs` maps sub's formal inputs to this graph's tensors; sub's own tensors get fresh
        names under `prefix`, its weights come along, and what it reads from enclosing graphs
        is read as is. Nested subgraphs are copied with their references renamed. Returns sub's
        outputs as this graph's tensors. Nodes are named under `node_prefix` (default `prefix`;
        "" keeps their names, made unique: a loaded branch's names carry their path already).
        """
        node_prefix = prefix if node_prefix is None else node_prefix
        names: dict[TensorId, TensorId] = dict(inputs)
        for tid, t in sub.tensors.items():
            if tid in names:
                continue
            names[tid] = self.fresh_name(f"{prefix}/{tid}")
            if t.value is not None:
                self.add_tensor(TensorDef(names[tid], t.dtype, t.shape, TensorKind.WEIGHT, t.value, t.container))
        for node in sub.topological_nodes():
            attrs = {}
            for key, value in node.attributes.items():
                if isinstance(value, IrGraph):
                    value = value.clone(self, names)
                elif isinstance(value, list) and value and all(isinstance(v, IrGraph) for v in value):
                    value = [v.clone(self, names) for v in value]
                attrs[key] = value
            outs = [names.get(t, t) for t in node.outputs]
            label = f"{node_prefix}/{node.name}" if node_prefix else node.name
            nid = self.add_node(node.op_type, [names.get(t, t) if t is not None else None for t in node.inputs], outs,
                                attrs, domain=node.domain, name=self._fresh_node_name(label))
            self.node(nid).meta.update(node.meta)
            for old, new in zip(node.outputs, outs):
                src = sub.tensors.get(old)
                if src is not None and src.container:
                    self.tensors[new].container = src.container
        return {t: names.get(t, t) for t in sub.outputs}

    def clone(self, parent: IrGraph, renames: dict[TensorId, TensorId]) -> IrGraph:
        """A copy of this subgraph under `parent`, reading `renames[t]` where it read `t`."""
        saved, self.parent = self.parent, None
        try:
            dup = copy.deepcopy(self)
        finally:
            self.parent = saved
        dup.parent = parent
        for old in dup.free_tensors():
            if old in renames and renames[old] != old:
                dup.rename_outer(old, renames[old])
        return dup

    def topological_nodes(self) -> list[Node]:
        return [self.node(n) for n in self.topological_order()]

    def _fresh_node_name(self, hint: str) -> str:
        taken = {n.name for n in self.nodes}
        name, k = hint, 1
        while name in taken:
            k += 1
            name = f"{hint}~{k}"
        return name

    def all_subgraphs(self) -> list[IrGraph]:
        """Every subgraph nested in this graph, depth first in node order."""
        found: list[IrGraph] = []
        for node in self.nodes:
            for _, sub in node.subgraphs():
                found.append(sub)
                found.extend(sub.all_subgraphs())
        return found

    def __repr__(self) -> str:
        return f"IrGraph({self.name!r}, {len(self)} nodes, {len(self.tensors)} tensors)"


def _implicit_inputs(node: Node) -> list[TensorId]:
    """The enclosing-scope tensors a node's subgraphs read, in a stable order."""
    free: dict[TensorId, None] = {}
    for _, sub in node.subgraphs():
        free.update(dict.fromkeys(sub.free_tensors()))
    return [t for t in free if t not in node.inputs]
