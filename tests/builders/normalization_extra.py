"""Builders shared by tests/gpu/test_normalization_extra.py, tests/gpu/test_shader_validation.py's table and
tests/unit/test_operator_errors.py."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model

RNG = np.random.default_rng(0)


C = 6


def randn(*shape, scale=1.0, offset=0.0):
    return (RNG.standard_normal(shape) * scale + offset).astype(np.float32)


def norm_model(op: str, x_shape, params: dict, opset: int = 18, **attrs):
    node = h.make_node(op, ["x", *params], ["y"], name="norm0", **attrs)
    return make_model([node], [("x", np.float32, x_shape)], ["y"], params, opset=opset)


def bn_params(*shape):
    return {"s": randn(*shape), "b": randn(*shape), "m": randn(*shape), "v": np.abs(randn(*shape)) + 0.1}


def affine(n=C):
    return {"s": randn(n), "b": randn(n)}


def validation_models() -> list[tuple[object, dict[str, int]]]:
    """Small models covering every (shader, defs) variant of these normalizations."""
    x = ["n", C, 4, 5]
    models = [norm_model("BatchNormalization", x, bn_params(C), 15),
              norm_model("InstanceNormalization", x, affine(), 18),
              norm_model("GroupNormalization", x, affine(), 21, num_groups=3),
              norm_model("MeanVarianceNormalization", x, {}, 13),
              norm_model("LpNormalization", x, {}, 18, p=1),
              norm_model("LpNormalization", x, {}, 18, axis=1)]
    return [(m, {"n": 2}) for m in models]
