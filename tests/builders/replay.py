"""The replay tests' encoder-like model (tests/unit/test_replay.py, test_step_kinds.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper as h

from tests.helpers import make_model


def encoder_model() -> onnx.ModelProto:
    """MatMul/elementwise over [batch, seq, 8], a folded Shape chain feeding Reshape, and a
    symbolic Shape output (a WriteBuffer: host data that update_dimensions rewrites)."""
    rng = np.random.default_rng(0)
    nodes = [
        h.make_node("Gather", ["emb", "ids"], ["g"], axis=0),
        h.make_node("Add", ["x", "g"], ["a"]),
        h.make_node("MatMul", ["a", "W"], ["mm"]),
        h.make_node("Relu", ["mm"], ["r"]),
        h.make_node("Concat", ["r", "a"], ["c"], axis=2),
        h.make_node("Shape", ["x"], ["shp"]),
        h.make_node("Gather", ["shp", "zero"], ["b"], axis=0),
        h.make_node("Unsqueeze", ["b", "ax0"], ["bu"]),
        h.make_node("Concat", ["bu", "m1"], ["target"], axis=0),
        h.make_node("Reshape", ["c", "target"], ["y"]),
    ]
    inits = {"emb": rng.standard_normal((16, 8)).astype(np.float32),
             "W": rng.standard_normal((8, 6)).astype(np.float32), "zero": np.array(0, np.int64),
             "ax0": np.array([0], np.int64), "m1": np.array([-1], np.int64)}
    return make_model(nodes, [("x", np.float32, ["batch", "seq", 8]), ("ids", np.int64, ["batch", "seq"])],
                      ["y", "shp"], inits)
