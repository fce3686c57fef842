"""Builders shared by tests/gpu/test_deform_conv.py and tests/gpu/test_shader_validation.py's table."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model


def out_size(size: int, k: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - (k - 1) * dilation - 1) // stride + 1


def deform_model(x_shape, w_shape, *, group=1, offset_group=1, stride=1, pad=0, dilation=1, bias=False,
                 mask=False, name="deform0", out=None):
    kh, kw = w_shape[2:]
    out = out or [out_size(x_shape[2], kh, stride, pad, dilation), out_size(x_shape[3], kw, stride, pad, dilation)]
    inputs = [("x", np.float32, x_shape), ("w", np.float32, w_shape),
              ("off", np.float32, [x_shape[0], offset_group * kh * kw * 2, *out])]
    names = ["x", "w", "off", "", ""]
    if bias:
        names[3] = "b"
        inputs.append(("b", np.float32, [w_shape[0]]))
    if mask:
        names[4] = "m"
        inputs.append(("m", np.float32, [x_shape[0], offset_group * kh * kw, *out]))
    while not names[-1]:
        names.pop()
    node = h.make_node("DeformConv", names, ["y"], name=name, group=group, offset_group=offset_group,
                       strides=[stride, stride], pads=[pad] * 4, dilations=[dilation, dilation])
    return make_model([node], inputs, ["y"], opset=19)


def validation_models() -> list[tuple[object, dict[str, int]]]:
    """For tests/gpu/test_shader_validation.py: both stages, with and without mask."""
    n = {"n": 2}
    return [(deform_model(["n", 4, 7, 8], [4, 2, 3, 3], group=2, bias=True, mask=True), n),
            (deform_model(["n", 4, 7, 8], [4, 4, 3, 3], bias=True), n)]
