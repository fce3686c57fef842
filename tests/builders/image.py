"""Builders shared by tests/gpu/test_image.py, tests/gpu/test_shader_validation.py's table and
tests/unit/test_operator_errors.py."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model

EMPTY = np.zeros(0, np.float32)


def resize_model(x_shape, *, scales=None, sizes=None, roi=None, opset: int = 19, dtype=np.float32, **attrs):
    inputs = ["x", "roi" if roi is not None else "", "scales" if scales is not None else "",
              "sizes" if sizes is not None else ""]
    inits = {k: v for k, v in (("roi", roi), ("scales", scales), ("sizes", sizes)) if v is not None}
    while not inputs[-1]:
        inputs.pop()
    if opset < 11:  # Resize-10: X, scales
        inputs = ["x", "scales"]
    node = h.make_node("Resize", inputs, ["y"], name="resize0", **attrs)
    return make_model([node], [("x", dtype, x_shape)], ["y"], inits, opset=opset)


def scales(*s):
    return np.array(s, np.float32)


def sizes(*s):
    return np.array(s, np.int64)


COORDS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
          "tf_half_pixel_for_nn"]


def grid_model(x_shape, grid_shape, opset: int = 20, **attrs):
    node = h.make_node("GridSample", ["x", "grid"], ["y"], **attrs)
    return make_model([node], [("x", np.float32, x_shape), ("grid", np.float32, grid_shape)], ["y"], opset=opset)


def stn_model(rank: int, align: int):
    """A spatial transformer: AffineGrid over the input's own Shape, then GridSample."""
    nodes = [h.make_node("Shape", ["x"], ["size"]),
             h.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align),
             h.make_node("GridSample", ["x", "grid"], ["y"], align_corners=align)]
    x_shape = ["n", 3, 4, 5, 6][:2 + rank]
    return make_model(nodes, [("x", np.float32, x_shape), ("theta", np.float32, ["n", rank, rank + 1])],
                      ["grid", "y"], opset=20)


def space_model(op: str, x_shape, opset: int = 13, **attrs):
    return make_model([h.make_node(op, ["x"], ["y"], **attrs)], [("x", np.float32, x_shape)], ["y"], opset=opset)


def validation_models() -> list[tuple[object, dict[str, int]]]:
    """Small models covering every (shader, defs) variant of the image operators."""
    x = ["n", 2, 5, 6]
    models = [resize_model(x, scales=scales(1, 1, 2.0, 0.5), roi=EMPTY, mode=mode,
                           coordinate_transformation_mode=coord)
              for mode, coord in zip(["nearest", "linear", "cubic"] * 2, COORDS)]
    models += [resize_model(x, sizes=sizes(2, 2, 9, 4), roi=scales(0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7), opset=13,
                            mode="cubic", coordinate_transformation_mode="tf_crop_and_resize", exclude_outside=1),
               resize_model(x, scales=scales(1, 1, 2, 0.6), opset=10, mode="nearest"),
               resize_model(x, scales=scales(1, 1, 2, 3), mode="nearest", dtype=np.uint8),
               resize_model(x, sizes=sizes(9, 3), axes=[2, 3], mode="nearest", nearest_mode="ceil"),
               resize_model(x, scales=scales(1, 1, 0.5, 2), mode="cubic", antialias=1, exclude_outside=1),
               resize_model(x, scales=scales(1, 1, 0.3, 0.5), mode="linear", antialias=1),
               make_model([h.make_node("Upsample", ["x", "s"], ["y"])], [("x", np.float32, x)], ["y"],
                          {"s": scales(1, 1, 2, 2)}, opset=9),
               space_model("DepthToSpace", ["n", 8, 3, 3], blocksize=2),
               *[grid_model(["n", 2, 5, 6], ["n", 3, 4, 2], mode=m, padding_mode=p, align_corners=a)
                 for m, p, a in (("linear", "zeros", 0), ("nearest", "border", 1), ("cubic", "reflection", 0))],
               grid_model(["n", 2, 4, 5, 6], ["n", 3, 4, 2, 3], mode="linear", padding_mode="reflection"),
               grid_model(["n", 2, 6], ["n", 3, 1], mode="cubic"),
               stn_model(2, 0), stn_model(3, 1),
               space_model("SpaceToDepth", ["n", 2, 4, 4], blocksize=2)]
    return [(m, {"n": 2}) for m in models]


X = [1, 2, 5, 6]
