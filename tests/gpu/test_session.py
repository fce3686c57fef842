"""InferenceSession: onnxruntime's API, symbols bound from feeds, value specialization."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper as h

import onyxia
from onyxia.errors import InputError
from tests.helpers import make_model, run_ort


def _mlp():
    rng = np.random.default_rng(0)
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Add", ["m", "b"], ["a"]),
             h.make_node("Relu", ["a"], ["y"]), h.make_node("Neg", ["a"], ["z"])]
    inits = {"w": rng.standard_normal((6, 5)).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)}
    return make_model(nodes, [("x", np.float32, ["batch", "seq", 6])], ["y", "z"], inits)


def test_api_matches_onnxruntime(runtime):
    model = _mlp()
    ours = onyxia.InferenceSession(model.SerializeToString(), runtime=runtime)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [(a.name, a.type, a.shape) for a in ours.get_inputs()] == \
        [(a.name, a.type, a.shape) for a in ref.get_inputs()]
    assert [a.name for a in ours.get_outputs()] == [a.name for a in ref.get_outputs()]
    assert [a.type for a in ours.get_outputs()] == ["tensor(float)"] * 2
    x = np.random.default_rng(1).standard_normal((2, 3, 6)).astype(np.float32)
    for names in (None, ["z"], ["z", "y"]):
        got, want = ours.run(names, {"x": x}), ref.run(names, {"x": x})
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_symbols_bound_from_feeds_without_recompiling(runtime):
    model = _mlp()
    sess = onyxia.InferenceSession(model, runtime=runtime)
    rng = np.random.default_rng(2)
    for shape in ((1, 4, 6), (1, 1, 6), (3, 2, 6), (1, 4, 6)):
        x = rng.standard_normal(shape).astype(np.float32)
        for a, b in zip(sess.run(None, {"x": x}), run_ort(model, {"x": x})):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert sess.executor.stats.recompiles == 0
    assert sess.executor.stats.dimension_updates == 3


def test_shape_values_fed_at_run_time_are_specialized(runtime):
    model = make_model([h.make_node("ReduceSum", ["x", "axes"], ["r"], keepdims=0),
                        h.make_node("Reshape", ["r", "shape"], ["y"])],
                       [("x", np.float32, [2, 3, 4]), ("axes", np.int64, [1]), ("shape", np.int64, [2])], ["y"])
    sess = onyxia.InferenceSession(model, runtime=runtime)
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    for axes, shape in (([1], [4, 2]), ([2], [3, 2]), ([1], [4, 2])):
        feeds = {"x": x, "axes": np.array(axes, np.int64), "shape": np.array(shape, np.int64)}
        np.testing.assert_allclose(sess.run(None, feeds)[0], run_ort(model, feeds)[0], rtol=1e-5, atol=1e-5)
    assert len(sess._executors) == 2  # the third call reuses the first specialization


def test_bad_feeds_name_the_input(runtime):
    sess = onyxia.InferenceSession(_mlp(), runtime=runtime)
    x = np.zeros((1, 2, 6), np.float32)
    with pytest.raises(InputError, match="missing inputs \\['x'\\]"):
        sess.run(None, {})
    with pytest.raises(InputError, match="unknown inputs \\['q'\\]"):
        sess.run(None, {"x": x, "q": x})
    with pytest.raises(InputError, match="'x' has dtype float64"):
        sess.run(None, {"x": x.astype(np.float64)})
    with pytest.raises(InputError, match="'x' has rank 2"):
        sess.run(None, {"x": x[0]})
    with pytest.raises(InputError, match="dim 2 is 5, expected 6"):
        sess.run(None, {"x": np.zeros((1, 2, 5), np.float32)})
    assert sess.run(["y"], {"x": x})[0].shape == (1, 2, 5)  # still usable after errors
