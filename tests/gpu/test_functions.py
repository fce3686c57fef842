"""Ops that run as their ONNX function body (operators/functions.py, FunctionExpansionPass) on the
GPU, against onnxruntime where it has the op and onnx.reference otherwise."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import onyxia
from onyxia.errors import OnyxiaError
from tests.builders.functions import flex_model, loss_model, rotary_model
from tests.helpers import assert_matches_ort, compile_model, make_model, run_onyxia, run_ort

PROPERTY = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def loss_feeds(rng, x_shape, weight: bool, ignore_index: int | None):
    c = x_shape[1]
    target = rng.integers(0, c, (x_shape[0], *x_shape[2:])).astype(np.int64)
    if ignore_index is not None:
        target.reshape(-1)[::3] = ignore_index  # some positions ignored
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32), "t": target}
    if weight:
        feeds["w"] = rng.random(c).astype(np.float32) + 0.1
    return feeds


@PROPERTY
@given(op=st.sampled_from(["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"]),
       rank=st.integers(2, 4), reduction=st.sampled_from(["none", "sum", "mean"]), weight=st.booleans(),
       ignore=st.sampled_from([None, 0, -1]), seed=st.integers(0, 2**16))
def test_losses_match_ort(runtime, op, rank, reduction, weight, ignore, seed):
    rng = np.random.default_rng(seed)
    x_shape = [3, 4, 2, 3][:rank]
    attrs = {"reduction": reduction} | ({} if ignore is None else {"ignore_index": ignore})
    log_prob = op == "SoftmaxCrossEntropyLoss"
    opset = 22 if op == "NegativeLogLikelihoodLoss" else 13
    model = loss_model(op, x_shape, weight=weight, log_prob=log_prob, opset=opset, **attrs)
    if ignore == -1:  # a valid class index is never -1: only ignored positions hold it
        feeds = loss_feeds(rng, x_shape, weight, -1)
    else:
        feeds = loss_feeds(rng, x_shape, weight, ignore)
    assert_matches_ort(runtime, model, feeds, rtol=1e-5, atol=1e-5)


def test_loss_with_symbolic_batch_matches_ort(runtime):
    model = loss_model("SoftmaxCrossEntropyLoss", ["n", 5, 3], weight=True, log_prob=True, opset=13)
    rng = np.random.default_rng(1)
    for n in (2, 7):
        assert_matches_ort(runtime, model, loss_feeds(rng, [n, 5, 3], True, None), dims={"n": n}, rtol=1e-5,
                           atol=1e-5)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows_fold_and_match_ort(runtime, op, periodic):
    size = np.array(10, np.int64)
    fed = make_model([h.make_node(op, ["n"], ["y"], periodic=periodic)], [("n", np.int64, [])], ["y"], opset=17)
    const = make_model([h.make_node(op, ["n"], ["y"], periodic=periodic)], [], ["y"], {"n": size}, opset=17)
    (expected,) = run_ort(fed, {"n": size})
    compiled = compile_model(const)
    assert not compiled.steps  # a window of constant size folds to a weight
    (folded,) = run_onyxia(runtime, const, {})
    (on_gpu,) = onyxia.InferenceSession(fed).run(None, {"n": size})  # computed by kernels
    np.testing.assert_allclose(folded, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(on_gpu, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(on_gpu, folded)


@pytest.mark.parametrize("x_shape,size,axes", [([5, 6], [3, 8], None), ([4, 7, 3], [6, 2], [0, 1]),
                                               ([2, 5, 5], [3, 3], [-2, -1])])
def test_center_crop_pad_matches_ort(runtime, x_shape, size, axes):
    attrs = {} if axes is None else {"axes": axes}
    model = make_model([h.make_node("CenterCropPad", ["x", "s"], ["y"], **attrs)], [("x", np.float32, x_shape)], ["y"],
                       {"s": np.array(size, np.int64)}, opset=18)
    x = np.random.default_rng(0).standard_normal(x_shape).astype(np.float32)
    assert_matches_ort(runtime, model, {"x": x}, rtol=0, atol=0)


@pytest.mark.parametrize("x_shape,attrs,positions", [
    ([2, 3, 4, 8], {}, True),
    ([2, 3, 4, 8], {"interleaved": 1}, True),
    ([2, 3, 4, 12], {"rotary_embedding_dim": 8}, True),
    ([2, 4, 24], {"num_heads": 3}, True),
    ([2, 3, 4, 8], {}, False),
])
def test_rotary_embedding_matches_ort(runtime, x_shape, attrs, positions):
    model = rotary_model(x_shape, positions=positions, **attrs)
    rng = np.random.default_rng(2)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input if i.name != "pos"}
    if positions:
        feeds["pos"] = rng.integers(0, 8, (x_shape[0], x_shape[-2] if len(x_shape) == 4 else x_shape[1]))
    assert_matches_ort(runtime, model, feeds, rtol=1e-5, atol=1e-5)


def _assert_matches_reference(runtime, model: onnx.ModelProto, feeds, rtol=1e-5, atol=1e-5):
    expected = ReferenceEvaluator(model).run(None, feeds)
    got = run_onyxia(runtime, model, feeds)
    for a, b in zip(got, expected):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


@pytest.mark.parametrize("alpha", [None, 1.5])
def test_swiglu_matches_reference(runtime, alpha):
    attrs = {} if alpha is None else {"alpha": alpha}
    model = make_model([h.make_node("SwiGLU", ["a", "b"], ["y"], **attrs)], [("a", np.float32, [3, 8]),
                       ("b", np.float32, [3, 8])], ["y"], opset=28)
    rng = np.random.default_rng(3)
    _assert_matches_reference(runtime, model, {"a": rng.standard_normal((3, 8)).astype(np.float32),
                                               "b": rng.standard_normal((3, 8)).astype(np.float32)})


@pytest.mark.parametrize("score_mod", [False, True])
def test_flex_attention_matches_reference(runtime, score_mod):
    model = flex_model(score_mod=score_mod)
    rng = np.random.default_rng(4)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input}
    _assert_matches_reference(runtime, model, feeds)


# ---- errors name the model's node -------------------------------------------------------------

def test_body_error_names_the_original_node():
    # An odd head size passes onnx's checks; the body's halves then do not broadcast.
    model = make_model([h.make_node("RotaryEmbedding", ["x", "c", "s"], ["y"], name="rope")],
                       [("x", np.float32, [1, 2, 3, 9]), ("c", np.float32, [1, 3, 4]), ("s", np.float32, [1, 3, 4])],
                       ["y"], opset=23)
    with pytest.raises(OnyxiaError, match="node 'rope/"):
        compile_model(model)


@pytest.mark.parametrize("op,attrs,inputs,expected", [
    ("NegativeLogLikelihoodLoss", {"ignore_index": 1.5}, [("x", np.float32, [3, 4]), ("t", np.int64, [3])],
     "ignore_index"),
    ("NegativeLogLikelihoodLoss", {"weights": 1}, [("x", np.float32, [3, 4]), ("t", np.int64, [3])], "weights"),
    ("NegativeLogLikelihoodLoss", {}, [("x", np.float32, [3, 4]), ("t", np.float32, [3])], "target"),
    ("HannWindow", {"output_datatype": 8}, [("size", np.int64, [])], "string"),
])
def test_bad_node_is_refused_naming_node_and_attribute(op, attrs, inputs, expected):
    model = make_model([h.make_node(op, [i[0] for i in inputs], ["y"], name="bad_node", **attrs)], inputs, ["y"],
                       opset=22)
    with pytest.raises(OnyxiaError, match="bad_node") as err:
        compile_model(model)
    assert expected in str(err.value)


