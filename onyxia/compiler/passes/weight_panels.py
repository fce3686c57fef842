"""WeightPanelsPass: constant matrix-product weights stored in the column panels their kernels
stream best (operators/matmul/panels.py says why, with the measurement).

Every kernel variant of a product (operators/matmul/gemv.py, gemm_variants.py, matmul.py's coalesced
gemv) reads B through the same index when it is in panels (def B_PANELS), for every M, so
decode and prefill share the one copy, and the layout suits every adapter: the plan does not
depend on the adapter it will run on.
"""

from __future__ import annotations

from dataclasses import dataclass

from onyxia.compiler.pass_api import CompileContext, Pass, PassResult, Stage
from onyxia.ir.graph import IrGraph, NodeId, TensorDef, TensorKind
from onyxia.operators.elementwise.fused import FUSED_DOMAIN
from onyxia.operators.matmul.panels import PANEL_COLUMNS, PANELS_ATTR, to_panels

# (domain, op type) of the products whose B may be stored in panels; Gemm reads transB.
PRODUCTS = {("", "MatMul"), ("ai.onnx", "MatMul"), ("", "Gemm"), ("ai.onnx", "Gemm"),
            (FUSED_DOMAIN, "MatMulEpilogue"), (FUSED_DOMAIN, "GemmEpilogue")}
FLOATS = ("float32", "float16", "bfloat16")  # what the product kernels compute in f32


@dataclass(frozen=True)
class PanelReport:
    """{weight: the product nodes now reading it in panels}, {weight: why it stays row-major}."""

    panels: dict[str, list[str]]
    skipped: dict[str, str]


class WeightPanelsPass(Pass):
    """Optimization stage, last: after SplitLargeTensorsPass (whose pieces it lays out, each
    still within the binding limit: the element count does not change) and EpilogueFusionPass
    (whose fused products it rewrites like the plain ones).

    1. Finds each constant B (input 1) of a MatMul, Gemm or their Epilogue forms: a 2-D float
       weight that is not a graph input or output, read only as B of such products (a tied
       embedding table that a Gather also reads stays as it is: stored once), by every one in
       the same orientation (Gemm's transB: B^T is laid out).
    2. Requires K and N multiples of 4 (the kernels read vec4s of a panel row) and N wider than
       one panel (a single panel is the row-major layout already).
    3. Stores B once in panels as a new weight `<name>/panels` of shape [K, N], and points every
       product at it with PANELS_ATTR set (transB cleared). The original stays only if something
       else still reads it (planning stores only what steps read).
    4. Every weight left row-major gets its reason (PanelReport in ctx.reports["weight-panels"]).
    """

    name = "weight-panels"
    stage = Stage.OPTIMIZATION
    after = ("split-large-tensors", "epilogue-fusion")

    def run(self, graph: IrGraph, ctx: CompileContext) -> PassResult:
        panels: dict[str, list[str]] = {}
        skipped: dict[str, str] = {}
        weights = dict.fromkeys(graph.node(nid).inputs[1] for nid in graph.topological_order()
                                if _is_product(graph, nid) and len(graph.node(nid).inputs) > 1)
        for weight in weights:
            if weight is None or graph.tensor(weight).value is None:
                continue  # B computed on the device: nothing to lay out at compile time
            found = _declines(graph, weight)
            if isinstance(found, str):
                skipped[weight] = found
                continue
            readers, trans = found
            value = graph.tensor(weight).value
            logical = value.T if trans else value
            t = graph.tensor(weight)
            name = graph.fresh_name(f"{weight}/panels")
            graph.add_tensor(TensorDef(name, t.dtype, tuple(logical.shape), TensorKind.WEIGHT, to_panels(logical)))
            for nid in readers:
                node = graph.node(nid)
                attrs = {**node.attributes, PANELS_ATTR: 1}
                if trans:
                    attrs["transB"] = 0
                graph.replace_node(nid, node.op_type, [name if i == 1 else x for i, x in enumerate(node.inputs)],
                                   attrs, domain=node.domain)
            panels[weight] = [graph.node(nid).name for nid in readers]
        ctx.reports[self.name] = PanelReport(panels, skipped)
        return PassResult(bool(panels), f"{len(panels)} weights in column panels; {len(skipped)} left row-major")


def _is_product(graph: IrGraph, nid: NodeId) -> bool:
    node = graph.node(nid)
    return (node.domain, node.op_type) in PRODUCTS and not all(graph.tensor(o).value is not None for o in node.outputs)


def _declines(graph: IrGraph, weight: str) -> tuple[list[NodeId], bool] | str:
    """(the products reading `weight`, whether they read it transposed), or why it stays."""
    t = graph.tensor(weight)
    if weight in graph.inputs or weight in graph.outputs:
        return "it is a graph input or output"
    if t.dtype is None or t.dtype.name not in FLOATS or t.value.dtype == object:
        return f"it is {t.dtype}: only float products ({', '.join(FLOATS)}) read panels"
    if t.value.ndim != 2:
        return f"it is {t.value.ndim}-D, not a matrix"
    readers = graph.consumers(weight)
    orientations = set()
    for nid in readers:
        node = graph.node(nid)
        if not _is_product(graph, nid) or node.inputs.count(weight) != 1 or node.inputs[1] != weight:
            return f"{node.op_type} node '{node.name}' reads it other than as a product's B"
        if PANELS_ATTR in node.attributes:
            return f"'{node.name}' already reads its B in panels"
        orientations.add(node.op_type.startswith("Gemm") and bool(node.attributes.get("transB", 0)))
    if len(orientations) != 1:
        return "products read it both as it is and transposed"
    trans = orientations.pop()
    k, n = t.value.shape[::-1] if trans else t.value.shape
    if k % 4 or n % 4:
        return f"K = {k} and N = {n} are not both multiples of 4"
    if n <= PANEL_COLUMNS:
        return f"N = {n} fits one panel: row-major is its panel layout already"
    return sorted(readers), trans


__all__ = ["PanelReport", "WeightPanelsPass"]
