"""Builders shared by tests/gpu/test_datadep.py and tests/gpu/test_shader_validation.py's table."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model


def validation_models() -> list:
    """(model, dims) for tests/gpu/test_shader_validation.py: every kernel variant these ops emit,
    with a dynamic dim `n` (also compiled static there)."""
    def one(node, inputs, outputs, opset=11):
        return make_model([node], inputs, outputs, opset=opset), {"n": 3}

    models = [one(h.make_node("NonZero", ["x"], ["y"]), [("x", dt, ["n", 4])], ["y"])
              for dt in (np.float32, np.bool_, np.int64)]
    models += [one(h.make_node("Compress", ["x", "c"], ["y"], **attrs), [("x", np.float32, ["n", 4]),
                                                                       ("c", np.bool_, [2])], ["y"])
               for attrs in ({}, {"axis": 1})]
    models += [one(h.make_node("Unique", ["x"], ["y", "i", "inv", "c"], **attrs), [("x", dt, ["n", 4])],
                   ["y", "i", "inv", "c"]) for attrs in ({}, {"axis": 1, "sorted": 0}) for dt in (np.float32, np.int64)]
    for inputs, center in ((5, 0), (2, 1), (4, 1)):
        spec = [("boxes", np.float32, [1, "n", 4]), ("scores", np.float32, [1, 2, "n"]), ("max", np.int64, [1]),
                ("iou", np.float32, [1]), ("score", np.float32, [1])][:inputs]
        models.append(one(h.make_node("NonMaxSuppression", [s[0] for s in spec], ["y"], center_point_box=center),
                          spec, ["y"]))
    models.append(one(h.make_node("TopK", ["x", "k"], ["v", "i"]), [("x", np.float32, [2, "n"]),
                                                                  ("k", np.int64, [1])], ["v", "i"], opset=18))
    return models
