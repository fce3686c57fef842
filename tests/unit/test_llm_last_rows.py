"""restrict_logits_rows: LastRows goes in front of the lm_head only through row-local ops."""

from __future__ import annotations

import numpy as np
from onnx import helper

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.ir.shapes import SymDim
from onyxia.llm.ops import LOGITS_GATE, add_last_token_head, register_llm_operators, restrict_logits_rows
from onyxia.operators import core_operator_registry
from tests.helpers import make_model

HIDDEN, VOCAB = 8, 12


def _graph(tail: list, extra: dict | None = None):
    w = np.ones((HIDDEN, VOCAB), np.float32)
    nodes = [helper.make_node("MatMul", ["h", "w"], ["proj"])] + tail
    return onyxia.load_model(make_model(nodes, [("h", np.float32, [1, "s", HIDDEN])], ["logits"],
                                        {"w": w, **(extra or {})}))


def test_softcap_chain_gets_last_rows():
    graph = _graph([helper.make_node("Div", ["proj", "cap"], ["d"]), helper.make_node("Tanh", ["d"], ["t"]),
                    helper.make_node("Mul", ["t", "cap"], ["logits"])], {"cap": np.float32(30.0)})
    assert restrict_logits_rows(graph, "logits")
    matmul = next(n for n in graph.nodes if n.op_type == "MatMul")
    rows = graph.node(graph.producer(matmul.inputs[0]))
    assert rows.op_type == "LastRows" and rows.inputs == ["h"]
    add_last_token_head(graph, "logits")
    compiled = CompilerPipeline(register_llm_operators(core_operator_registry())).compile(
        graph, {"s": 4, LOGITS_GATE: 1})
    s, gate = SymDim.symbol("s"), SymDim.symbol(LOGITS_GATE)
    assert tuple(compiled.tensors["logits"].shape) == (1, 1 + (s - 1) * gate, VOCAB)


def test_plain_lm_head_gets_last_rows():
    graph = _graph([helper.make_node("Identity", ["proj"], ["logits"])])
    assert restrict_logits_rows(graph, "logits")


def test_position_mixing_tail_is_left_alone():
    """An op that mixes positions (here a Transpose) after the product: no LastRows."""
    graph = _graph([helper.make_node("Transpose", ["proj"], ["logits"], perm=[0, 2, 1])])
    assert not restrict_logits_rows(graph, "logits")
    assert not any(n.op_type == "LastRows" for n in graph.nodes)


def test_non_constant_operand_is_left_alone():
    """A product whose B is computed from an input is not an lm_head."""
    nodes = [helper.make_node("MatMul", ["h", "g"], ["logits"])]
    graph = onyxia.load_model(make_model(nodes, [("h", np.float32, [1, "s", HIDDEN]),
                                                 ("g", np.float32, [HIDDEN, VOCAB])], ["logits"]))
    assert not restrict_logits_rows(graph, "logits")


def _normed_graph(skip: bool, norm_read_elsewhere: bool = False):
    w = np.ones((HIDDEN, VOCAB), np.float32)
    gamma = np.ones(HIDDEN, np.float32)
    if skip:
        norm = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "r", "gamma"], ["h", "", "", ""],
                                domain="com.microsoft", epsilon=1e-6)
        inputs = [("x", np.float32, [1, "s", HIDDEN]), ("r", np.float32, [1, "s", HIDDEN])]
    else:
        norm = helper.make_node("SimplifiedLayerNormalization", ["x", "gamma"], ["h"], axis=-1, epsilon=1e-6)
        inputs = [("x", np.float32, [1, "s", HIDDEN])]
    nodes = [norm, helper.make_node("MatMul", ["h", "w"], ["logits"])]
    outputs = ["logits"] + (["h"] if norm_read_elsewhere else [])
    return onyxia.load_model(make_model(nodes, inputs, outputs, {"w": w, "gamma": gamma},
                                        extra_opsets={"com.microsoft": 1}))


def test_final_norm_normalizes_the_kept_rows_only():
    for skip in (False, True):
        graph = _normed_graph(skip)
        assert restrict_logits_rows(graph, "logits")
        norm = next(n for n in graph.nodes if "LayerNormalization" in n.op_type)
        sliced = norm.inputs[:2] if skip else norm.inputs[:1]
        assert all(graph.node(graph.producer(t)).op_type == "LastRows" for t in sliced), skip
        matmul = next(n for n in graph.nodes if n.op_type == "MatMul")
        assert matmul.inputs[0] == "h"  # the norm's output feeds the lm_head directly


def test_norm_read_elsewhere_keeps_every_row():
    graph = _normed_graph(False, norm_read_elsewhere=True)
    assert restrict_logits_rows(graph, "logits")
    norm = next(n for n in graph.nodes if "LayerNormalization" in n.op_type)
    assert graph.producer(norm.inputs[0]) is None  # the graph input, unsliced
    matmul = next(n for n in graph.nodes if n.op_type == "MatMul")
    assert graph.node(graph.producer(matmul.inputs[0])).op_type == "LastRows"
