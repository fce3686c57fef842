"""Builders shared by tests/gpu/test_spectral.py and tests/gpu/test_shader_validation.py's table."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model


def dft_model(x_shape, *, opset: int = 20, axis: int | None = None, length: int | None = None, name="dft0",
              **attrs):
    """DFT with dft_length (and, at opset 20, axis) as constant inputs."""
    inits: dict[str, np.ndarray] = {}
    inputs = ["x", ""]
    if length is not None:
        inputs[1], inits["n"] = "n", np.array(length, np.int64)
    if opset >= 20 and axis is not None:
        inputs.append("axis")
        inits["axis"] = np.array(axis, np.int64)
    elif axis is not None:
        attrs["axis"] = axis
    while inputs[-1] == "":
        inputs.pop()
    node = h.make_node("DFT", inputs, ["y"], name=name, **attrs)
    return make_model([node], [("x", np.float32, x_shape)], ["y"], inits, opset=opset)


def stft_model(x_shape, step: int, *, window: int | None = None, frame_length: int | None = None, name="stft0",
               **attrs):
    inputs, inits, graph_inputs = ["x", "step"], {"step": np.array(step, np.int64)}, [("x", np.float32, x_shape)]
    inputs.append("w" if window is not None else "")
    if window is not None:
        graph_inputs.append(("w", np.float32, [window]))
    if frame_length is not None:
        inputs.append("fl")
        inits["fl"] = np.array(frame_length, np.int64)
    while inputs[-1] == "":
        inputs.pop()
    node = h.make_node("STFT", inputs, ["y"], name=name, **attrs)
    return make_model([node], graph_inputs, ["y"], inits, opset=17)


def validation_models() -> list[tuple[object, dict[str, int]]]:
    """Models covering every stage and variant, for tests/gpu/test_shader_validation.py."""
    n = {"n": 3}
    return [
        (dft_model(["n", 16, 2], axis=1), n),  # power of two
        (dft_model(["n", 10, 3, 1], axis=1, length=12, onesided=1), n),  # direct
        (dft_model(["n", 6, 2], axis=1, length=10, inverse=1, onesided=1), n),  # direct, one-sided inverse
        (dft_model(["n", 200, 1], axis=1, inverse=1), n),  # Bluestein
        (dft_model([2, "n", 2], opset=17, axis=1, onesided=1, inverse=1), {"n": 5}),  # symbolic length
        (stft_model(["n", 64, 1], 8, window=16), n),
        (stft_model(["n", 300, 2], 50, frame_length=150, onesided=0), n),
    ]
