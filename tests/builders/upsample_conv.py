"""Models for the UpsampleConvPass tests (tests/unit/test_upsample_conv.py, tests/gpu/test_upsample_conv.py)
and the shader table: a nearest-2x Resize feeding a 3x3 Conv."""

from __future__ import annotations

import numpy as np
from onnx import helper

from tests.helpers import make_model


def upsample_conv_model(*, maps=5, channels=3, bias=True, resize=None, conv=None, scales=(1, 1, 2, 2),
                        extra=(), outputs=("y",), weights=None, dtype=np.float32):
    """x [n, C, h, w] -> Resize (nearest 2x, torch's modes unless `resize` says otherwise) -> Conv 3x3."""
    rng = np.random.default_rng(0)
    inits = {"w": weights if weights is not None else rng.standard_normal((maps, channels, 3, 3)).astype(dtype),
             "b": rng.standard_normal(maps).astype(dtype), "sc": np.array(scales, np.float32)}
    if not bias:
        del inits["b"]
    r = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor", **(resize or {})}
    c = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], **(conv or {})}
    nodes = [helper.make_node("Resize", ["x", "", "sc"], ["u"], name="up", **r),
             helper.make_node("Conv", ["u", "w", "b"] if bias else ["u", "w"], ["y"], name="conv", **c), *extra]
    return make_model(nodes, [("x", dtype, ["n", channels, "h", "w"])], list(outputs), inits, opset=17)


def validation_models() -> list:
    """(model, dims) whose plans hold the phase conv and onyxia::PhaseInterleave."""
    return [(upsample_conv_model(), {"n": 1, "h": 5, "w": 6})]
