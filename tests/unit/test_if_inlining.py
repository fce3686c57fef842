"""IfInliningPass: an If on a constant condition becomes its taken branch in the main graph
(nested Ifs too); an If on a run-time condition stays an If."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline, Stage
from onyxia.operators import core_operator_registry
from tests.control_models import if_model, vi
from tests.helpers import make_model


def resolved(model):
    graph = onyxia.load_model(model)
    return CompilerPipeline(core_operator_registry()).run_passes(graph, {}, until=Stage.RESOLUTION)


def test_a_constant_condition_inlines_the_taken_branch():
    for cond, arm, ops in ((True, "then_branch", ["Add"]), (False, "else_branch", ["Mul", "Neg"])):
        graph = resolved(if_model(cond))
        assert sorted(n.op_type for n in graph.nodes) == sorted([*ops, "Identity"])
        assert all(n.name.startswith(f"choose/{arm}/") for n in graph.nodes if n.op_type != "Identity")
        assert graph.producer("o") is not None and graph.node(graph.producer("o")).op_type == "Identity"


def test_nested_ifs_on_constant_nodes_are_inlined_and_run_time_ones_stay():
    inner = h.make_node("If", ["k"], ["r"],
                        then_branch=h.make_graph([h.make_node("Abs", ["x"], ["a"])], "t2", [], [vi("a")]),
                        else_branch=h.make_graph([h.make_node("Neg", ["x"], ["n"])], "e2", [], [vi("n")]), name="inner")
    then = h.make_graph([h.make_node("Constant", [], ["k"], value=h.make_tensor("k", TP.BOOL, [], [False])), inner,
                         h.make_node("Sqrt", ["r"], ["q"])], "then", [], [vi("q")])
    orelse = h.make_graph([h.make_node("Exp", ["x"], ["e"])], "else", [], [vi("e")])
    outer = h.make_node("If", ["c"], ["o"], then_branch=then, else_branch=orelse, name="outer")
    live = h.make_node("If", ["d"], ["p"], then_branch=orelse, else_branch=orelse, name="live")
    model = make_model([outer, live], [("x", np.float32, [2]), ("d", np.bool_, [])], ["o", "p"],
                       {"c": np.array(True)})
    graph = resolved(model)
    assert sorted(n.op_type for n in graph.nodes) == ["Identity", "Identity", "If", "Neg", "Sqrt"]  # no Abs, Exp
    assert "outer/then_branch/inner/else_branch/Neg_0" in {n.name for n in graph.nodes}
