"""Builders shared by tests/gpu/test_small_ops.py and tests/gpu/test_shader_validation.py's table."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h

from tests.helpers import make_model


def multinomial_model(classes: int, samples: int, dtype=TensorProto.INT32, seed=3.0):
    node = h.make_node("Multinomial", ["x"], ["y"], sample_size=samples, dtype=dtype, seed=seed)
    return make_model([node], [("x", np.float32, ["b", classes])], ["y"])


def validation_models() -> list[tuple[onnx.ModelProto, dict[str, int]]]:
    """Models covering the ops above, for tests/gpu/test_shader_validation.py."""
    n = {"n": 3}
    rev = h.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=0, time_axis=1)
    scatter = h.make_node("TensorScatter", ["c", "u", "i"], ["y"], mode="circular")
    return [
        (make_model([rev], [("x", np.float32, [3, "n", 2]), ("lens", np.int64, [3])], ["y"]), n),
        (make_model([scatter], [("c", np.float32, [2, "n", 4]), ("u", np.float32, [2, 1, 4]), ("i", np.int64, [2])],
                    ["y"], opset=24), n),
        (make_model([h.make_node("LRN", ["x"], ["y"], size=3)], [("x", np.float32, ["n", 4, 3, 3])], ["y"]), n),
        (make_model([h.make_node("Col2Im", ["x", "im", "bl"], ["y"])], [("x", np.float32, ["n", 8, 9])], ["y"],
                    {"im": np.array([4, 4], np.int64), "bl": np.array([2, 2], np.int64)}), n),
        (make_model([h.make_node("Det", ["x"], ["y"])], [("x", np.float32, ["n", 5, 5])], ["y"]), n),
        (multinomial_model(5, 4), {"b": 2}),
        (make_model([h.make_node("MelWeightMatrix", ["m", "d", "r", "lo", "hi"], ["y"])], [], ["y"],
                    {"m": np.array(4, np.int64), "d": np.array(16, np.int64), "r": np.array(8000, np.int64),
                     "lo": np.array(0.0, np.float32), "hi": np.array(4000.0, np.float32)}, opset=17), {}),
    ]
