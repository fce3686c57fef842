"""FunctionExpansionPass: nodes of FunctionOps are replaced by their ONNX function body."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline, Stage
from onyxia.compiler.passes import FunctionExpansionPass
from onyxia.compiler.pipeline import PassRecord
from onyxia.errors import OnyxiaError, UnsupportedOperatorError
from onyxia.operators import core_operator_registry
from onyxia.operators.functions import FunctionOp, first_body_version
from tests.helpers import make_model


def sce_model(name: str = "sce"):
    """SoftmaxCrossEntropyLoss after an Add: its input types come from inference."""
    nodes = [h.make_node("Add", ["x", "x"], ["x2"]),
             h.make_node("SoftmaxCrossEntropyLoss", ["x2", "t"], ["loss", "log_prob"], name=name, reduction="sum")]
    return make_model(nodes, [("x", np.float32, ["n", 5, 2]), ("t", np.int64, ["n", 2])], ["loss", "log_prob"],
                      opset=13)


def inferred(model, dims=None, registry=None):
    pipeline = CompilerPipeline(registry or core_operator_registry())
    return pipeline, pipeline.run_passes(onyxia.load_model(model), {"n": 3} if dims is None else dims,
                                          until=Stage.INFERENCE)


# (domain, op_type) of ops onyxia runs through their ONNX function body (rows of their families).
EXPANDED = (("", "NegativeLogLikelihoodLoss"), ("", "SoftmaxCrossEntropyLoss"), ("", "HannWindow"),
            ("", "HammingWindow"), ("", "BlackmanWindow"), ("", "CenterCropPad"), ("", "RotaryEmbedding"),
            ("", "SwiGLU"), ("ai.onnx.preview", "FlexAttention"), ("", "LinearAttention"))


def test_every_expanded_op_is_registered_as_a_function_op():
    registry = core_operator_registry()
    for domain, op in EXPANDED:
        assert isinstance(registry.get(op, domain), FunctionOp), op
        assert registry.get(op, domain, first_body_version(domain, op) - 1) is None, op


def test_nested_bodies_are_expanded_with_names_from_the_node():
    pipeline, graph = inferred(sce_model())
    ops = [n.op_type for n in graph.nodes]
    # SoftmaxCrossEntropyLoss's body calls NegativeLogLikelihoodLoss, whose body is expanded too.
    assert "SoftmaxCrossEntropyLoss" not in ops and "NegativeLogLikelihoodLoss" not in ops
    assert "LogSoftmax" in ops and "GatherElements" in ops
    body = [n for n in graph.nodes if n.op_type != "Add"]
    assert all(n.name.startswith("sce/") for n in body)
    internal = {t for n in body for t in n.outputs} - {"loss", "log_prob"}
    assert internal and all(t.startswith("sce/") for t in internal)
    assert graph.tensor("loss").shape == () and graph.tensor("log_prob").shape[1:] == (5, 2)
    # dynamic-quant-fusion must see DynamicQuantizeLinear chains before expansion decomposes them
    assert [r.name for r in pipeline.history][:6] == ["symbolic-resolution", "if-inlining", "dynamic-quant-fusion",
                                                      "function-expansion", "sequence-lowering", "shape-inference"]
    assert pipeline.history[3].modified


def test_two_nodes_of_one_op_get_distinct_tensors():
    nodes = [h.make_node("HannWindow", ["s"], ["w1"], name="a"), h.make_node("HannWindow", ["s"], ["w2"], name="b")]
    model = make_model(nodes, [], ["w1", "w2"], {"s": np.array(5, np.int64)}, opset=17)
    _, graph = inferred(model, {})
    names = [t for n in graph.nodes for t in n.outputs]
    assert len(names) == len(set(names))
    np.testing.assert_array_equal(graph.tensor("w1").value, graph.tensor("w2").value)


def test_graph_without_function_ops_is_left_alone():
    model = make_model([h.make_node("Relu", ["x"], ["y"])], [("x", np.float32, ["n"])], ["y"])
    pipeline, graph = inferred(model)
    record = next(r for r in pipeline.history if r.name == "function-expansion")
    assert isinstance(record, PassRecord) and not record.modified
    assert [n.op_type for n in graph.nodes] == ["Relu"]


def test_caller_graph_is_not_modified():
    graph = onyxia.load_model(sce_model())
    CompilerPipeline(core_operator_registry()).run_passes(graph, {"n": 3}, until=Stage.INFERENCE)
    assert [n.op_type for n in graph.nodes] == ["Add", "SoftmaxCrossEntropyLoss"]


def test_unsupported_op_in_a_body_is_listed_with_the_node():
    # LinearAttention's body needs Scan: taken out of this registry on purpose.
    registry = core_operator_registry().register(FunctionOp("", "LinearAttention"), 27)
    registry._ops.pop(("", "Scan"))
    shapes = [("q", np.float32, [1, 2, 8]), ("k", np.float32, [1, 2, 8]), ("v", np.float32, [1, 2, 8])]
    node = h.make_node("LinearAttention", ["q", "k", "v"], ["y", "state"], name="la", q_num_heads=2, kv_num_heads=2,
                       update_rule="linear")
    model = make_model([node], shapes, ["y", "state"], opset=27)
    with pytest.raises(UnsupportedOperatorError, match=r"Scan \(nodes 'la/") as err:
        inferred(model, {}, registry)
    assert ("", "Scan") in err.value.missing


def test_without_the_pass_a_function_op_says_so():
    pipeline = CompilerPipeline(core_operator_registry())
    pipeline._passes = [p for p in pipeline._passes if not isinstance(p, FunctionExpansionPass)]
    with pytest.raises(OnyxiaError, match="FunctionExpansionPass") as err:
        pipeline.run_passes(onyxia.load_model(sce_model("my_sce")), {"n": 3}, until=Stage.INFERENCE)
    assert "my_sce" in str(err.value)


def test_defaulted_attributes_reach_the_body():
    # HannWindow's body reads `periodic` (default 1): a node that leaves it out is periodic.
    model = make_model([h.make_node("HannWindow", ["s"], ["w"])], [], ["w"], {"s": np.array(4, np.int64)}, opset=17)
    _, graph = inferred(model, {})
    np.testing.assert_allclose(graph.tensor("w").value, [0.0, 0.5, 1.0, 0.5], atol=1e-7)
