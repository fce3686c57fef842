"""SplitLargeTensorsPass: constant weights over the storage-binding limit become several pieces.

WebGPU guarantees only 128 MiB per storage binding, while an LLM's embedding table or lm_head
weight ([151936, 896] f32: 544 MB) exceeds it. The pass rewrites the nodes reading such a
weight into the same computation over pieces that each fit, with existing operators, so the
plan stays portable. The limit is an argument: no device is consulted while compiling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from onyxia.compiler.pass_api import CompileContext, Pass, PassResult, Stage
from onyxia.ir.dtypes import from_numpy
from onyxia.ir.graph import IrGraph, Node, NodeId, TensorDef, TensorKind
from onyxia.operators.base import InferenceCtx
from onyxia.operators.indexing.indexing import CLAMP_INDICES_ATTR
from onyxia.operators.registry import resolve_operator

MAX_BINDING_BYTES = 128 << 20  # WebGPU's guaranteed maxStorageBufferBindingSize
COLUMN_ALIGN = 64  # MatMul pieces in whole gemv column groups / tile widths when they can be
MS = "com.microsoft"
MIN_OPSET = 11  # the rewrites use Where / Less on integers and Slice with inputs
# Inputs cut into row pieces (along N for MatMulNBits, the gathered axis for the gathers).
ROW_INPUTS = {"Gather": (0,), "GatherBlockQuantized": (0, 2, 3), "MatMulNBits": (1, 2, 3, 5)}


def chunk_ranges(total: int, most: int, align: int = 1) -> list[tuple[int, int]]:
    """[start, stop) pieces of `total`, each at most `most` long, near-equal, aligned if they can be."""
    size = -(-total // -(-total // most))
    if most >= align:
        size = min(-(-size // align) * align, most // align * align)
    return [(a, min(a + size, total)) for a in range(0, total, size)]


def _rows(value: np.ndarray, n: int, a: int, b: int) -> np.ndarray:
    """Rows a:b of `value` viewed as [n, -1], in its layout ([n, ...] stays so, flat stays flat)."""
    piece = value.reshape(n, -1)[a:b]
    return piece.reshape((b - a,) + value.shape[1:]) if value.ndim > 1 and value.shape[0] == n else piece.reshape(-1)


@dataclass(frozen=True)
class SplitReport:
    """What the pass did: {node: the inputs it split}, and {node: why it left a big input whole}."""

    split: dict[str, list[str]]
    skipped: dict[str, str]


class _Rewrite:
    """Replaces one node by new ones; the last (`final`) writes the node's output tensor."""

    def __init__(self, graph: IrGraph, ctx: CompileContext, pieces: dict, node: Node,
                 drop: NodeId | None = None):
        self.graph, self.ctx, self.pieces, self.node = graph, ctx, pieces, node
        self.out = graph.tensor(node.outputs[0])  # its definition (symbolic shape) is kept as is
        graph.remove_node(node.id)
        if drop is not None and not graph.consumers(graph.node(drop).outputs[0]) \
                and graph.node(drop).outputs[0] not in graph.outputs:
            graph.remove_node(drop)  # a Transpose that only fed this node
        if self.out.name not in graph.tensors:
            graph.add_tensor(self.out)

    def piece(self, source: str, key: str, value: np.ndarray) -> str:
        """A constant for one piece of `source`, shared by every node asking for the same one."""
        if (source, key) not in self.pieces:
            name = self.graph.fresh_name(f"{source}/{key}")
            self.graph.add_tensor(TensorDef(name, from_numpy(value.dtype), tuple(value.shape), TensorKind.WEIGHT,
                                            value))
            self.pieces[(source, key)] = name
        return self.pieces[(source, key)]

    def ints(self, values: int | list[int], dtype: np.dtype | type = np.int64) -> str:
        value = np.asarray(values, dtype)
        return self.piece(f"{self.node.name}/const", f"{value.dtype.name}_{'_'.join(map(str, value.flat))}", value)

    def emit(self, op_type: str, inputs: list, hint: str, attrs: dict | None = None, *, domain: str = "",
             final: bool = False) -> str:
        """Add a node; its output is typed by the operator's own inference (symbols preserved)."""
        out = self.out.name if final else self.graph.fresh_name(f"{self.out.name}/{hint}")
        nid = self.graph.add_node(op_type, inputs, [out], attrs, domain=domain, name=f"{self.node.name}/{hint}")
        if not final:
            node = self.graph.node(nid)
            op = resolve_operator(self.graph, self.ctx.registry, node)
            assert op is not None, f"{op_type} is a built-in operator"
            (dtype, shape), *_ = op.infer(InferenceCtx(self.graph, node, self.ctx))
            self.graph.tensor(out).dtype, self.graph.tensor(out).shape = dtype, tuple(shape)
        return out

    def concat(self, parts: list[str], final: bool = True) -> str:
        if len(parts) == 1 and not final:
            return parts[0]
        return self.emit("Concat", parts, "concat", {"axis": len(self.out.shape) - 1}, final=final)


