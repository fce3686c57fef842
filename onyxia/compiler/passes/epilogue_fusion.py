"""EpilogueFusionPass: elementwise ops after a matrix product or a convolution run in its
kernels' epilogue.

A product followed by a bias Add, an activation (Relu, Gelu, Sigmoid, Tanh, SiLU as
x * Sigmoid(x), ...) or a residual Add otherwise writes its [M, N] output, and a second dispatch
reads it back. The product kernels end in an epilogue function that evaluates such a program per
output element (shaders/matmul/epilogue.wgsl for MatMul and Gemm, whichever variant of the
Select runs and in the split-K finish pass when K is split; shaders/quantized/epilogue.wgsl for
MatMulNBits, onyxia::DynamicQuantMatMul and MatMulBnb4's packed kernel), so the pair becomes one
product. onnxruntime-genai's SwiGLU (gate -> Sigmoid, Mul, Mul by up) becomes two: gate, then up
with the fused Sigmoid·Mul·Mul reading gate's output in its epilogue. A Conv or ConvTranspose
followed by its activation (Relu, HardSwish, SiLU, Clip, ...) or a residual Add becomes one
onyxia::ConvEpilogue / ConvTransposeEpilogue (every kernel operators/conv/conv.py plans runs the
ops where it stores the output).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from onyxia.compiler.pass_api import CompileContext, Pass, PassResult, Stage
from onyxia.compiler.passes.fusion import ElementwiseFusionPass
from onyxia.ir.graph import IrGraph, Node, NodeId
from onyxia.ir.shapes import numel
from onyxia.operators.base import InferenceCtx
from onyxia.operators.conv.fused import ConvEpilogue, ConvTransposeEpilogue
from onyxia.operators.conv.scale import CHANNEL_SCALE_ATTR
from onyxia.operators.elementwise.elementwise import Clip
from onyxia.operators.elementwise.fused import FUSED_DOMAIN
from onyxia.operators.matmul.epilogue import spans
from onyxia.operators.matmul.matmul import GemmEpilogue, MatMulEpilogue
from onyxia.operators.quantized.dynamic_matmul import DynamicQuantMatMul
from onyxia.operators.quantized.matmul_bnb4 import MatMulBnb4Fused
from onyxia.operators.quantized.quantized import MatMulNBitsShared

# The quantized products whose kernels end in shaders/quantized/epilogue.wgsl ("nbits" kind):
# (domain, op type) -> (the fused op they become, its first epilogue operand input).
NBITS = {("com.microsoft", "MatMulNBits"): (MatMulNBitsShared.op_type, 9),
         (FUSED_DOMAIN, "MatMulNBitsShared"): (MatMulNBitsShared.op_type, 9),
         (FUSED_DOMAIN, DynamicQuantMatMul.op_type): (DynamicQuantMatMul.op_type, 5),
         # com.microsoft MatMulBnb4 left after function expansion runs the packed kernel
         ("com.microsoft", "MatMulBnb4"): (MatMulBnb4Fused.op_type, 3)}
# op type -> (fused operator, inputs before the epilogue operands)
PLAIN = {"MatMul": (MatMulEpilogue, 2), "Gemm": (GemmEpilogue, 3), "Conv": (ConvEpilogue, 3),
         "ConvTranspose": (ConvTransposeEpilogue, 3)}
FLOATS = ("float32", "float16", "bfloat16")  # what the matmul kernels compute in f32
MAX_STORAGE = 8  # storage buffers per dispatch that WebGPU guarantees (maxStorageBuffersPerShaderStage)


@dataclass(frozen=True)
class EpilogueReport:
    """{product node: the elementwise node fused into it}, {product node: why not}."""

    fused: dict[str, str]
    skipped: dict[str, str]


def _kind(node: Node) -> str | None:
    """"nbits", the plain op type (MatMul, Gemm, Conv, ConvTranspose), or None for anything else."""
    if (node.domain, node.op_type) in NBITS:
        return "nbits"
    if node.domain in ("", "ai.onnx") and node.op_type in PLAIN:
        return node.op_type
    return None


def _clip_expression(graph: IrGraph, ctx: CompileContext, node: Node) -> str | None:
    """Clip(x0) with its constant bounds as WGSL literals (ReLU6 = Clip(0, 6) of MobileNets),
    NaN propagating as the Clip kernel does; None when a bound is computed at run time.
    (ElementwiseFusionPass leaves Clip alone: it is not a table op.)"""
    expr = "x0"
    for name, bound in Clip().bounds(InferenceCtx(graph, node, ctx)).items():
        if bound is None:
            continue
        if bound[0] != "value" or not math.isfinite(float(bound[1])):
            return None
        expr = f"{'onyxia_maxf' if name == 'min' else 'onyxia_minf'}({expr}, {float(bound[1])!r})"
    return expr


class EpilogueFusionPass(Pass):
    """Optimization stage, after ElementwiseFusionPass (which builds the chains it absorbs).

    1. For each MatMul, Gemm, Conv, ConvTranspose or MatMulNBits (or MatMulNBitsShared) whose
       output is read by exactly one node and is not a graph output: that node must be a
       FusedElementwise, a table elementwise op ElementwiseFusionPass accepts or a Clip with
       constant bounds, producing the product's shape and dtype;
       attribute parameters must be finite floats (they become WGSL literals).
       - MatMul / Gemm / Conv / ConvTranspose: a float32, float16 or bfloat16 product (computed
         in f32; integer and int64-checked products, and the int32 convolutions ConvInteger
         lowers to, keep their own kernels). The kernel stores the product, then the ops over
         it as stored, so the result is the unfused plan's to the bit, float16 rounding
         included. Operands may broadcast to the output in any way; the kernel's
         storage buffers (a, b, [C or bias], y and one per operand) stay within WebGPU's 8.
       - MatMulNBits, DynamicQuantMatMul, MatMulBnb4 (packed kernel): float32 output; operands
         of the output's full shape, an [N] row (ones before it) or a scalar; the latter two's
         storage buffers within WebGPU's 8.
    2. Rewrites the pair into one onyxia::MatMulEpilogue / GemmEpilogue / ConvEpilogue /
       ConvTransposeEpilogue (operands from input 2, resp. 3), MatMulNBitsShared (from input
       9), DynamicQuantMatMul (from 5) or MatMulBnb4 (onyxia's, from 3) writing the elementwise
       node's output, with `epilogue_exprs` / `epilogue_inputs` (operators/matmul/epilogue.py).
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
            kind = _kind(node)
            if kind is None or node.attributes.get("epilogue_exprs"):
                continue
            plan = self._match(graph, ctx, nid, kind, elementwise)
            if isinstance(plan, str):
                skipped[node.name] = plan
                continue
            fused[node.name] = graph.node(plan[0]).name
            self._rewrite(graph, nid, kind, *plan)
        ctx.reports[self.name] = EpilogueReport(fused, skipped)
        return PassResult(bool(fused), f"{len(fused)} epilogues fused; {len(skipped)} products left alone")

    @staticmethod
    def _product_declines(graph: IrGraph, node: Node, kind: str) -> str | None:
        """Why the product itself cannot take an epilogue (None: it can)."""
        out = graph.tensor(node.outputs[0])
        dtype = out.dtype.name if out.dtype is not None else None
        if kind == "nbits":
            if dtype != "float32":
                return f"output is {out.dtype}, not float32 (the epilogue would skip a rounding)"
            return None
        if dtype not in FLOATS:
            return f"output is {out.dtype}: only float products ({', '.join(FLOATS)}) compute in f32"
        if any(t is None or graph.tensor(t).dtype != out.dtype for t in node.inputs[:2]):
            return "its operands' dtypes differ from the output's"
        return None

    @staticmethod
    def _match(graph: IrGraph, ctx: CompileContext, nid: NodeId, kind: str, elementwise: ElementwiseFusionPass):
        """(consumer, exprs, operand inputs) or the reason there is none."""
        node = graph.node(nid)
        if reason := EpilogueFusionPass._product_declines(graph, node, kind):
            return reason
        y = node.outputs[0]
        out = graph.tensor(y)
        consumers = graph.consumers(y)
        if y in graph.outputs or len(consumers) != 1:
            return f"output is read by {len(consumers)} nodes{' and is a graph output' if y in graph.outputs else ''}"
        cid = consumers[0]
        consumer = graph.node(cid)
        inputs = list(consumer.inputs)
        if (consumer.domain, consumer.op_type) == (FUSED_DOMAIN, "FusedElementwise"):
            exprs = list(consumer.attributes["exprs"])
            params = dict(zip(consumer.attributes.get("param_names", []), consumer.attributes.get("param_values", [])))
        elif (consumer.domain, consumer.op_type) in (("", "Clip"), ("ai.onnx", "Clip")):
            clip = _clip_expression(graph, ctx, consumer)
            if clip is None:
                return "its reader Clip has a bound computed at run time"
            exprs, params, inputs = [clip], {}, [y]  # constant bounds: literals, not operands
        else:
            found = elementwise._expression(graph, ctx, cid)
            if found is None or found[0] is None:
                return f"its reader {consumer.op_type} is not a fusible elementwise op"
            _, wgsl, params = found
            exprs = [wgsl]
        if len(consumer.outputs) != 1 or consumer.inputs.count(y) < 1:
            return f"its reader {consumer.op_type} has several outputs"
        result = graph.tensor(consumer.outputs[0])
        if result.dtype != out.dtype or result.value is not None:
            return f"{consumer.op_type}'s output is not a computed {out.dtype} tensor (it is {result.dtype})"
        node_ctx = InferenceCtx(graph, consumer, ctx)
        # spans, not same_shape: a product of literal 1s against a symbol that is 1 only at these
        # dims (a squeeze-excite's [N, C, 1, 1] times a late feature map) broadcasts.
        if not spans(node_ctx, result.shape, out.shape):
            return f"{consumer.op_type} broadcasts the product to {result.shape}"
        operands = list(dict.fromkeys(t for t in inputs if t is not None and t != y))
        for t in operands:
            shape = graph.tensor(t).shape
            if shape is None:
                return f"operand '{t}' has no known shape"
            if kind != "nbits":
                continue
            row = len(shape) >= 1 and spans(node_ctx, shape[-1:], out.shape[-1:]) and all(d == 1 for d in shape[:-1])
            if not (numel(shape) == 1 or row or spans(node_ctx, shape, out.shape)):
                return f"operand '{t}' {shape} is neither the product's shape, an [N] row nor a scalar"
        if kind == "nbits":  # (MatMulNBits' kernels bind what they bind: not counted here, as before)
            first = NBITS[(node.domain, node.op_type)][1]
            bound = 0 if first == 9 else 1 + sum(t is not None for t in node.inputs[:first]) + len(operands)
        else:
            bound = (3 + (len(node.inputs) > 2 and node.inputs[2] is not None) + len(operands)
                     + bool(node.attributes.get(CHANNEL_SCALE_ATTR)))  # a gate input (operators/conv/scale.py)
        if bound > MAX_STORAGE:
            return f"the kernel would bind {bound} storage buffers (WebGPU guarantees {MAX_STORAGE})"
        for name, value in params.items():
            if isinstance(value, bool) or not isinstance(value, float) or not math.isfinite(value):
                return f"{consumer.op_type}'s parameter {name} = {value!r} is not a finite float"
            exprs = [re.sub(rf"\b{name}\(\)", f"({value!r})", e) for e in exprs]  # repr: a WGSL float literal
        return cid, exprs, inputs

    @staticmethod
    def _rewrite(graph: IrGraph, nid: NodeId, kind: str, cid: NodeId, exprs: list[str], operands: list[str]) -> None:
        node, consumer = graph.node(nid), graph.node(cid)
        y, result = node.outputs[0], consumer.outputs[0]
        if kind == "nbits":
            op_type, first = NBITS[(node.domain, node.op_type)]
        else:
            op_type, first = PLAIN[kind][0].op_type, PLAIN[kind][1]
        inputs = list(node.inputs) + [None] * (first - len(node.inputs))
        slots: list[int] = []
        for t in operands:
            if t == y:
                slots.append(-1)
            elif t in inputs[first:]:  # one binding per distinct operand
                slots.append(inputs.index(t, first))
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
        graph.add_node(op_type, inputs, [result], attrs, domain=FUSED_DOMAIN, name=name)
