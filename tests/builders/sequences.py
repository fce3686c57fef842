"""Builders shared by tests/gpu/test_sequences.py, tests/gpu/test_shader_validation.py's table and
tests/unit/test_sequence_lowering.py."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

SEQ_F32 = h.make_sequence_type_proto(h.make_tensor_type_proto(TP.FLOAT, None))


def seq_model(nodes, inputs, outputs, inits=None, opset=18):
    """inputs/outputs: (name, "seq") for float sequences, (name, "opt") for optional tensors,
    else (name, dtype, shape)."""
    def info(spec):
        if isinstance(spec, str):
            return h.make_empty_tensor_value_info(spec)
        if spec[1] == "seq":
            return h.make_value_info(spec[0], SEQ_F32)
        if spec[1] == "opt":
            return h.make_value_info(spec[0], h.make_optional_type_proto(h.make_tensor_type_proto(TP.FLOAT, None)))
        return h.make_tensor_value_info(spec[0], h.np_dtype_to_tensor_dtype(np.dtype(spec[1])), spec[2])

    graph = h.make_graph(nodes, "seq", [info(i) for i in inputs], [info(o) for o in outputs],
                         [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=9)


def validation_models() -> list:
    """(model, dims) for tests/gpu/test_shader_validation.py: every sequence/optional op, built
    from tensor inputs with the dim `n` (they compile to copies and the kernels of the ops they
    lower to)."""
    body = h.make_graph([h.make_node("Neg", ["a"], ["c"])], "map", [h.make_tensor_value_info("a", TP.FLOAT, None)],
                        [h.make_tensor_value_info("c", TP.FLOAT, None)])
    nodes = [h.make_node("SequenceConstruct", ["x", "x"], ["s"]),
             h.make_node("SequenceEmpty", [], ["e"], dtype=TP.FLOAT),
             h.make_node("SequenceInsert", ["e", "x"], ["s1"]), h.make_node("SequenceErase", ["s", "zero"], ["s2"]),
             h.make_node("SequenceAt", ["s2", "zero"], ["y0"]), h.make_node("SequenceLength", ["s"], ["len"]),
             h.make_node("SplitToSequence", ["x"], ["parts"], axis=1, keepdims=0),
             h.make_node("ConcatFromSequence", ["parts"], ["y1"], axis=0, new_axis=1),
             h.make_node("SequenceMap", ["s1"], ["m"], body=body),
             h.make_node("ConcatFromSequence", ["m"], ["y2"], axis=0),
             h.make_node("Optional", ["x"], ["o"]), h.make_node("OptionalHasElement", ["o"], ["has"]),
             h.make_node("OptionalGetElement", ["o"], ["y3"])]
    model = seq_model(nodes, [("x", np.float32, ["n", 3])], ["y0", "len", "y1", "y2", "has", "y3"],
                      {"zero": np.array(0, np.int64)})
    return [(model, {"n": 2})]
