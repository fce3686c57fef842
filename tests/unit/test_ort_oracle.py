"""tests/ort_oracle.py: onnxruntime made exact for uint8 x int8 products, in subgraphs too (a
merged decoder's If branches), checked against integer arithmetic with values that saturate
onnxruntime's 16-bit pair sums on CPUs without VNNI."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from tests.ort_oracle import exact_for_ort


def _branch(name: str, out: str) -> onnx.GraphProto:
    return h.make_graph([h.make_node("MatMulInteger", ["a", "w", "", "w_zero"], [out], name=name)], name, [],
                        [h.make_tensor_value_info(out, T.INT32, [2, 8])])


def test_int8_weights_read_in_if_branches_are_exact():
    rng = np.random.default_rng(0)
    a = rng.integers(200, 256, (2, 64)).astype(np.uint8)
    w = rng.integers(100, 128, (64, 8)).astype(np.int8)
    w_zero = np.int8(3)
    node = h.make_node("If", ["cond"], ["y"], then_branch=_branch("then", "t"), else_branch=_branch("else", "e"))
    graph = h.make_graph([node], "g", [h.make_tensor_value_info("cond", T.BOOL, []),
                                       h.make_tensor_value_info("a", T.UINT8, [2, 64])],
                         [h.make_tensor_value_info("y", T.INT32, [2, 8])],
                         [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(w_zero), "w_zero")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    exact, _ = exact_for_ort(model, {})
    onnx.checker.check_model(exact)
    session = ort.InferenceSession(exact.SerializeToString(), providers=["CPUExecutionProvider"])
    want = a.astype(np.int64) @ (w.astype(np.int64) - int(w_zero))
    for cond in (True, False):
        (got,) = session.run(None, {"cond": np.array(cond), "a": a})
        np.testing.assert_array_equal(got, want)
