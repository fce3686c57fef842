"""Builders shared by tests/gpu/test_generators.py and tests/gpu/test_shader_validation.py's table."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h

from tests.helpers import make_model


def random_model(op: str, shape=(64, 128), *, like: bool = False, **attrs):
    if like:
        return make_model([h.make_node(op, ["x"], ["y"], **attrs)], [("x", np.float32, ["n", shape[1]])], ["y"])
    return make_model([h.make_node(op, [], ["y"], shape=list(shape), **attrs)], [], ["y"])


def bernoulli_model(dtype=None, seed=None):
    attrs = ({} if dtype is None else {"dtype": dtype}) | ({} if seed is None else {"seed": seed})
    return make_model([h.make_node("Bernoulli", ["p"], ["y"], **attrs)], [("p", np.float32, ["n"])], ["y"], opset=15)


SAME_WIDTH = [(np.float32, np.int32), (np.int32, np.float32), (np.uint32, np.int32), (np.float32, np.uint32),
              (np.int8, np.uint8), (np.uint8, np.int8), (np.bool_, np.uint8), (np.uint16, np.int16),
              (np.int16, np.float16), (np.float16, np.uint16)]


def bitcast_model(src, dst, shape=("n", 3)):
    to = h.np_dtype_to_tensor_dtype(np.dtype(dst))
    return make_model([h.make_node("BitCast", ["x"], ["y"], to=to)], [("x", src, list(shape))], ["y"], opset=26)


def validation_models() -> list[tuple[onnx.ModelProto, dict[str, int]]]:
    """Models covering EyeLike, the random ops and BitCast, for tests/gpu/test_shader_validation.py."""
    n = {"n": 3}
    models = [(make_model([h.make_node("EyeLike", ["x"], ["y"], k=1)], [("x", np.float32, ["n", 4])], ["y"]), n)]
    models += [(random_model(op, seed=1.0), {}) for op in ("RandomUniform", "RandomNormal")]
    models += [(random_model(op, like=True), n) for op in ("RandomUniformLike", "RandomNormalLike")]
    models += [(bernoulli_model(TensorProto.INT64), n), (bernoulli_model(), n)]
    models += [(bitcast_model(src, dst), n) for src, dst in SAME_WIDTH]
    return models
