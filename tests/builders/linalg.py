"""Builders shared by tests/gpu/test_linalg.py and tests/gpu/test_shader_validation.py's table."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model


def einsum_model(equation: str, shapes, dtype=np.float32):
    names = [f"x{i}" for i in range(len(shapes))]
    node = h.make_node("Einsum", names, ["y"], equation=equation)
    return make_model([node], [(n, dtype, s) for n, s in zip(names, shapes)], ["y"], opset=12)


def validation_models() -> list[tuple[object, dict[str, int]]]:
    """Small models covering the kernels this module's operators emit."""
    return [(einsum_model("ij->ji", [("n", 4)]), {"n": 3}), (einsum_model("ii->", [("n", "n")]), {"n": 3}),
            (einsum_model("ij,jk,kl->il", [("n", 3), (3, 4), (4, 2)], np.int64), {"n": 3}),
            (einsum_model("bij,bjk->bik", [("n", 3, 4), ("n", 4, 5)]), {"n": 3})]
