"""Builders shared by tests/unit/test_rms_norm_fusion.py and tests/gpu/test_normalization.py:
torch's RMS norm chain."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx import helper as h

from tests.helpers import make_model

K = 16


def torch_rms_norm(*, weight=True, cast=True, exponent=2.0, axis=-1, extra_reader=False, source=None):
    """Hugging Face's RMSNorm as torch.onnx exports it: x * (1 / sqrt(mean(x^2) + eps)) * w."""
    nodes = list(source or [])
    nodes += [h.make_node("Pow", ["x", "two"], ["p"]), h.make_node("ReduceMean", ["p", "axes"], ["m"]),
              h.make_node("Add", ["m", "eps"], ["a"]), h.make_node("Sqrt", ["a"], ["s"]),
              h.make_node("Div", ["one", "s"], ["r"]), h.make_node("Mul", ["x", "r"], ["n"])]
    out = "n"
    if cast:
        nodes.append(h.make_node("Cast", ["n"], ["c"], to=TensorProto.FLOAT))
        out = "c"
    if weight:
        nodes.append(h.make_node("Mul", ["w", out], ["y"]))
        out = "y"
    outputs = [out] + (["m"] if extra_reader else [])
    inits = {"two": np.array(exponent, np.float32), "axes": np.array([axis], np.int64),
             "eps": np.array(1e-6, np.float32), "one": np.array(1.0, np.float32),
             "w": np.linspace(0.5, 1.5, K).astype(np.float32)}
    first = "q" if source else "x"
    return make_model(nodes, [(first, np.float32 if not source else np.int8, [3, K])], outputs, inits)
