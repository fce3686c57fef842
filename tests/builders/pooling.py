"""Builders shared by tests/gpu/test_pooling.py, tests/gpu/test_shader_validation.py's table and
tests/unit/test_operator_errors.py."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model


def pool_model(op: str, x_shape, outputs=("y",), dtype=np.float32, opset: int = 19, **attrs):
    node = h.make_node(op, ["x"], list(outputs), **attrs)
    return make_model([node], [("x", dtype, x_shape)], list(outputs), opset=opset)


POOL_CASES = [
    ("MaxPool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, dilations=[2, 1])),
    ("MaxPool", dict(kernel_shape=[2, 3], auto_pad="SAME_UPPER", strides=[2, 2])),
    ("MaxPool", dict(kernel_shape=[2, 3], auto_pad="SAME_LOWER", strides=[1, 2])),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 0, 1, 2], strides=[2, 2], count_include_pad=1, ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], auto_pad="SAME_LOWER", strides=[2, 2], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 2], dilations=[2, 2], auto_pad="VALID")),
    ("LpPool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], p=3)),
    ("LpPool", dict(kernel_shape=[2, 2])),
]


def unpool_model(with_shape: bool):
    """MaxPool then MaxUnpool; output_shape = Shape(x) (symbolic) or inferred from the window."""
    nodes = [h.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
             h.make_node("Shape", ["x"], ["s"]),
             h.make_node("MaxUnpool", ["p", "i", "s"] if with_shape else ["p", "i"], ["y"], kernel_shape=[2, 2],
                         strides=[2, 2])]
    return make_model(nodes, [("x", np.float32, ["n", 3, "h", "w"])], ["y"], opset=11)


def validation_models() -> list[tuple[object, dict[str, int]]]:
    """Small models covering every (shader, defs) variant of the pooling operators."""
    x = ["n", 3, 8, 8]
    models = [pool_model(op, x, **attrs) for op, attrs in POOL_CASES[::2]]
    models += [pool_model("MaxPool", x, outputs=("y", "i"), kernel_shape=[2, 2], storage_order=order)
               for order in (0, 1)]
    models += [pool_model("MaxPool", x, dtype=np.int8, kernel_shape=[2, 2]),
               pool_model("AveragePool", ["n", 3, 8], kernel_shape=[3], count_include_pad=1, pads=[1, 1])]
    models += [pool_model(op, x) for op in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")]
    # Symbolic planes: every walk of the global pools' Selects, in parts and not.
    planes = [pool_model(op, ["n", 3, "h", "w"]) for op in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")]
    return ([(m, {"n": 2}) for m in models] + [(m, {"n": 2, "h": 5, "w": 4}) for m in planes]
            + [(unpool_model(True), {"n": 2, "h": 5, "w": 4})])


X4 = [2, 3, 7, 8]
