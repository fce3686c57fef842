"""Builders shared by tests/gpu/test_matmul.py and tests/unit/test_operator_errors.py."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model


def matmul_model(a_shape, b_shape, dtype=np.float32, weight: np.ndarray | None = None):
    inputs = [("a", dtype, a_shape)] + ([] if weight is not None else [("b", dtype, b_shape)])
    return make_model([h.make_node("MatMul", ["a", "b"], ["y"], name="mm")], inputs, ["y"],
                      {"b": weight} if weight is not None else None)
