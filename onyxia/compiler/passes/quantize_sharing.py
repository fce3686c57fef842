"""SharedQuantizationPass: one int8 activation for every MatMulNBits that reads the same one.

With accuracy_level 4 each MatMulNBits quantizes its activation to int8 per block before its
integer dots (operators/quantized/quantized.py). An LLM layer feeds one normalized activation to q, k and
v (and another to gate and up): without this pass each of them quantizes it again, a dispatch
and a pass over the activation each time (41 quantize dispatches per decode step in the
8-layer benchmark model of benchmarks/bench_llm.py, 24 of them repeats).
"""

from __future__ import annotations

from dataclasses import dataclass

from onyxia.compiler.pass_api import CompileContext, Pass, PassResult, Stage
from onyxia.errors import OnyxiaError
from onyxia.ir.graph import IrGraph, NodeId
from onyxia.operators.base import InferenceCtx
from onyxia.operators.elementwise.fused import FUSED_DOMAIN
from onyxia.operators.normalization.normalization import NORM_OPS
from onyxia.operators.quantized.quantized import (
    RMSNORM_Q8_MAX_K,
    MatMulNBits,
    MatMulNBitsShared,
    QuantizeQ8,
    RmsNormQ8,
    chunked_q8,
)
from onyxia.operators.registry import resolve_operator

MS = "com.microsoft"


@dataclass(frozen=True)
class SharingReport:
    """{activation: the MatMulNBits nodes now reading its one QuantizeQ8}, {node: why not}, and
    the norms that quantize their output themselves."""

    shared: dict[str, list[str]]
    skipped: dict[str, str]
    fused_norms: list[str]


class SharedQuantizationPass(Pass):
    """Optimization stage.

    1. Collects the com.microsoft MatMulNBits nodes that take the chunked kernels' int8 path
       (accuracy_level 4, blocks of whole 32-weight groups up to 256, K bounded:
       quantized.chunked_q8) and groups them by (activation A, K, block_size).
    2. A group of two or more gets one onyxia::QuantizeQ8(A) -> (qa, sa, qsum) node, and each
       member becomes onyxia::MatMulNBitsShared (its inputs, then qa, sa, qsum), whose chunked
       kernel reads them instead of quantizing. The quantization is onnxruntime's per-block
       one either way, so results are unchanged. On adapters that are not CPU-type the members
       still quantize for their coalesced kernel themselves (QuantizeQ8 runs nowhere there).
    3. A QuantizeQ8 whose activation is output 0 of an RMS norm over the last axis
       (SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization: float32, mean and
       inv_std outputs unused) merges with it into onyxia::RmsNormQ8, which normalizes and
       quantizes in one dispatch (shaders/llm/rmsnorm_q8.wgsl). A lone MatMulNBits reading
       such a norm (the lm_head) gets its QuantizeQ8 for this too. When only those
       MatMulNBitsShared nodes read the norm's output (attribute y_nbits_only), a CPU-type
       adapter's kernel does not write it: its consumers read the int8 activation there.
    4. Every MatMulNBits left alone, and every QuantizeQ8 left unfused, gets its reason in a
       SharingReport (ctx.reports["quantize-sharing"]).
    """

    name = "quantize-sharing"
    stage = Stage.OPTIMIZATION

    def run(self, graph: IrGraph, ctx: CompileContext) -> PassResult:
        groups: dict[tuple[str, int, int], list[NodeId]] = {}
        skipped: dict[str, str] = {}
        for nid in graph.topological_order():
            node = graph.node(nid)
            if (node.domain, node.op_type) != (MS, "MatMulNBits"):
                continue
            if reason := self._why_not(graph, ctx, nid, groups):
                skipped[node.name] = reason
        shared: dict[str, list[str]] = {}
        fused: list[str] = []
        for (a, k, block), members in groups.items():
            names = [graph.node(n).name for n in members]
            norm = graph.producer(a)
            why_not_norm = _why_not_norm(graph, a, norm)
            if len(members) < 2 and why_not_norm:
                skipped[names[0]] = f"the only int8 reader of '{a}' (K {k}, block {block}); {why_not_norm}"
                continue
            quantize = self._share(graph, ctx, a, k, block, members)
            shared[a] = names
            if why_not_norm:
                skipped[graph.node(quantize).name] = why_not_norm
            else:
                fused.append(self._fuse_norm(graph, ctx, norm, quantize))  # type: ignore[arg-type]
        ctx.reports[self.name] = SharingReport(shared, skipped, fused)
        count = sum(len(v) for v in shared.values())
        return PassResult(bool(shared), f"{count} MatMulNBits share {len(shared)} quantized activations, "
                                        f"{len(fused)} made by their norm; {len(skipped)} left alone")

    @staticmethod
    def _why_not(graph: IrGraph, ctx: CompileContext, nid: NodeId,
                 groups: dict[tuple[str, int, int], list[NodeId]]) -> str | None:
        """Adds `nid` to its group, or says why it cannot join one."""
        node = graph.node(nid)
        if all(graph.tensor(o).value is not None for o in node.outputs):
            return "folded"
        op = resolve_operator(graph, ctx.registry, node)
        if type(op) is not MatMulNBits:
            return f"MatMulNBits resolves to {type(op).__name__}, not the built-in operator"
        node_ctx = InferenceCtx(graph, node, ctx)
        level = int(node_ctx.attr("accuracy_level", 0))
        if level != 4:
            return f"accuracy_level {level}: f32 activations, nothing to quantize"
        try:
            spec = op.spec(node_ctx)
        except OnyxiaError as error:
            return f"invalid node ({error})"
        if not chunked_q8(spec, level):
            return (f"block_size {spec.block} / K {spec.k}: not the chunked int8 kernels' layout "
                    "(whole 32-weight groups, block <= 256, K a multiple of the block)")
        if not op.packed_dot:
            return "registered with packed_dot=False"
        groups.setdefault((node.inputs[0], spec.k, spec.block), []).append(nid)
        return None

    @staticmethod
    def _share(graph: IrGraph, ctx: CompileContext, a: str, k: int, block: int, members: list[NodeId]) -> NodeId:
        first = graph.node(members[0])
        outs = [graph.fresh_name(f"{a}/q8_{part}") for part in ("qa", "sa", "qsum")]
        qid = graph.add_node("QuantizeQ8", [a], outs, {"K": k, "block_size": block}, domain=FUSED_DOMAIN,
                             name=f"{first.name}/QuantizeQ8")
        for out, (dtype, shape) in zip(outs, QuantizeQ8().infer(InferenceCtx(graph, graph.node(qid), ctx))):
            graph.tensor(out).dtype, graph.tensor(out).shape = dtype, tuple(shape)
        for nid in members:
            node = graph.node(nid)
            inputs = list(node.inputs) + [None] * (6 - len(node.inputs)) + outs
            graph.replace_node(nid, MatMulNBitsShared.op_type, inputs, node.attributes, domain=FUSED_DOMAIN)
        return qid

    @staticmethod
    def _fuse_norm(graph: IrGraph, ctx: CompileContext, norm: NodeId, quantize: NodeId) -> str:
        """Rule 3: norm + QuantizeQ8 -> RmsNormQ8 (same tensors: y, qa, sa, qsum, [sum])."""
        node, q = graph.node(norm), graph.node(quantize)
        epsilon = InferenceCtx(graph, node, ctx).attr("epsilon", NORM_OPS[_key(node)].epsilon)
        skip = node.op_type.startswith("Skip")
        x, skip_in, gamma, bias = ((node.inputs + [None] * 4)[:4] if skip
                                   else [node.inputs[0], None, node.inputs[1], None])
        outputs = [node.outputs[0], *q.outputs]
        total = node.outputs[3] if skip and len(node.outputs) > 3 else None
        has_sum = bool(total) and bool(graph.consumers(total) or total in graph.outputs)
        if has_sum:
            outputs.append(total)
        name = node.name
        # y read only by the MatMulNBitsShared nodes of this QuantizeQ8 (their CPU-type kernels
        # take qa, sa, qsum): RmsNormQ8 may leave it unwritten there.
        y = node.outputs[0]
        readers = [graph.node(c) for c in graph.consumers(y)]
        y_nbits_only = y not in graph.outputs and all(
            (c.domain, c.op_type) == (FUSED_DOMAIN, MatMulNBitsShared.op_type) and c.inputs[6] == q.outputs[0]
            for c in readers)
        kept = {t: graph.tensor(t) for t in outputs}
        graph.remove_node(quantize)
        graph.remove_node(norm)
        for t, definition in kept.items():  # removal drops the definitions of unread outputs
            if t not in graph.tensors:
                graph.add_tensor(definition)
        graph.add_node(RmsNormQ8.op_type, [x, skip_in, gamma, bias], outputs,
                       {**q.attributes, "epsilon": float(epsilon), "sum": int(has_sum),
                        "y_nbits_only": int(y_nbits_only)}, domain=FUSED_DOMAIN,
                       name=f"{name}/RmsNormQ8")
        return name