class SplitLargeTensorsPass(Pass):
    """Optimization stage, after DCE. Weights are sized as the device stores them (ir/dtypes.py:
    float16 2 bytes an element, packed uint8 4-bit weights a byte per byte).

    1. MatMul(A, W), W a constant [K, N] (or a Transpose of one: a tied lm_head) over the limit:
       column pieces [K, n_i], a MatMul each, Concat on the last axis. When one column is too big,
       K is cut too: Slice(A) per K piece, partial products, Sum. Gemm(A, B, C) likewise along N
       (B's rows when transB; C cut alike when it varies along N), attributes kept.
    2. Gather(W, idx, axis=0), W constant: row pieces W_c from offset o_c. Indices are normalized
       once, n = Where(idx < 0, idx + V, idx); piece c gathers at n - o_c, and a Where chain picks
       the piece holding each row: Where(n < o_1, G_0, Where(n < o_2, G_1, ... G_last)). No Clip:
       the chain drops the other pieces' lanes and the kernels clamp (Gather) or zero
       (GatherBlockQuantized) any index, so C-1 Wheres replace a masked sum's C Wheres, C Clips
       and Sum, rows are copied exactly, and an index >= V clamps / zeroes as unsplit.
       A tied table is stored once: when the gathered table is also a MatMul's B through a
       Transpose (Gather(E) with MatMul(x, Transpose(E)), or Gather(Transpose(W)) with
       MatMul(x, W), onnxruntime-genai's builder), each piece gathers from the MatMul's column
       piece along axis 1 and a Transpose puts the few gathered rows back: no second copy.
    3. MatMulNBits: B, scales, zero points and bias in row pieces along N (attribute N per piece),
       Concat on the last axis. GatherBlockQuantized: data / scales / zero points by rows as in 2.
    4. Anything else over the limit stays (the runtime raises its DeviceError), with the reason in
       the pass's SplitReport (ctx.reports["split-large-tensors"]). Names derive from the weight's
       name and the ranges.
    """

    name = "split-large-tensors"
    stage = Stage.OPTIMIZATION

    def __init__(self, max_binding_bytes: int = MAX_BINDING_BYTES):
        if max_binding_bytes < 4:
            raise ValueError(f"max_binding_bytes must be >= 4, got {max_binding_bytes}")
        self.limit = max_binding_bytes // 4 * 4  # bindings hold whole 4-byte words

    def run(self, graph: IrGraph, ctx: CompileContext) -> PassResult:
        rules: dict[tuple[str, str], Callable] = {
            ("", "MatMul"): self._matmul, ("", "Gemm"): self._matmul, ("", "Gather"): self._gather,
            (MS, "MatMulNBits"): self._matmul_nbits, (MS, "GatherBlockQuantized"): self._gather}
        pieces: dict = {}
        split: dict[str, list[str]] = {}
        skipped: dict[str, str] = {}
        for nid in graph.topological_order():
            node = graph.node(nid)
            if (node.domain, node.op_type) not in rules or all(graph.tensor(o).value is not None for o in node.outputs):
                continue  # folded nodes plan nothing
            big = [t for t in node.inputs if t is not None and self._too_big(_constant(graph, t)[0], node)]
            if not big:
                continue
            if graph.opsets.get("", 1) < MIN_OPSET:
                skipped[node.name] = f"opset {graph.opsets.get('', 1)} < {MIN_OPSET}"
            elif reason := rules[node.domain, node.op_type](graph, node, lambda **kw: _Rewrite(
                    graph, ctx, pieces, node, **kw)):
                skipped[node.name] = reason
            else:
                split[node.name] = big
        for node in graph.nodes:
            if node.name not in skipped and any(t is not None and self._too_big(graph.tensor(t).value, node)
                                                for t in node.inputs):
                skipped[node.name] = f"no split rule for {node.op_type}"
        ctx.reports[self.name] = SplitReport(split, skipped)
        return PassResult(bool(split), f"split {len(split)} nodes; {len(skipped)} still read a tensor over the limit")

    def _too_big(self, value: np.ndarray | None, node: Node) -> bool:
        return value is not None and value.dtype != object and _nbytes(value, node) > self.limit

    # ---- rules: each rewrites its node and returns None, or returns why it cannot ---------------
    def _matmul(self, graph: IrGraph, node: Node, begin: Callable[..., _Rewrite]) -> str | None:
        """Rule 1 (a Gemm's pieces keep B's transB layout; its K is never cut)."""
        b, via = _constant(graph, node.inputs[1])
        if b is None or b.ndim != 2:
            return f"the large constant is not {node.op_type}'s 2-D B"
        gemm, attrs, a = node.op_type == "Gemm", dict(node.attributes), node.inputs[0]
        trans = gemm and bool(attrs.get("transB", 0))
        (k, n), w = (b.shape[::-1], b.T) if trans else (b.shape, b)
        source, tag = (node.inputs[1], "") if via is None else (graph.node(via).inputs[0], "T/")
        esize = _element_bytes(b)
        k_ranges = [(0, k)] if k * esize <= self.limit else chunk_ranges(k, self.limit // esize)
        cut = len(k_ranges) > 1
        if cut and (gemm or not graph.tensor(a).dtype.is_float):
            return "one column of B is over the limit, and K is cut for float MatMul only"
        c = node.inputs[2] if gemm and len(node.inputs) > 2 else None
        c_def = graph.tensor(c) if c is not None else None
        # A C broadcast along N goes whole to every piece; a C varying along N is cut like B.
        varies = c_def is not None and bool(c_def.shape) and not (
            isinstance(c_def.shape[-1], int) and c_def.shape[-1] == 1)
        if varies and c_def.value is None:
            return "C varies along N and is not constant"
        rw = begin(drop=via)
        partials = []
        for k0, k1 in k_ranges:
            a_k = rw.emit("Slice", [a, rw.ints([k0]), rw.ints([k1]), rw.ints([-1])], f"k_{k0}_{k1}") if cut else a
            parts = []
            for n0, n1 in chunk_ranges(n, self.limit // ((k1 - k0) * esize), COLUMN_ALIGN):
                key = (f"rows_{k0}_{k1}/" if cut else "") + f"cols_{n0}_{n1}"
                ins = [a_k, rw.piece(source, tag + key, w[k0:k1, n0:n1].T if trans else w[k0:k1, n0:n1])]
                if c is not None:
                    ins.append(rw.piece(c, key, c_def.value[..., n0:n1]) if varies else c)
                parts.append(rw.emit(node.op_type, ins, key, attrs))
            partials.append(rw.concat(parts, final=not cut))
        if cut:
            rw.emit("Sum", partials, "sum", final=True)
        return None

    def _select_rows(self, graph: IrGraph, node: Node, rw: _Rewrite, n_rows: int, row_bytes: int,
                     gather: Callable[[_Rewrite, tuple[int, int], str], str], align: int = 1) -> None:
        """Rule 2's index plumbing around gather(rw, (first row, stop row), piece index)."""
        idx = node.inputs[1]
        dtype, idx_rank = graph.tensor(idx).dtype.numpy, len(graph.tensor(idx).shape)
        rows = chunk_ranges(n_rows, self.limit // row_bytes, align)
        norm = rw.emit("Where", [rw.emit("Less", [idx, rw.ints(0, dtype)], "negative"),
                                 rw.emit("Add", [idx, rw.ints(n_rows, dtype)], "wrapped"), idx], "index")
        trailing = list(range(idx_rank, len(rw.out.shape)))  # so the index broadcasts over a row
        wide = norm
        if trailing:
            wide = (rw.emit("Unsqueeze", [norm, rw.ints(trailing)], "index_wide") if graph.opsets.get("", 1) >= 13
                    else rw.emit("Unsqueeze", [norm], "index_wide", {"axes": trailing}))
        gathered = [gather(rw, (a, b), norm if a == 0 else rw.emit("Sub", [norm, rw.ints(a, dtype)], f"index_{a}"))
                    for a, b in rows]
        acc = gathered[-1]
        for c in range(len(rows) - 2, -1, -1):
            below = rw.emit("Less", [wide, rw.ints(rows[c + 1][0], dtype)], f"below_{rows[c + 1][0]}")
            acc = rw.emit("Where", [below, gathered[c], acc], f"select_{rows[c][0]}", final=c == 0)

    def _gather(self, graph: IrGraph, node: Node, begin: Callable[..., _Rewrite]) -> str | None:
        axis = node.attributes.get("gather_axis" if node.domain == MS else "axis", 0)
        if (tied := _tied_columns(graph, node, self.limit)) is not None and int(axis) == 0:
            self._gather_columns(graph, node, begin, *tied)
            return None
        data = graph.tensor(node.inputs[0]).value
        if data is None or data.ndim == 0 or int(axis) % data.ndim != 0:
            return "the large constant is not the data gathered along axis 0"
        found = self._by_rows(graph, node, data.shape[0])
        if isinstance(found, str):
            return found
        (values, row_bytes), inputs, attrs = found, list(node.inputs), dict(node.attributes)

        def gather(rw: _Rewrite, rows: tuple[int, int], idx: str) -> str:
            key = "rows_{}_{}".format(*rows)
            ins = [idx if i == 1 else rw.piece(t, key, _rows(values[i], data.shape[0], *rows)) if i in values else t
                   for i, t in enumerate(inputs)]
            extra = {CLAMP_INDICES_ATTR: 1} if node.op_type == "Gather" and node.domain == "" else {}
            return rw.emit(node.op_type, ins, key, {**attrs, **extra}, domain=node.domain)
        self._select_rows(graph, node, begin(), data.shape[0], row_bytes, gather)
        return None

    def _gather_columns(self, graph: IrGraph, node: Node, begin: Callable[..., _Rewrite], source: str, tag: str,
                        columns: np.ndarray, drop: NodeId | None) -> None:
        """Rule 2 over a tied table: gathered rows are columns of `columns` ([K, V], the MatMul's B),
        whose pieces the MatMul rule makes under the same names."""
        k, n = columns.shape
        rw = begin(drop=drop)
        rank = len(graph.tensor(node.inputs[1]).shape)

        def gather(rw: _Rewrite, cols: tuple[int, int], idx: str) -> str:
            key = "cols_{}_{}".format(*cols)
            piece = rw.piece(source, tag + key, columns[:, cols[0]:cols[1]])
            picked = rw.emit("Gather", [piece, idx], f"{key}/gather", {"axis": 1, CLAMP_INDICES_ATTR: 1})  # [K, *idx]
            return rw.emit("Transpose", [picked], key, {"perm": [*range(1, rank + 1), 0]})
        self._select_rows(graph, node, rw, n, k * _element_bytes(columns), gather, COLUMN_ALIGN)

    def _by_rows(self, graph: IrGraph, node: Node, n: int) -> tuple[dict, int] | str:
        """({input index: value} of the inputs cut by rows, the most bytes per row) or a reason."""
        values = {i: graph.tensor(node.inputs[i]).value for i in ROW_INPUTS[node.op_type]
                  if i < len(node.inputs) and node.inputs[i] is not None}
        if missing := [i for i, v in values.items() if v is None]:
            return f"input {missing[0]} is not constant"
        row_bytes = max(_nbytes(v, node) // n for v in values.values())
        return "one row is over the limit" if row_bytes > self.limit else (values, row_bytes)

    def _matmul_nbits(self, graph: IrGraph, node: Node, begin: Callable[..., _Rewrite]) -> str | None:
        n = int(node.attributes["N"])
        if len(node.inputs) > 4 and node.inputs[4] is not None:
            return "input g_idx is not supported"
        found = self._by_rows(graph, node, n)
        if isinstance(found, str):
            return found
        (values, row_bytes), inputs, attrs = found, list(node.inputs), dict(node.attributes)
        rw = begin()
        parts = []
        for a, b in chunk_ranges(n, self.limit // row_bytes, COLUMN_ALIGN):
            ins = [rw.piece(t, f"rows_{a}_{b}", _rows(values[i], n, a, b)) if i in values else t
                   for i, t in enumerate(inputs)]
            parts.append(rw.emit("MatMulNBits", ins, f"cols_{a}_{b}", {**attrs, "N": b - a}, domain=MS))
        rw.concat(parts)
        return None


def _tied_columns(graph: IrGraph, node: Node, limit: int) -> tuple[str, str, np.ndarray, NodeId | None] | None:
    """For a float Gather whose table a MatMul also reads through a Transpose: (the MatMul's
    piece source, its key prefix, the [K, V] matrix it cuts into column pieces, the Transpose to
    drop), so the Gather reuses those pieces; None otherwise (or when the MatMul would cut K)."""
    if node.op_type != "Gather" or node.domain != "":
        return None

    def transpose2d(nid: NodeId) -> bool:
        t = graph.node(nid)
        return t.op_type == "Transpose" and t.domain == "" and list(t.attributes.get("perm", [1, 0])) == [1, 0]

    def read_by_matmul(tid: str) -> bool:
        return any(graph.node(c).op_type == "MatMul" and graph.node(c).inputs[1] == tid for c in graph.consumers(tid))

    data = node.inputs[0]
    found = None
    nid = graph.producer(data)
    if nid is not None and transpose2d(nid):  # Gather(Transpose(W)), MatMul(x, W)
        source = graph.node(nid).inputs[0]
        w = graph.tensor(source).value
        if w is not None and w.ndim == 2 and w.dtype != object and read_by_matmul(source):
            found = (source, "", w, nid)
    elif (e := graph.tensor(data).value) is not None and e.ndim == 2 and e.dtype != object:
        for c in graph.consumers(data):  # Gather(E), MatMul(x, Transpose(E))
            if transpose2d(c) and read_by_matmul(graph.node(c).outputs[0]):
                found = (data, "T/", e.T, None)
    if found is None or found[2].shape[0] * _element_bytes(found[2]) > limit:
        return None
    return found


def _nbytes(value: np.ndarray, node: Node) -> int:
    """Device bytes of a constant input of `node` (its dtype's storage, padded to a word)."""
    return int(from_numpy(value.dtype).nbytes(value.size))


def _element_bytes(value: np.ndarray) -> int:
    """Device bytes per element of a matrix cut into rows/columns (at least one)."""
    return max(from_numpy(value.dtype).bits // 8, 1)


def _constant(graph: IrGraph, tid: str) -> tuple[np.ndarray | None, NodeId | None]:
    """(value, the Transpose node it came through) of a constant, else (None, None).

    A Transpose of a weight too big to fold (a tied lm_head reusing the embedding) counts: its
    pieces are transposed on the host, and the Transpose goes once nothing else reads it.
    """
    # A folded Transpose counts too, so that its pieces are named after the table it transposes
    # (a Gather of that table shares them: rule 2's tied case).
    nid = graph.producer(tid)
    if nid is not None and (p := graph.node(nid)).op_type == "Transpose" and p.domain == "":
        src = graph.tensor(p.inputs[0]).value
        if src is not None and src.dtype != object:
            return np.transpose(src, p.attributes.get("perm")), nid
    if (value := graph.tensor(tid).value) is not None:
        return value, None
    return None, None
