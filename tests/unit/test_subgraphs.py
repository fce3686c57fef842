"""Subgraphs in the IR: graph attributes load as IrGraphs that read the enclosing graph, their
outer reads are the node's implicit inputs (ordering, liveness, renames), names stay unique."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline, Stage
from onyxia.errors import ModelLoadError, UnsupportedOperatorError
from onyxia.ir.graph import IrGraph, TensorKind
from onyxia.operators import core_operator_registry
from tests.control_models import counting_loop, if_model, vi
from tests.helpers import compile_model, make_model


def test_branches_are_irgraphs_reading_the_outer_graph():
    graph = onyxia.load_model(if_model())
    node = next(n for n in graph.nodes if n.op_type == "If")
    then, orelse = node.attributes["then_branch"], node.attributes["else_branch"]
    assert isinstance(then, IrGraph) and then.parent is graph and orelse.parent is graph
    assert then.free_tensors() == ["x", "y"] and node.implicit_inputs == ["x", "y"]
    assert then.tensor("x") is graph.tensor("x")  # resolved through the parent
    assert sorted(graph.consumers("x")) == [node.id]


def test_loop_body_inputs_are_formal_parameters():
    graph = onyxia.load_model(counting_loop(m=3))
    body = next(n for n in graph.nodes if n.op_type == "Loop").attributes["body"]
    assert body.inputs == ["i", "cin", "acc"] and all(body.tensor(t).kind is TensorKind.INPUT for t in body.inputs)
    assert body.free_tensors() == ["x"]


def test_implicit_inputs_order_nodes_and_keep_producers_alive():
    then = h.make_graph([h.make_node("Neg", ["hidden"], ["t"])], "then", [], [vi("t")])
    orelse = h.make_graph([h.make_node("Abs", ["x"], ["e"])], "else", [], [vi("e")])
    # `hidden` is produced after the If in file order and only the branch reads it.
    model = make_model([h.make_node("If", ["c"], ["o"], then_branch=then, else_branch=orelse, name="if"),
                        h.make_node("Relu", ["x"], ["hidden"], name="relu")],
                       [("x", np.float32, [2]), ("c", np.bool_, [])], ["o"])
    graph = onyxia.load_model(model)
    order = [graph.node(n).name for n in graph.topological_order()]
    assert order == ["relu", "if"]
    after = CompilerPipeline(core_operator_registry()).run_passes(graph, {}, until=Stage.OPTIMIZATION)
    assert "relu" in [n.name for n in after.nodes]  # DCE keeps what a branch reads


def test_replace_all_uses_renames_inside_subgraphs():
    graph = onyxia.load_model(if_model())
    node = next(n for n in graph.nodes if n.op_type == "If")
    graph.replace_all_uses("y", "x")
    then = node.attributes["then_branch"]
    assert next(iter(then.nodes)).inputs == ["x", "x"] and node.implicit_inputs == ["x"]


def test_names_a_subgraph_shares_with_others_are_made_unique():
    """ONNX scopes names per graph: two branches may both call their result `r`."""
    then = h.make_graph([h.make_node("Neg", ["x"], ["r"])], "then", [], [vi("r")])
    orelse = h.make_graph([h.make_node("Abs", ["x"], ["r"])], "else", [], [vi("r")])
    model = make_model([h.make_node("If", ["c"], ["o"], then_branch=then, else_branch=orelse)],
                       [("x", np.float32, [2]), ("c", np.bool_, [])], ["o"])
    graph = onyxia.load_model(model)
    node = next(iter(graph.nodes))
    outs = [node.attributes[a].outputs[0] for a in ("then_branch", "else_branch")]
    assert outs[0] != outs[1] and "r" in outs
    compile_model(model)  # one tensor table holds both


def test_copy_keeps_subgraph_values_and_parents():
    graph = onyxia.load_model(counting_loop(m=3))
    dup = graph.copy()
    body = next(n for n in dup.nodes if n.op_type == "Loop").attributes["body"]
    assert body.parent is dup and body is not next(n for n in graph.nodes if n.op_type == "Loop").attributes["body"]


def test_a_subgraph_reading_an_unknown_tensor_is_a_load_error():
    then = h.make_graph([h.make_node("Neg", ["ghost"], ["t"])], "then", [], [vi("t")])
    orelse = h.make_graph([h.make_node("Abs", ["x"], ["e"])], "else", [], [vi("e")])
    model = make_model([h.make_node("If", ["c"], ["o"], then_branch=then, else_branch=orelse, name="pick")],
                       [("x", np.float32, [2]), ("c", np.bool_, [])], ["o"])
    with pytest.raises(ModelLoadError, match="node 'pick' \\(If\\) attribute 'then_branch' reads tensor 'ghost'"):
        onyxia.load_model(model)


def test_unsupported_ops_in_subgraphs_are_listed_with_the_rest():
    then = h.make_graph([h.make_node("NoSuchOp", ["x"], ["t"])], "then", [], [vi("t")])
    orelse = h.make_graph([h.make_node("Abs", ["x"], ["e"])], "else", [], [vi("e")])
    model = make_model([h.make_node("If", ["c"], ["o"], then_branch=then, else_branch=orelse),
                        h.make_node("AlsoMissing", ["o"], ["p"])],
                       [("x", np.float32, [2]), ("c", np.bool_, [])], ["p"])
    with pytest.raises(UnsupportedOperatorError, match="AlsoMissing.*NoSuchOp"):
        compile_model(model)


def test_subgraph_input_types_may_be_left_to_the_op():
    body = h.make_graph([h.make_node("Identity", ["cin"], ["cout"]), h.make_node("Neg", ["v"], ["v2"])], "b",
                        [h.make_tensor_value_info("i", TP.INT64, None), h.make_tensor_value_info("cin", TP.BOOL, None),
                         h.make_tensor_value_info("v", TP.UNDEFINED, None)],
                        [vi("cout", TP.BOOL, []), vi("v2")])
    model = make_model([h.make_node("Loop", ["M", "", "v0"], ["v"], body=body)], [("v0", np.float32, [2, 2])], ["v"],
                       {"M": np.array(2, np.int64)})
    compiled = compile_model(model)
    assert compiled.tensors["v"].shape == (2, 2)
