"""DynamicQuantFusionPass: transformers.js' q8 MatMuls as one fused kernel each.

onnxruntime's quantize_dynamic (what transformers.js' "q8" / "int8" / "uint8" decoders come
from) spells each MatMul out as DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul. Expanded
as written (operators/quantized/qlinear.py) that is a range reduction, an elementwise
quantization, an int32 product and a float tail per MatMul (the 2-layer fixture's decode step
ran 308 dispatches); fused, one dispatch per MatMul in a decode step (operators/quantized/
dynamic_matmul.py). Runs before function expansion, which would decompose the chain.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnx import TensorProto

from onyxia.compiler.pass_api import CompileContext, Pass, PassResult, Stage
from onyxia.ir.graph import IrGraph, Node, NodeId
from onyxia.operators.elementwise.fused import FUSED_DOMAIN
from onyxia.operators.quantized.dynamic_matmul import DQ_MAX_K, DynamicQuantMatMul, DynamicRange


@dataclass(frozen=True)
class DynamicQuantReport:
    """{x: the fused nodes (their outputs) reading x}, {node: why it was left as written}."""

    fused: dict[str, list[str]]
    skipped: dict[str, str]


@dataclass(frozen=True)
class _Chain:
    nodes: tuple[NodeId, ...]  # MatMulInteger, Cast, the scales' Mul, the output Mul
    b: str
    b_scale: str
    b_zp: str | None
    y: str


class DynamicQuantFusionPass(Pass):
    """Resolution stage (after symbolic resolution and If inlining, before function expansion).

    1. For each DynamicQuantizeLinear(x) -> (q, scale, zp), matches every reader of q that is
       MatMulInteger(q, B, zp, [B_zp]) -> Cast(to float) -> Mul(., Mul(scale, B_scale)), with
       B a constant int8 / uint8 [K, N] (N a multiple of 4, K <= DQ_MAX_K), B_zp and B_scale
       constants of 1 or N elements, and no intermediate read elsewhere or a graph output.
    2. Each match becomes onyxia::DynamicQuantMatMul(x, B, B_scale, [B_zp]) writing the Mul's
       output; with two or more matches on one x, one onyxia::DynamicRange(x) is made for all
       (input 4), used when x has more than one row.
    3. The DynamicQuantizeLinear goes when nothing reads its outputs any more.
    4. Every chain left as written gets its reason in a DynamicQuantReport
       (ctx.reports["dynamic-quant-fusion"]).
    """

    name = "dynamic-quant-fusion"
    stage = Stage.RESOLUTION
    after = ("symbolic-resolution", "if-inlining")  # chains in inlined If branches too

    def run(self, graph: IrGraph, ctx: CompileContext) -> PassResult:
        fused: dict[str, list[str]] = {}
        skipped: dict[str, str] = {}
        for nid in graph.topological_order():
            if not graph.has_node(nid):  # a chain fused earlier
                continue
            node = graph.node(nid)
            if node.op_type != "DynamicQuantizeLinear" or node.domain not in ("", "ai.onnx"):
                continue
            x, (q, scale, zp) = node.inputs[0], (list(node.outputs) + [None, None])[:3]
            chains = []
            for reader in graph.consumers(q):
                chain = _match(graph, reader, q, scale, zp)
                if isinstance(chain, str):
                    skipped[graph.node(reader).name] = chain
                else:
                    chains.append(chain)
            if not chains:
                continue
            ranges = None
            if len(chains) > 1:
                ranges = graph.fresh_name(f"{x}/dynamic_range")
                graph.add_node(DynamicRange.op_type, [x], [ranges], domain=FUSED_DOMAIN,
                               name=f"{node.name}/DynamicRange")
            for c in chains:
                names = [graph.node(n).name for n in c.nodes]
                for n in reversed(c.nodes):  # readers first: each removal drops the tensors it read last
                    graph.remove_node(n)
                graph.add_node(DynamicQuantMatMul.op_type, [x, c.b, c.b_scale, c.b_zp] + ([ranges] if ranges else []),
                               [c.y], domain=FUSED_DOMAIN, name=f"{names[0]}/DynamicQuantMatMul")
            fused[x] = [c.y for c in chains]
            if not any(t and (graph.consumers(t) or t in graph.outputs) for t in node.outputs):
                graph.remove_node(nid)
        ctx.reports[self.name] = DynamicQuantReport(fused, skipped)
        count = sum(len(v) for v in fused.values())
        return PassResult(bool(fused), f"{count} MatMulInteger chains fused on {len(fused)} activations; "
                                       f"{len(skipped)} left as written")


def _only_reader(graph: IrGraph, tensor: str) -> Node | None:
    """The one node reading `tensor` (not a graph output), else None."""
    readers = graph.consumers(tensor)
    if len(readers) != 1 or tensor in graph.outputs:
        return None
    return graph.node(readers[0])


def _constant(graph: IrGraph, tensor: str | None, kinds: tuple[str, ...], count: int | None) -> bool:
    """Whether `tensor` is a constant of one of `kinds` with 1 or `count` elements."""
    if tensor is None:
        return False
    value = graph.tensor(tensor).value
    return (value is not None and value.dtype.name in kinds
            and (count is None or value.size in (1, count) and value.ndim <= 1))


def _match(graph: IrGraph, reader: NodeId, q: str, scale: str | None, zp: str | None) -> _Chain | str:
    """The chain MatMulInteger -> Cast -> Mul starting at `reader`, or why it is not one."""
    mm = graph.node(reader)
    if mm.op_type != "MatMulInteger" or mm.domain not in ("", "ai.onnx"):
        return f"reads the quantized activation as {mm.op_type}, not MatMulInteger"
    inputs = (list(mm.inputs) + [None] * 4)[:4]
    if inputs[0] != q or inputs[2] is None or inputs[2] != zp:
        return "MatMulInteger does not take the DynamicQuantizeLinear's value and zero point as A"
    b, b_zp = inputs[1], inputs[3]
    if not _constant(graph, b, ("int8", "uint8"), None) or graph.tensor(b).value.ndim != 2:
        return "B is not a constant int8 / uint8 matrix"
    k, n = graph.tensor(b).value.shape
    if n % 4 or k > DQ_MAX_K:
        return f"B [{k}, {n}]: the fused kernel takes N a multiple of 4 and K <= {DQ_MAX_K}"
    if b_zp is not None and (not _constant(graph, b_zp, (graph.tensor(b).value.dtype.name,), n)):
        return "B's zero point is not a constant of B's dtype with 1 or N elements"
    cast = _only_reader(graph, mm.outputs[0])
    if cast is None or cast.op_type != "Cast" or cast.attributes.get("to") != TensorProto.FLOAT:
        return "the int32 product is not read by one Cast to float alone"
    mul = _only_reader(graph, cast.outputs[0])
    if mul is None or mul.op_type != "Mul" or len(mul.inputs) != 2:
        return "the float product is not read by one Mul alone"
    other = mul.inputs[1] if mul.inputs[0] == cast.outputs[0] else mul.inputs[0]
    scales = graph.producer(other)
    scales_node = graph.node(scales) if scales is not None else None
    if (scales_node is None or scales_node.op_type != "Mul" or scale not in scales_node.inputs
            or _only_reader(graph, other) is None):
        return "the product is not scaled by Mul(activation scale, B scale) read by it alone"
    b_scale = scales_node.inputs[1] if scales_node.inputs[0] == scale else scales_node.inputs[0]
    if not _constant(graph, b_scale, ("float32",), n):
        return "B's scale is not a float32 constant of 1 or N elements"
    return _Chain((reader, cast.id, scales, mul.id), b, b_scale, b_zp, mul.outputs[0])
