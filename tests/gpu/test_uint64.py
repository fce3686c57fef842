"""uint64 on the GPU: stored as u32 words (as int64 is as i32), range-checked where values reach
the device, widened back on download. onnx.reference is the oracle (onnxruntime lacks uint64
kernels for several of these ops)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

from onyxia.errors import InputError, OnyxiaError
from tests.helpers import compile_model, make_model, run_onyxia

U64 = np.uint64
# (op, attributes, how to draw b from a so that the uint64 result fits in 32 bits)
BINARY = {
    "Add": ({}, lambda a, r: r.integers(0, 2**31, a.shape)),
    "Sub": ({}, lambda a, r: r.integers(0, a + 1)),
    "Mul": ({}, lambda a, r: r.integers(0, 2**16, a.shape)),
    "Div": ({}, lambda a, r: r.integers(1, 2**32, a.shape)),
    "Mod": ({}, lambda a, r: r.integers(1, 2**32, a.shape)),
    "BitwiseAnd": ({}, lambda a, r: r.integers(0, 2**32, a.shape)),
    "BitwiseXor": ({}, lambda a, r: r.integers(0, 2**32, a.shape)),
    "BitShift": ({"direction": "RIGHT"}, lambda a, r: r.integers(0, 32, a.shape)),
    "Max": ({}, lambda a, r: r.integers(0, 2**32, a.shape)),
    "Min": ({}, lambda a, r: r.integers(0, 2**32, a.shape)),
    "Greater": ({}, lambda a, r: r.integers(0, 2**32, a.shape)),
    "Equal": ({}, lambda a, r: np.where(r.random(a.shape) < 0.5, a, r.integers(0, 2**32, a.shape))),
}


def binary_model(op: str, shape, attrs):
    return make_model([h.make_node(op, ["a", "b"], ["y"], **attrs)], [("a", U64, shape), ("b", U64, shape)], ["y"],
                      opset=18)


@settings(max_examples=30, deadline=None)
@given(op=st.sampled_from(sorted(BINARY)), size=st.integers(1, 40), seed=st.integers(0, 2**31))
def test_uint64_elementwise_matches_the_reference(runtime, op, size, seed):
    rng = np.random.default_rng(seed)
    attrs, draw_b = BINARY[op]
    a = rng.integers(0, 2**31 if op == "Add" else 2**16 if op == "Mul" else 2**32, size).astype(U64)
    feeds = {"a": a, "b": np.asarray(draw_b(a, rng)).astype(U64)}
    model = binary_model(op, [size], attrs)
    ours = run_onyxia(runtime, model, feeds)[0]
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    assert ours.dtype == expected.dtype
    np.testing.assert_array_equal(ours, expected)


def test_uint64_topk_and_casts(runtime):
    x = np.array([[4000000000, 7, 3000000000, 12], [1, 2**32 - 1, 0, 5]], U64)
    nodes = [h.make_node("TopK", ["x", "k"], ["v", "i"], axis=1), h.make_node("Cast", ["x"], ["f"], to=1),
             h.make_node("Cast", ["v"], ["back"], to=13)]
    model = make_model(nodes, [("x", U64, [2, 4])], ["v", "i", "f", "back"], {"k": np.array([3], np.int64)})
    for ours, expected in zip(run_onyxia(runtime, model, {"x": x}), ReferenceEvaluator(model).run(None, {"x": x})):
        np.testing.assert_array_equal(ours, expected)


def test_a_uint64_feed_past_32_bits_is_an_input_error_naming_it(runtime):
    exe = runtime.load_model(compile_model(binary_model("Add", [3], {})))
    with pytest.raises(InputError, match=r"'a'.*uint64 values must fit in uint32 on the GPU "
                                         r"\(got range \[0, 4294967296\]\)"):
        exe.run({"a": np.array([0, 1, 2**32], U64), "b": np.zeros(3, U64)})
    ok = exe.run({"a": np.array([0, 1, 2**32 - 2], U64), "b": np.ones(3, U64)})["y"]
    np.testing.assert_array_equal(ok, [1, 2, 2**32 - 1])


def test_a_uint64_weight_past_32_bits_fails_at_load_naming_it(runtime):
    model = make_model([h.make_node("Add", ["a", "w"], ["y"])], [("a", U64, [2])], ["y"],
                       {"w": np.array([1, 2**40], U64)})
    with pytest.raises(OnyxiaError, match="'w'.*uint64 values must fit in uint32"):
        runtime.load_model(compile_model(model))


def test_constant_uint64_arithmetic_folds_exactly(runtime):
    """On the host uint64 keeps its 64 bits: a folded product past 2^32 is exact (the device
    never sees it); the same product on the device must fit."""
    big = np.array([2**33 + 5, 7], U64)
    nodes = [h.make_node("Mul", ["c", "c"], ["sq"]), h.make_node("Mod", ["sq", "m"], ["r"]),
             h.make_node("Add", ["r", "x"], ["y"])]
    model = make_model(nodes, [("x", U64, [2])], ["y"], {"c": big, "m": np.array([1000003, 1000003], U64)})
    assert len(compile_model(model).shaders) == 1  # Mul and Mod folded: only the Add runs
    x = np.array([1, 2], U64)
    np.testing.assert_array_equal(run_onyxia(runtime, model, {"x": x})[0],
                                  ReferenceEvaluator(model).run(None, {"x": x})[0])
