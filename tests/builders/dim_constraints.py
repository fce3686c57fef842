"""Builders shared by tests/gpu/test_dim_constraints.py and tests/unit/test_operator_errors.py."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model


def _model():
    nodes = [h.make_node("Cast", ["mask"], ["m"], to=1), h.make_node("Mul", ["x", "m"], ["y"])]
    return make_model(nodes, [("x", np.float32, ["batch", "seq"]), ("mask", np.int64, ["batch", "mask_seq"])], ["y"])
