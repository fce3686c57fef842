"""RmsNormFusionPass: an RMS norm spelled out in elementwise ops becomes one row-norm node.

PyTorch exports `x * rsqrt(mean(x^2) + eps) * weight` (Hugging Face's RMSNorm, in every Optimum
and transformers.js decoder) as Pow, ReduceMean, Add, Sqrt, Div(1, .), Mul (x / . after
DivMulFusionPass), an optional Cast back to the input type and Mul by the weight: four or five
dispatches and three passes over the row for each norm, twice a layer. onnxruntime fuses the same
chain into SimplifiedLayerNormalization (its SimplifiedLayerNormFusion); so does this pass, and
rownorm.wgsl does the row in one dispatch.
"""

from __future__ import annotations

import numpy as np

from onyxia.compiler.pass_api import CompileContext, Pass, Stage
from onyxia.ir import dtypes
from onyxia.ir.graph import IrGraph, NodeId, TensorDef, TensorKind


class RmsNormFusionPass(Pass):
    """Optimization stage, after DivMulFusionPass: Div(x, Sqrt(Add(ReduceMean(Pow(x, 2), last
    axis, keepdims), eps))) over float32 x, each link read only by the next, becomes
    SimplifiedLayerNormalization(x, weight) where a Mul by a constant weight [K] follows (through
    a Cast to float32), else SimplifiedLayerNormalization(x, ones [K]). The chain's other nodes
    are left for dead-code elimination."""

    name = "rms-norm-fusion"
    stage = Stage.OPTIMIZATION

    def run(self, graph: IrGraph, ctx: CompileContext) -> bool:
        changed = False
        for nid in graph.topological_order():
            if not graph.has_node(nid):
                continue
            node = graph.node(nid)
            if (node.domain, node.op_type) != ("", "Div") or len(node.inputs) != 2 or None in node.inputs:
                continue
            eps = self._root_mean_square(graph, *node.inputs)
            if eps is None:
                continue
            x = node.inputs[0]
            size = graph.tensor(x).shape[-1]
            target, gamma = self._weight(graph, node.outputs[0], size)
            if gamma is None:
                gamma = graph.fresh_name(f"{node.name}/ones")
                graph.add_tensor(TensorDef(gamma, dtypes.FLOAT32, (size,), TensorKind.WEIGHT,
                                           np.ones(size, np.float32)))
                target = nid
            graph.replace_node(target, "SimplifiedLayerNormalization", [x, gamma], {"axis": -1, "epsilon": eps})
            changed = True
        return changed

    @staticmethod
    def _only(graph: IrGraph, tid: str | None, op_type: str, consumer: NodeId):
        """The node producing `tid` if it is an `op_type` read only by `consumer`, else None."""
        nid = graph.producer(tid) if tid else None
        if nid is None or tid in graph.outputs or graph.consumers(tid) != [consumer]:
            return None
        node = graph.node(nid)
        return node if (node.domain, node.op_type) == ("", op_type) else None

    def _root_mean_square(self, graph: IrGraph, x: str, root: str) -> float | None:
        """eps where `root` is sqrt(mean(x^2, last axis) + eps) for the Div reading it, else None."""
        t = graph.tensor(x)
        if t.dtype != dtypes.FLOAT32 or not t.shape or not isinstance(t.shape[-1], int):
            return None
        source = graph.producer(x)
        while source is not None and graph.node(source).op_type == "Cast" \
                and graph.tensor(graph.node(source).inputs[0]).dtype == t.dtype:  # a Cast that changes nothing
            source = graph.producer(graph.node(source).inputs[0])
        if source is not None and graph.node(source).op_type == "DequantizeLinear":
            # onnxruntime gives each reader of a DequantizeLinear its own copy (its QDQ node
            # units), so the chain no longer reads one x and stays unfused there: so here too,
            # that the two engines compute this norm alike (an int8 quantization may follow).
            return None
        div = graph.consumers(root)
        if len(div) != 1:
            return None
        sqrt = self._only(graph, root, "Sqrt", div[0])
        add = sqrt and self._only(graph, sqrt.inputs[0], "Add", sqrt.id)
        if not add or len(add.inputs) != 2:
            return None
        for mean_in, eps_in in (add.inputs, add.inputs[::-1]):
            eps = _scalar(graph, eps_in)
            mean = self._only(graph, mean_in, "ReduceMean", add.id)
            if eps is not None and mean is not None:
                break
        else:
            return None
        rank = len(t.shape)
        axes = mean.attributes.get("axes")
        if axes is None and len(mean.inputs) > 1 and mean.inputs[1]:
            value = graph.tensor(mean.inputs[1]).value
            axes = None if value is None or value.dtype == object else value.reshape(-1).tolist()
        if axes is None or [a % rank for a in axes] != [rank - 1] or mean.attributes.get("keepdims", 1) != 1:
            return None
        power = self._only(graph, mean.inputs[0], "Pow", mean.id)
        if power is None or power.inputs[0] != x or _scalar(graph, power.inputs[1]) != 2.0:
            return None
        return eps

    def _weight(self, graph: IrGraph, y: str, size: int) -> tuple[NodeId | None, str | None]:
        """(the Mul by a constant weight [size] that follows `y`, through a Cast to float32, and
        that weight), else (None, None)."""
        consumers = graph.consumers(y)
        if y in graph.outputs or len(consumers) != 1:
            return None, None
        node = graph.node(consumers[0])
        if (node.domain, node.op_type) == ("", "Cast") and node.attributes.get("to") == dtypes.FLOAT32.onnx:
            out = node.outputs[0]
            if out in graph.outputs or len(graph.consumers(out)) != 1:
                return None, None
            y, node = out, graph.node(graph.consumers(out)[0])
        if (node.domain, node.op_type) != ("", "Mul") or len(node.inputs) != 2:
            return None, None
        weight = node.inputs[1] if node.inputs[0] == y else node.inputs[0]
        w = graph.tensor(weight)
        if w.value is None or w.dtype != dtypes.FLOAT32 or tuple(w.shape or ()) != (size,) or weight == y:
            return None, None
        return node.id, weight


def _scalar(graph: IrGraph, tid: str | None) -> float | None:
    """The value of a constant float tensor of one element, else None."""
    if not tid:
        return None
    t = graph.tensor(tid)
    if t.value is None or t.value.dtype == object or t.value.size != 1 or t.dtype is None or not t.dtype.is_float:
        return None
    return float(t.value.reshape(()))


__all__ = ["RmsNormFusionPass"]
