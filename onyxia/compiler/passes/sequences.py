"""SequenceLoweringPass: sequences and optionals become host-side bookkeeping over tensors.

A sequence's structure (which tensors it holds) must be known at compile time; its elements
are ordinary tensors on the device. Graph inputs that are sequences or optionals arrive as
their elements (InferenceSession specializes the graph on the fed structure); graph outputs
that are sequences leave as their elements and the session reassembles them (the structure is
recorded in ctx.containers, and from there in the plan's metadata).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from onyxia.compiler.pass_api import CompileContext, Pass, Stage
from onyxia.compiler.passes.inference import infer_node
from onyxia.errors import CarriedShapeError, ShapeInferenceError, ValueRequiredError
from onyxia.ir import dtypes
from onyxia.ir.graph import IrGraph, Node, NodeId, TensorDef, TensorKind
from onyxia.operators.registry import check_supported
from onyxia.operators.sequences.sequences import SEQUENCE_OPS

# A Loop over sequences, or one whose body needs its iteration number as a value, is unrolled;
# this many iterations at most (each is a copy of the body).
MAX_UNROLL = 1024


@dataclass(frozen=True)
class Seq:
    items: tuple[str, ...]  # element tensors (or, in an optional, one sequence's name)


@dataclass(frozen=True)
class Opt:
    item: str | None  # a tensor, or a sequence/optional in the structure table


Structure = Seq | Opt


class SequenceLoweringPass(Pass):
    """Inference stage, before shape inference. In topological order, inferring the nodes it
    passes (their values decide positions and conditions):

    1. SequenceConstruct/Empty/Insert/Erase, Optional, Identity of a sequence: bookkeeping only;
       SequenceLength and OptionalHasElement become constants;
    2. SequenceAt and OptionalGetElement become Identity nodes of the element;
       ConcatFromSequence a Concat (Unsqueezes first for new_axis); SplitToSequence a Split;
    3. SequenceMap and a Loop that carries sequences, whose body needs its iteration number
       as a value, or whose carried values change shape per iteration are unrolled (the body
       copied per iteration, with the iteration number a constant); an If whose branches
       yield sequences is replaced by its taken branch;
    4. a position, trip count or condition that is not known raises ValueRequiredError for
       it, so InferenceSession specializes on the graph inputs it comes from;
    5. graph outputs that are sequences/optionals are replaced by their element tensors.
    A graph without sequences, optionals or Loops is left alone at the cost of one scan.
    """

    name = "sequence-lowering"
    stage = Stage.INFERENCE

    def run(self, graph: IrGraph, ctx: CompileContext) -> bool:
        graphs = (graph, *graph.all_subgraphs())
        if not any(t.container for g in graphs for t in g.tensors.values()) and not any(
                n.op_type in SEQUENCE_OPS or n.op_type == "Loop" for g in graphs for n in g.nodes):
            return False
        check_supported(graph, ctx.registry)
        for name in graph.inputs:
            if graph.tensor(name).container:
                raise ShapeInferenceError(f"input '{name}' is a {graph.tensor(name).container}: its structure must "
                                          "be known when compiling; run the model with InferenceSession, which "
                                          "compiles it for the structure fed")
        lowering = _Lowering(graph, ctx)
        lowering.process(graph.topological_order())
        lowering.finish()
        return True


class _Lowering:
    def __init__(self, graph: IrGraph, ctx: CompileContext):
        self.graph, self.ctx = graph, ctx
        self.structure: dict[str, Structure] = {}
        self.done: set[NodeId] = set()

    # ---- driver -------------------------------------------------------------------------------
    def process(self, order: list[NodeId]) -> None:
        pending = deque(order)
        while pending:
            nid = pending.popleft()
            if nid in self.done or not self.graph.has_node(nid):
                continue
            self.done.add(nid)
            before = self.graph.next_node_id
            self.lower(self.graph.node(nid))
            added = [n for n in range(before, self.graph.next_node_id) if self.graph.has_node(n)]
            pending.extendleft(reversed(added))

    def lower(self, node: Node) -> None:
        handler = getattr(self, f"_{node.op_type}", None)
        involved = any(t in self.structure for t in node.inputs if t)
        if node.op_type in SEQUENCE_OPS or (handler is not None and (involved or node.op_type in ("Loop", "If"))):
            if handler is None:
                raise ShapeInferenceError("no lowering", node=node.name, op_type=node.op_type)
            handler(node)
        elif involved:
            raise ShapeInferenceError("takes a sequence or optional where it needs a tensor", node=node.name,
                                      op_type=node.op_type)
        else:
            infer_node(self.graph, self.ctx, node)

    def finish(self) -> None:
        """Graph outputs that are sequences/optionals: their element tensors instead."""
        order = list(self.graph.outputs)
        leaves: dict[str, None] = {}
        described = {}
        for name in order:
            if name in self.structure:
                described[name] = self.describe(name)
                leaves.update(dict.fromkeys(self.leaves(name)))
            else:
                leaves[name] = None
        if described:
            self.graph.outputs = list(leaves)
            for name in leaves:
                t = self.graph.tensor(name)
                if t.kind is TensorKind.INTERMEDIATE:
                    t.kind = TensorKind.OUTPUT
            self.ctx.containers = {"outputs": order, "structure": described}

    def describe(self, name: str) -> object:
        s = self.structure.get(name)
        if s is None:
            return name
        if isinstance(s, Seq):
            return {"kind": "sequence", "items": [self.describe(t) for t in s.items]}
        return {"kind": "optional", "items": [] if s.item is None else [self.describe(s.item)]}

    def leaves(self, name: str) -> list[str]:
        s = self.structure.get(name)
        if s is None:
            return [name]
        items = s.items if isinstance(s, Seq) else ([s.item] if s.item else [])
        return [leaf for t in items for leaf in self.leaves(t)]

    # ---- helpers ------------------------------------------------------------------------------
    def value(self, node: Node, i: int, what: str) -> np.ndarray:
        tid = node.inputs[i] if i < len(node.inputs) else None
        value = self.graph.tensor(tid).value if tid else None
        if value is None or value.dtype == object:
            raise ValueRequiredError(f"{what} ('{tid}') must be known at compile time, where sequences and unrolled "
                                     "Loops are resolved",
                                     node=node.name, op_type=node.op_type, input_index=i, tensor=tid or "")
        return value

    def seq(self, node: Node, i: int) -> Seq:
        s = self.structure.get(node.inputs[i]) if i < len(node.inputs) and node.inputs[i] else None
        if not isinstance(s, Seq):
            raise ShapeInferenceError(f"input {i} must be a sequence", node=node.name, op_type=node.op_type)
        return s

    def position(self, node: Node, i: int, length: int, insert: bool) -> int:
        pos = int(np.asarray(self.value(node, i, "position")).reshape(-1)[0])
        limit = length if insert else length - 1
        if not -length <= pos <= limit:
            raise ShapeInferenceError(f"position {pos} is out of range for a sequence of {length}", node=node.name,
                                      op_type=node.op_type, input_index=i)
        return pos + length if pos < 0 else pos

    def drop(self, node: Node, structure: Structure | None = None) -> None:
        """Remove a node whose output is bookkeeping only."""
        if structure is not None:
            self.structure[node.outputs[0]] = structure
        self.graph.remove_node(node.id)

    def constant(self, node: Node, value: np.ndarray) -> None:
        out = self.graph.tensor(node.outputs[0])
        self.graph.remove_node(node.id)
        if out.name not in self.graph.tensors:
            self.graph.add_tensor(out)
        out.value, out.dtype, out.shape = value, dtypes.from_numpy(value.dtype), tuple(value.shape)

    def replace(self, node: Node, op_type: str, inputs: list[str | None], attrs: dict | None = None) -> None:
        self.graph.replace_node(node.id, op_type, inputs, attrs or {})
        infer_node(self.graph, self.ctx, self.graph.node(node.id))

    def alias(self, node: Node, src: str) -> None:
        """Output 0 is `src`: a structure shared, or an Identity of a tensor."""
        if src in self.structure:
            self.drop(node, self.structure[src])
        else:
            self.replace(node, "Identity", [src])

    def add(self, op_type: str, inputs: list[str | None], hint: str, attrs: dict | None = None) -> str:
        out = self.graph.fresh_name(hint)
        nid = self.graph.add_node(op_type, inputs, [out], attrs or {}, name=out)
        self.done.add(nid)
        infer_node(self.graph, self.ctx, self.graph.node(nid))
        return out

    def weight(self, hint: str, value: np.ndarray) -> str:
        name = self.graph.fresh_name(hint)
        self.graph.add_tensor(TensorDef(name, dtypes.from_numpy(value.dtype), tuple(value.shape), TensorKind.WEIGHT,
                                        value))
        return name

    def axes_op(self, op_type: str, x: str, axes: list[int], hint: str) -> str:
        """Squeeze/Unsqueeze with axes as the graph's opset wants them (attribute before 13)."""
        if self.graph.opsets.get("", 13) < 13:
            return self.add(op_type, [x], hint, {"axes": axes})
        return self.add(op_type, [x, self.weight(f"{hint}/axes", np.array(axes, np.int64))], hint)

    # ---- sequences ----------------------------------------------------------------------------
    def _SequenceEmpty(self, node: Node) -> None:
        self.drop(node, Seq(()))

    def _SequenceConstruct(self, node: Node) -> None:
        self.drop(node, Seq(tuple(t for t in node.inputs if t)))

    def _SequenceInsert(self, node: Node) -> None:
        items = list(self.seq(node, 0).items)
        pos = self.position(node, 2, len(items), True) if len(node.inputs) > 2 and node.inputs[2] else len(items)
        items.insert(pos, node.inputs[1])
        self.drop(node, Seq(tuple(items)))

    def _SequenceErase(self, node: Node) -> None:
        items = list(self.seq(node, 0).items)
        if not items:
            raise ShapeInferenceError("erasing from an empty sequence", node=node.name, op_type=node.op_type)
        pos = self.position(node, 1, len(items), False) if len(node.inputs) > 1 and node.inputs[1] else len(items) - 1
        del items[pos]
        self.drop(node, Seq(tuple(items)))

    def _SequenceAt(self, node: Node) -> None:
        items = self.seq(node, 0).items
        self.alias(node, items[self.position(node, 1, len(items), False)])

    def _SequenceLength(self, node: Node) -> None:
        self.constant(node, np.array(len(self.seq(node, 0).items), np.int64))

    def _ConcatFromSequence(self, node: Node) -> None:
        items = self.seq(node, 0).items
        if not items:
            raise ShapeInferenceError("ConcatFromSequence of an empty sequence", node=node.name, op_type=node.op_type)
        axis = int(node.attributes.get("axis", 0))
        if node.attributes.get("new_axis", 0):
            rank = len(self.graph.tensor(items[0]).shape or ())
            axis = axis + rank + 1 if axis < 0 else axis
            items = tuple(self.axes_op("Unsqueeze", t, [axis], f"{node.name}/unsqueezed") for t in items)
        self.replace(node, "Concat", list(items), {"axis": axis})

    def _SplitToSequence(self, node: Node) -> None:
        x = self.graph.tensor(node.inputs[0])
        axis = int(node.attributes.get("axis", 0))
        axis = axis + len(x.shape) if axis < 0 else axis
        dim = x.shape[axis]
        if not isinstance(dim, int):
            raise ShapeInferenceError(f"the split axis has a symbolic length ({dim}); the sequence's length must be "
                                      "known", node=node.name, op_type=node.op_type, input_index=0)
        keep = bool(node.attributes.get("keepdims", 1))
        if len(node.inputs) > 1 and node.inputs[1]:
            split = np.asarray(self.value(node, 1, "split")).astype(np.int64)
            sizes = [int(split)] * (dim // int(split)) + ([dim % int(split)] if dim % int(split) else []) \
                if split.ndim == 0 else [int(v) for v in split]
            keep = True
        else:
            sizes = [1] * dim
        outs = [self.graph.fresh_name(f"{node.name}/part{k}") for k in range(len(sizes))]
        attrs: dict = {"axis": axis}
        inputs = [node.inputs[0]]
        if self.graph.opsets.get("", 13) < 13:
            attrs["split"] = sizes
        else:
            inputs.append(self.weight(f"{node.name}/split", np.array(sizes, np.int64)))
        nid = self.graph.add_node("Split", inputs, outs, attrs, name=f"{node.name}/split")
        self.done.add(nid)
        infer_node(self.graph, self.ctx, self.graph.node(nid))
        if not keep:
            outs = [self.axes_op("Squeeze", t, [axis], f"{t}/squeezed") for t in outs]
        self.drop(node, Seq(tuple(outs)))

    # ---- optionals ----------------------------------------------------------------------------
    def _Optional(self, node: Node) -> None:
        self.drop(node, Opt(node.inputs[0] if node.inputs and node.inputs[0] else None))

    def _OptionalHasElement(self, node: Node) -> None:
        tid = node.inputs[0] if node.inputs and node.inputs[0] else None
        s = self.structure.get(tid) if tid else None
        self.constant(node, np.array(tid is not None and not (isinstance(s, Opt) and s.item is None)))

    def _OptionalGetElement(self, node: Node) -> None:
        s = self.structure.get(node.inputs[0])
        if isinstance(s, Opt):
            if s.item is None:
                raise ShapeInferenceError("the optional is empty", node=node.name, op_type=node.op_type)
            self.alias(node, s.item)
        else:  # a tensor or a sequence: itself
            self.alias(node, node.inputs[0])

    def _Identity(self, node: Node) -> None:
        self.alias(node, node.inputs[0])

    # ---- control flow over sequences -----------------------------------------------------------
    def _bind(self, node: Node, results: list[str]) -> None:
        """Give `node`'s outputs the values `results` (structures shared, tensors by Identity) and
        remove it."""
        outputs = list(node.outputs)
        self.graph.remove_node(node.id)
        for out, src in zip(outputs, results):
            if src in self.structure:
                self.structure[out] = self.structure[src]
            else:
                nid = self.graph.add_node("Identity", [src], [out], name=self.graph.fresh_name(f"{out}/bound"))
                self.done.add(nid)
                infer_node(self.graph, self.ctx, self.graph.node(nid))

    def _inline(self, sub: IrGraph, inputs: dict[str, str], prefix: str) -> dict[str, str]:
        before = self.graph.next_node_id
        outs = self.graph.inline(sub, inputs, prefix)
        self.process([n for n in range(before, self.graph.next_node_id) if self.graph.has_node(n)])
        return outs

    def _involves_sequences(self, node: Node) -> bool:
        return any(t.container for _, sub in node.subgraphs() for g in (sub, *sub.all_subgraphs())
                   for t in g.tensors.values()) or any(
            n.op_type in SEQUENCE_OPS for _, sub in node.subgraphs() for g in (sub, *sub.all_subgraphs())
            for n in g.nodes) or any(t in self.structure for t in node.inputs if t)

    def _If(self, node: Node) -> None:
        if not self._involves_sequences(node):
            infer_node(self.graph, self.ctx, node)
            return
        cond = bool(np.asarray(self.value(node, 0, "the condition of an If yielding sequences")).reshape(-1)[0])
        branch = node.attributes["then_branch" if cond else "else_branch"]
        outs = self._inline(branch, {}, f"{node.name}/{'then' if cond else 'else'}")
        self._bind(node, [outs[t] for t in branch.outputs])

    def _Loop(self, node: Node) -> None:
        why = ""
        if not self._involves_sequences(node):
            try:
                infer_node(self.graph, self.ctx, node)
                return
            except ValueRequiredError as exc:  # the body needs a value per iteration: unroll it
                if not self._in_body(node, exc.tensor):
                    raise
            except CarriedShapeError as exc:  # a carried value changes shape per iteration: unroll it
                why = f" ({str(exc).split(': ', 1)[-1].split(';')[0]})"
        self._unroll(node, why)

    def _in_body(self, node: Node, tensor: str) -> bool:
        body = node.attributes["body"]
        return any(tensor in g.tensors for g in (body, *body.all_subgraphs()))

    def _unroll(self, node: Node, why: str = "") -> None:
        """`why`: the reason it is unrolled, for errors (a carried value changing shape)."""
        body = node.attributes["body"]
        carried = len(node.inputs) - 2
        trip = int(np.asarray(self.value(node, 0, f"the trip count of a Loop that is unrolled{why}")).reshape(-1)[0]) \
            if node.inputs[0] else MAX_UNROLL + 1
        cond = bool(np.asarray(self.value(node, 1, f"the condition of a Loop that is unrolled{why}")).reshape(-1)[0]) \
            if len(node.inputs) > 1 and node.inputs[1] else True
        state = list(node.inputs[2:])
        scans: list[list[str]] = [[] for _ in body.outputs[1 + carried:]]
        i = 0
        while cond and i < trip:
            if i >= MAX_UNROLL:
                raise ShapeInferenceError(f"unrolling stopped after {MAX_UNROLL} iterations", node=node.name,
                                          op_type=node.op_type)
            bound = {body.inputs[0]: self.weight(f"{node.name}/i{i}", np.array(i, np.int64)),
                     body.inputs[1]: self.weight(f"{node.name}/cond{i}", np.array(True)),
                     **dict(zip(body.inputs[2:], state))}
            outs = self._inline(body, bound, f"{node.name}/iter{i}")
            cond_value = self.graph.tensor(outs[body.outputs[0]]).value
            if cond_value is None:
                raise ShapeInferenceError(f"an unrolled Loop's condition must be known at compile time{why}",
                                          node=node.name, op_type=node.op_type)
            cond = bool(np.asarray(cond_value).reshape(-1)[0])
            state = [outs[t] for t in body.outputs[1:1 + carried]]
            for j, t in enumerate(body.outputs[1 + carried:]):
                scans[j].append(outs[t])
            i += 1
        stacked = []
        for j, parts in enumerate(scans):
            if not parts:
                raise ShapeInferenceError(f"scan output {j} of a Loop unrolled to zero iterations has no shape",
                                          node=node.name, op_type=node.op_type)
            rows = [self.axes_op("Unsqueeze", t, [0], f"{node.name}/scan{j}_{k}") for k, t in enumerate(parts)]
            stacked.append(self.add("Concat", rows, f"{node.name}/scan{j}", {"axis": 0}))
        self._bind(node, state + stacked)

    def _SequenceMap(self, node: Node) -> None:
        body = node.attributes["body"]
        first = self.seq(node, 0)
        lengths = {len(self.structure[t].items) for t in node.inputs if t in self.structure}  # type: ignore[union-attr]
        if len(lengths) != 1:
            raise ShapeInferenceError(f"input sequences have different lengths {sorted(lengths)}", node=node.name,
                                      op_type=node.op_type)
        results: list[list[str]] = [[] for _ in body.outputs]
        for k in range(len(first.items)):
            bound = {formal: (self.structure[t].items[k] if t in self.structure else t)  # type: ignore[union-attr]
                     for formal, t in zip(body.inputs, node.inputs)}
            outs = self._inline(body, bound, f"{node.name}/item{k}")
            for j, t in enumerate(body.outputs):
                results[j].append(outs[t])
        outputs = list(node.outputs)
        self.graph.remove_node(node.id)
        for out, items in zip(outputs, results):
            self.structure[out] = Seq(tuple(items))
