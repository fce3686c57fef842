"""Builders shared by tests/gpu/test_roi.py and tests/gpu/test_shader_validation.py's table."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model


def roi_align_model(x_shape, num_rois, *, opset: int = 16, name="roi0", **attrs):
    node = h.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], name=name, **attrs)
    return make_model([node], [("x", np.float32, x_shape), ("rois", np.float32, [num_rois, 4]),
                               ("idx", np.int64, [num_rois])], ["y"], opset=opset)


def max_roi_pool_model(x_shape, num_rois, *, name="pool0", **attrs):
    node = h.make_node("MaxRoiPool", ["x", "rois"], ["y"], name=name, **attrs)
    return make_model([node], [("x", np.float32, x_shape), ("rois", np.float32, [num_rois, 5])], ["y"])


def validation_models() -> list[tuple[object, dict[str, int]]]:
    """Models covering every mode and both stages, for tests/gpu/test_shader_validation.py."""
    n = {"n": 2}
    return [
        (roi_align_model(["n", 2, 6, 7], 3, mode=m, coordinate_transformation_mode=c, sampling_ratio=r), n)
        for m in ("avg", "max") for c in ("half_pixel", "output_half_pixel") for r in (0, 2)
    ] + [
        (roi_align_model([1, 2, 140, 150], "n", mode="max"), n),  # chunked: the finish stage
        (roi_align_model([1, 2, "n", 150], 3), n),  # a symbolic image: chunks as an immediate
        (max_roi_pool_model(["n", 2, 9, 8], 3, pooled_shape=[2, 3]), n),
    ]
