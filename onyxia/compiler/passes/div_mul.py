"""DivMulFusionPass: x * (1 / y) becomes x / y, as onnxruntime rewrites it.

PyTorch exports an RMS norm's `x * torch.rsqrt(v)` as Sqrt, Div(1, .) and Mul. onnxruntime's
basic graph optimizations (on by default) replace the Div-then-Mul by one Div, which rounds once
instead of twice: its outputs differ from the graph's in the last bit. Where an int8 quantization
follows (transformers.js' q8 files: DynamicQuantizeLinear after each norm), a last-bit change can
move a value across a rounding midpoint, and onyxia computing the graph as written gave logits
1.8e-2 away from onnxruntime's (2.3e-7 from onnxruntime's with its optimizations off). Making
the same rewrite keeps the two engines on the same side of every midpoint.
"""

from __future__ import annotations

from onyxia.compiler.pass_api import CompileContext, Pass, Stage
from onyxia.ir.graph import IrGraph, NodeId


class DivMulFusionPass(Pass):
    """Optimization stage: Mul(x, Div(1, y)) (either operand order) -> Div(x, y), where the 1 is
    a constant of one element, the dtype a float, Div's output has the shape of y and feeds only
    that Mul (not a graph output). The Div(1, y) goes, so y keeps a single reader."""

    name = "div-mul-fusion"
    stage = Stage.OPTIMIZATION

    def run(self, graph: IrGraph, ctx: CompileContext) -> bool:
        changed = False
        for nid in graph.topological_order():
            node = graph.node(nid)
            if (node.domain, node.op_type) != ("", "Mul") or len(node.inputs) != 2:
                continue
            for side in (0, 1):
                found = self._reciprocal(graph, node.inputs[side], nid)
                if found is not None:
                    other, reciprocal = node.inputs[1 - side], graph.producer(node.inputs[side])
                    graph.replace_node(nid, "Div", [other, found])
                    graph.remove_node(reciprocal)  # read by nothing now: y keeps one reader
                    changed = True
                    break
        return changed

    @staticmethod
    def _reciprocal(graph: IrGraph, tid: str | None, mul: NodeId) -> str | None:
        """y where `tid` is Div(1, y) read only by node `mul`, else None."""
        producer = graph.producer(tid) if tid else None
        if producer is None or tid in graph.outputs or graph.consumers(tid) != [mul]:
            return None
        div = graph.node(producer)
        if (div.domain, div.op_type) != ("", "Div") or len(div.inputs) != 2 or None in div.inputs:
            return None
        one, y = (graph.tensor(t) for t in div.inputs)
        out = graph.tensor(tid)
        if out.dtype is None or not out.dtype.is_float or one.value is None or one.is_symbolic_value \
                or one.value.size != 1:
            return None
        if float(one.value.reshape(())) != 1.0 or y.shape is None or tuple(y.shape) != tuple(out.shape):
            return None
        return div.inputs[1]


__all__ = ["DivMulFusionPass"]
