"""Builders shared by tests/unit/test_memory_order.py and tests/gpu/test_memory_order.py."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper as h


def branches(count: int = 4, width: int = 256) -> onnx.ModelProto:
    """`count` wide branches written producer-first (as exporters often emit Q/K/V): every wide
    tensor is computed before any is reduced, so the plain order holds all of them at once.
    (A LogSoftmax reads each product: an elementwise op there would run in its epilogue.)"""
    rng = np.random.default_rng(0)
    nodes, inits, sums = [], {}, []
    for i in range(count):
        inits[f"w{i}"] = (rng.standard_normal((8, width)) / 4).astype(np.float32)
        nodes.append(h.make_node("MatMul", ["x", f"w{i}"], [f"wide{i}"], name=f"wide{i}"))
    for i in range(count):
        nodes.append(h.make_node("LogSoftmax", [f"wide{i}"], [f"act{i}"], name=f"act{i}"))
        nodes.append(h.make_node("ReduceSum", [f"act{i}", "axis"], [f"sum{i}"], name=f"sum{i}", keepdims=1))
        sums.append(f"sum{i}")
    nodes.append(h.make_node("Sum", sums, ["y"], name="total"))
    inits["axis"] = np.array([-1], np.int64)
    graph = h.make_graph(nodes, "branches", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 8])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                         [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)], ir_version=10)


def chain(dtype=np.float32) -> onnx.ModelProto:
    """Sigmoid -> MatMul -> Softmax -> Relu -> MatMul -> Softmax -> Neg...: each map's input dies
    at the map (a Softmax makes it: a map right after a MatMul would run in its epilogue)."""
    tp = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes, prev = [], "x"
    for i, op in enumerate(["Sigmoid", "MatMul", "Softmax", "Relu", "MatMul", "Softmax", "Neg", "MatMul"]):
        nodes.append(h.make_node(op, [prev, "w"] if op == "MatMul" else [prev], [f"t{i}"], name=f"n{i}"))
        prev = f"t{i}"
    nodes.append(h.make_node("Abs", [prev], ["y"], name="out"))
    w = (np.random.default_rng(3).standard_normal((8, 8)) / 3).astype(dtype)
    graph = h.make_graph(nodes, "chain", [h.make_tensor_value_info("x", tp, ["n", 8])],
                         [h.make_tensor_value_info("y", tp, None)], [onnx.numpy_helper.from_array(w, "w")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)], ir_version=10)