RMS_NORMS = {("", "SimplifiedLayerNormalization"), ("com.microsoft", "SimplifiedLayerNormalization"),
             (MS, "SkipSimplifiedLayerNormalization")}


def _key(node) -> tuple[str, str]:
    return ("" if node.domain == "ai.onnx" else node.domain, node.op_type)


def _why_not_norm(graph: IrGraph, a: str, norm: NodeId | None) -> str | None:
    """Why the producer of `a` cannot quantize it itself (rule 3), or None."""
    if norm is None:
        return f"'{a}' has no producer to quantize it"
    node = graph.node(norm)
    if _key(node) not in RMS_NORMS:
        return f"'{a}' comes from {node.op_type}, not an RMS norm that could quantize it"
    if a != node.outputs[0] or a in graph.outputs:
        return f"'{a}' is not only {node.op_type}'s normalized output"
    x = graph.tensor(node.inputs[0])
    tensors = [graph.tensor(t) for t in node.inputs if t is not None] + [graph.tensor(a)]
    if any(t.dtype is None or t.dtype.name != "float32" for t in tensors):
        return f"{node.op_type} is not float32 (y would be rounded before its quantization)"
    rank = len(x.shape or ())
    axis = node.attributes.get("axis", -1)
    if rank == 0 or axis not in (-1, rank - 1):
        return f"{node.op_type} normalizes more than the last axis"
    if x.shape[-1] > RMSNORM_Q8_MAX_K:
        return f"{node.op_type} rows of {x.shape[-1]} elements (the fused kernel takes up to {RMSNORM_Q8_MAX_K})"
    if node.op_type.startswith("Skip"):
        if graph.tensor(node.inputs[1]).shape != x.shape:
            return "SkipSimplifiedLayerNormalization's skip is broadcast"
        stats = node.outputs[1:3]
    else:
        stats = node.outputs[1:2]
    if any(t and (graph.consumers(t) or t in graph.outputs) for t in stats):
        return f"{node.op_type}'s mean / inv_std_var output is used"
    return None
