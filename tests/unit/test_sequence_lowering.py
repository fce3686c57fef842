"""SequenceLoweringPass: sequences become bookkeeping over tensors before shape inference."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline, Stage
from onyxia.compiler.passes import SequenceLoweringPass
from onyxia.operators import core_operator_registry
from tests.builders.sequences import SEQ_F32, seq_model
from tests.control_models import counting_loop
from tests.helpers import compile_model


def lowered(model, dims=None):
    pipe = CompilerPipeline(core_operator_registry())
    graph = pipe.run_passes(onyxia.load_model(model), dims or {}, until=Stage.INFERENCE)
    return graph, pipe.context


def test_sequence_ops_become_tensor_ops_and_bookkeeping():
    nodes = [h.make_node("SequenceConstruct", ["a", "b"], ["s"]), h.make_node("SequenceAt", ["s", "one"], ["y"]),
             h.make_node("SequenceLength", ["s"], ["n"]),
             h.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0, new_axis=1)]
    model = seq_model(nodes, [("a", np.float32, [2]), ("b", np.float32, [2])], ["y", "n", "cat", ("s", "seq")],
                      {"one": np.array(1, np.int64)})
    graph, ctx = lowered(model)
    ops = sorted(n.op_type for n in graph.nodes)
    assert ops == ["Concat", "Identity", "Unsqueeze", "Unsqueeze"]
    assert next(n for n in graph.nodes if n.op_type == "Identity").inputs == ["b"]
    assert graph.tensor("n").value == 2
    assert graph.outputs == ["y", "n", "cat", "a", "b"]  # the sequence output became its elements
    assert ctx.containers == {"outputs": ["y", "n", "cat", "s"],
                              "structure": {"s": {"kind": "sequence", "items": ["a", "b"]}}}
    compiled = compile_model(model)
    assert compiled.metadata["containers"] == ctx.containers


def test_a_loop_over_a_sequence_is_unrolled_with_constant_iteration_numbers():
    body = h.make_graph([h.make_node("Cast", ["i"], ["fi"], to=TP.FLOAT), h.make_node("Mul", ["x", "fi"], ["v"]),
                         h.make_node("SequenceInsert", ["acc", "v"], ["acc2"]), h.make_node("Identity", ["c"], ["c2"])],
                        "body", [h.make_tensor_value_info("i", TP.INT64, []),
                                 h.make_tensor_value_info("c", TP.BOOL, []), h.make_value_info("acc", SEQ_F32)],
                        [h.make_tensor_value_info("c2", TP.BOOL, []), h.make_value_info("acc2", SEQ_F32)])
    model = seq_model([h.make_node("SequenceEmpty", [], ["e"], dtype=TP.FLOAT),
                       h.make_node("Loop", ["M", "", "e"], ["out"], body=body, name="grow")],
                      [("x", np.float32, [2])], [("out", "seq")], {"M": np.array(3, np.int64)})
    graph, ctx = lowered(model)
    assert not any(n.op_type == "Loop" for n in graph.nodes)
    assert sorted(n.op_type for n in graph.nodes).count("Mul") == 3
    casts = [n for n in graph.nodes if n.op_type == "Cast"]
    assert sorted(int(graph.tensor(n.inputs[0]).value) for n in casts) == [0, 1, 2]  # iteration numbers
    assert len(ctx.containers["structure"]["out"]["items"]) == 3


def test_a_graph_without_sequences_is_left_alone():
    model = counting_loop(m=3)  # a Loop without sequences whose body needs no iteration value
    graph, _ = lowered(model)
    assert [n.op_type for n in graph.nodes] == ["Loop"]
    plain = onyxia.load_model(seq_model([h.make_node("Neg", ["x"], ["y"])], [("x", np.float32, [2])], ["y"]))
    assert SequenceLoweringPass().run(plain, None) is False
