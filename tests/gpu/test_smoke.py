"""End-to-end: a small MLP with a folded shape chain and symbolic dims, against onnxruntime."""

import numpy as np
import pytest
from onnx import helper as h

from tests.helpers import assert_matches_ort, compile_model, make_model


def mlp_model():
    rng = np.random.default_rng(0)
    nodes = [
        h.make_node("MatMul", ["x", "W"], ["h"]),
        h.make_node("Relu", ["h"], ["r"]),
        h.make_node("Shape", ["x"], ["s"]),
        h.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        h.make_node("Unsqueeze", ["b", "ax0"], ["bu"]),
        h.make_node("Concat", ["bu", "m1"], ["shp"], axis=0),
        h.make_node("Reshape", ["r", "shp"], ["y0"]),
        h.make_node("Add", ["y0", "bias"], ["y"]),
    ]
    inits = {"W": rng.standard_normal((8, 16)).astype(np.float32), "zero": np.array(0, np.int64),
             "ax0": np.array([0], np.int64), "m1": np.array([-1], np.int64), "bias": np.float32(0.5)}
    return make_model(nodes, [("x", np.float32, ["batch", "seq", 8])], ["y"], inits)


@pytest.mark.parametrize("transport", ["immediate", "uniform"])
def test_mlp_matches_onnxruntime_across_dims(runtime, transport):
    model = mlp_model()
    compiled = compile_model(model, {"batch": 2, "seq": 3})
    exe = runtime.load_model(compiled, transport=transport)
    from tests.helpers import run_ort
    for dims in ({"batch": 2, "seq": 3}, {"batch": 1, "seq": 1}, {"batch": 3, "seq": 5}):
        exe.update_dimensions(dims)
        x = np.random.default_rng(1).random((dims["batch"], dims["seq"], 8), dtype=np.float32)
        np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert exe.stats.recompiles == 0


def test_assert_matches_ort_helper(runtime):
    x = np.random.default_rng(2).random((2, 4, 8), dtype=np.float32)
    assert_matches_ort(runtime, mlp_model(), {"x": x}, {"batch": 2, "seq": 4})
