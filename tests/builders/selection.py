"""Builders shared by tests/gpu/test_selection.py, tests/gpu/test_shader_validation.py's table and
tests/unit/test_operator_errors.py."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model


def topk_model(shape, k: int, dtype=np.float32, opset: int = 18, k_const: bool = True, **attrs):
    if opset < 10:
        node = h.make_node("TopK", ["x"], ["v", "i"], k=k, **attrs)
        return make_model([node], [("x", dtype, shape)], ["v", "i"], opset=opset)
    node = h.make_node("TopK", ["x", "k"], ["v", "i"], **attrs)
    return make_model([node], [("x", dtype, shape)], ["v", "i"], {"k": np.array([k], np.int64)}, opset=opset)


def onehot_model(ind_shape, depth, values, ind_dtype=np.int64, axis=-1, depth_dtype=np.int64):
    node = h.make_node("OneHot", ["i", "d", "v"], ["y"], axis=axis)
    return make_model([node], [("i", ind_dtype, ind_shape)], ["y"],
                      {"d": np.array(depth, depth_dtype), "v": np.asarray(values)}, opset=11)


def validation_models() -> list[tuple[object, dict[str, int]]]:
    """Small models covering every (shader, defs) variant of this module's operators."""
    return [
        (topk_model(["n", 5], 2, axis=1), {"n": 3}),  # bitonic
        (topk_model([2, "n"], 2, axis=1, largest=0), {"n": 3}),  # selection passes
        (topk_model(["n", 4], 2, dtype=np.int64, axis=1), {"n": 3}),
        (make_model([h.make_node("Hardmax", ["x"], ["y"])], [("x", np.float32, ["n", 4])], ["y"], opset=13), {"n": 3}),
        (onehot_model(["n"], 4, np.array([0, 1], np.float32)), {"n": 3}),
        (onehot_model(["n"], 4, np.array([0, 1], np.int64), ind_dtype=np.float32), {"n": 3}),
    ]
