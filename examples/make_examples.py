"""Build the bundled example models (deterministic; small enough to commit).

    python examples/make_examples.py      # writes examples/tiny_mlp.onnx

tiny_mlp.onnx: a two-layer perceptron with a symbolic batch dimension and a Shape → Gather →
Concat → Reshape chain (which onyxia folds away at compile time).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).parent


def tiny_mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(2026)
    weights = {
        "w1": (rng.standard_normal((64, 128)) / 8).astype(np.float32),
        "b1": (rng.standard_normal(128) / 8).astype(np.float32),
        "w2": (rng.standard_normal((128, 10)) / 11).astype(np.float32),
        "b2": (rng.standard_normal(10) / 11).astype(np.float32),
        "zero": np.array([0], np.int64),
        "minus_one": np.array([-1], np.int64),
    }
    nodes = [
        helper.make_node("Shape", ["features"], ["features_shape"], name="shape"),
        helper.make_node("Gather", ["features_shape", "zero"], ["batch"], axis=0, name="batch_dim"),
        helper.make_node("Concat", ["batch", "minus_one"], ["flat_shape"], axis=0, name="flat_shape"),
        helper.make_node("Reshape", ["features", "flat_shape"], ["x"], name="flatten"),
        helper.make_node("MatMul", ["x", "w1"], ["h_mm"], name="fc1"),
        helper.make_node("Add", ["h_mm", "b1"], ["h_pre"], name="fc1_bias"),
        helper.make_node("Relu", ["h_pre"], ["h"], name="relu"),
        helper.make_node("MatMul", ["h", "w2"], ["o_mm"], name="fc2"),
        helper.make_node("Add", ["o_mm", "b2"], ["logits"], name="fc2_bias"),
    ]
    graph = helper.make_graph(
        nodes, "tiny_mlp",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10,
                              producer_name="onyxia-examples")
    onnx.checker.check_model(model)
    return model


def main() -> None:
    path = HERE / "tiny_mlp.onnx"
    onnx.save(tiny_mlp(), path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
