"""EpilogueFusionPass: elementwise ops after a MatMulNBits run in its kernels' epilogue.

A product followed by a bias Add, an activation (Relu, Gelu, Sigmoid, Tanh, SiLU as
x * Sigmoid(x), ...) or a residual Add otherwise writes its [M, N] output, and a second dispatch
reads it back. The MatMulNBits kernels end in shaders/quantized/epilogue.wgsl's nbits_epilogue,
which evaluates such a program per output element, so the pair becomes one dispatch.
onnxruntime-genai's SwiGLU (gate -> Sigmoid, Mul, Mul by up) becomes two: gate, then up with
the fused Sigmoid·Mul·Mul reading gate's output in its epilogue.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from onyxia.compiler.pass_api import CompileContext, Pass, PassResult, Stage
from onyxia.compiler.passes.fusion import ElementwiseFusionPass
from onyxia.ir.graph import IrGraph, NodeId
from onyxia.ir.shapes import numel
from onyxia.operators.base import InferenceCtx
from onyxia.operators.fused import FUSED_DOMAIN
from onyxia.operators.quantized import MatMulNBitsShared

PRODUCTS = {("com.microsoft", "MatMulNBits"), (FUSED_DOMAIN, "MatMulNBitsShared")}
_OPERAND = re.compile(r"\bx(\d+)\b")


@dataclass(frozen=True)
class EpilogueReport:
    """{product node: the elementwise node fused into it}, {product node: why not}."""

    fused: dict[str, str]
    skipped: dict[str, str]


class EpilogueFusionPass(Pass):
    """Optimization stage, after ElementwiseFusionPass (which builds the chains it absorbs).

    1. For each MatMulNBits (or MatMulNBitsShared) whose float32 output is read by exactly one
       node and is not a graph output: that node must be a FusedElementwise or a table
       elementwise op ElementwiseFusionPass accepts, producing the product's shape; its other
       operands must be the output's full shape, an [N] row (ones before it) or a scalar;
       attribute parameters must be finite floats (they become WGSL literals).
    2. Rewrites the pair into one onyxia::MatMulNBitsShared writing the elementwise node's
       output, with `epilogue_exprs` / `epilogue_inputs` and the operands as inputs 9 on.
    3. Every product left alone gets its reason (EpilogueReport in ctx.reports["epilogue-fusion"]).
    """

    name = "epilogue-fusion"
    stage = Stage.OPTIMIZATION

    def run(self, graph: IrGraph, ctx: CompileContext) -> PassResult:
        fused: dict[str, str] = {}
        skipped: dict[str, str] = {}
        elementwise = ElementwiseFusionPass()
        for nid in graph.topological_order():
            if not graph.has_node(nid):
                continue
            node = graph.node(nid)
            if (node.domain, node.op_type) not in PRODUCTS or node.attributes.get("epilogue_exprs"):
                continue
            plan = self._match(graph, ctx, nid, elementwise)
            if isinstance(plan, str):
                skipped[node.name] = plan
                continue
            fused[node.name] = graph.node(plan[0]).name
            self._rewrite(graph, nid, *plan)
        ctx.reports[self.name] = EpilogueReport(fused, skipped)
        return PassResult(bool(fused), f"{len(fused)} epilogues fused; {len(skipped)} products left alone")

    @staticmethod
    def _match(graph: IrGraph, ctx: CompileContext, nid: NodeId, elementwise: ElementwiseFusionPass):
        """(consumer, exprs, operand inputs) or the reason there is none."""
        node = graph.node(nid)
        y = node.outputs[0]
        out = graph.tensor(y)
        if out.dtype is None or out.dtype.name != "float32":
            return f"output is {out.dtype}, not float32 (the epilogue would skip a rounding)"
        consumers = graph.consumers(y)
        if y in graph.outputs or len(consumers) != 1:
            return f"output is read by {len(consumers)} nodes{' and is a graph output' if y in graph.outputs else ''}"
        cid = consumers[0]
        consumer = graph.node(cid)
        if (consumer.domain, consumer.op_type) == (FUSED_DOMAIN, "FusedElementwise"):
            exprs = list(consumer.attributes["exprs"])
            params = dict(zip(consumer.attributes.get("param_names", []), consumer.attributes.get("param_values", [])))
        else:
            found = elementwise._expression(graph, ctx, cid)
            if found is None or found[0] is None:
                return f"its reader {consumer.op_type} is not a fusible elementwise op"
            _, wgsl, params = found
            exprs = [wgsl]
        if len(consumer.outputs) != 1 or consumer.inputs.count(y) < 1:
            return f"its reader {consumer.op_type} has several outputs"
        result = graph.tensor(consumer.outputs[0])
        if result.dtype is None or result.dtype.name != "float32" or result.value is not None:
            return f"{consumer.op_type}'s output is not a computed float32 tensor"
        node_ctx = InferenceCtx(graph, consumer, ctx)
        if not node_ctx.same_shape(result.shape, out.shape):
            return f"{consumer.op_type} broadcasts the product to {result.shape}"
        n = out.shape[-1]
        for t in consumer.inputs:
            if t is None or t == y:
                continue
            shape = graph.tensor(t).shape
            if shape is None:
                return f"operand '{t}' has no known shape"
            row = len(shape) >= 1 and node_ctx.same_dim(shape[-1], n) and all(d == 1 for d in shape[:-1])
            if not (numel(shape) == 1 or row or node_ctx.same_shape(shape, out.shape)):
                return f"operand '{t}' {shape} is neither the product's shape, an [N] row nor a scalar"
        for name, value in params.items():
            if isinstance(value, bool) or not isinstance(value, float) or not math.isfinite(value):
                return f"{consumer.op_type}'s parameter {name} = {value!r} is not a finite float"
            exprs = [re.sub(rf"\b{name}\(\)", f"({value!r})", e) for e in exprs]  # repr: a WGSL float literal
        return cid, exprs, list(consumer.inputs)

    @staticmethod
    def _rewrite(graph: IrGraph, nid: NodeId, cid: NodeId, exprs: list[str], operands: list[str]) -> None:
        node, consumer = graph.node(nid), graph.node(cid)
        y, result = node.outputs[0], consumer.outputs[0]
        inputs = list(node.inputs) + [None] * (9 - len(node.inputs))
        slots: list[int] = []
        for t in operands:
            if t == y:
                slots.append(-1)
            else:
                inputs.append(t)
                slots.append(len(inputs) - 1)
        attrs = {**node.attributes, "epilogue_exprs": exprs, "epilogue_inputs": slots,
                 "epilogue_ops": [consumer.op_type]}
        kept = graph.tensor(result)
        name = node.name
        graph.remove_node(cid)
        graph.remove_node(nid)
        if result not in graph.tensors:
            graph.add_tensor(kept)
        graph.add_node(MatMulNBitsShared.op_type, inputs, [result], attrs, domain=FUSED_DOMAIN, name=name)
