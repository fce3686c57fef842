"""Sequences and optionals against onnxruntime: host-side bookkeeping over device tensors.

Sequence and optional inputs are fed as lists / None (InferenceSession compiles for the fed
structure), outputs come back as lists / None; positions, lengths and conditions are known at
compile time or fed values the session specializes on."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto as TP
from onnx import helper as h

import onyxia
from onyxia.errors import ShapeInferenceError
from tests.builders.sequences import SEQ_F32, seq_model
from tests.helpers import compile_model, run_ort

RNG = np.random.default_rng(5)


def f32(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def same(ours, ref) -> None:
    if isinstance(ref, list):
        assert isinstance(ours, list) and len(ours) == len(ref), (type(ours), ref)
        for a, b in zip(ours, ref):
            same(a, b)
    elif ref is None:
        assert ours is None
    else:
        assert ours.dtype == ref.dtype and ours.shape == ref.shape, (ours.dtype, ours.shape, ref.dtype, ref.shape)
        np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


def check(model, feeds_list, runtime) -> onyxia.InferenceSession:
    sess = onyxia.InferenceSession(model, runtime=runtime)
    for feeds in feeds_list:
        for ours, ref in zip(sess.run(None, feeds), run_ort(model, feeds)):
            same(ours, ref)
    return sess


@settings(max_examples=12, deadline=None)
@given(length=st.integers(1, 4), pos=st.integers(-4, 4), erase=st.integers(-4, 3), new_axis=st.booleans())
def test_sequence_ops_match_ort(runtime, length, pos, erase, new_axis):
    pos = max(min(pos, length), -length)
    erase = max(min(erase, length), -(length + 1))  # the insert made it length + 1 long
    nodes = [h.make_node("SequenceInsert", ["s", "t", "p"], ["s2"]),
             h.make_node("SequenceErase", ["s2", "e"], ["s3"]),
             h.make_node("SequenceLength", ["s3"], ["n"]),
             h.make_node("SequenceAt", ["s3", "zero"], ["first"]),
             h.make_node("ConcatFromSequence", ["s3"], ["cat"], axis=0, new_axis=int(new_axis))]
    model = seq_model(nodes, [("s", "seq"), ("t", np.float32, [2, 3])], [("s3", "seq"), "n", "first", "cat"],
                      {"p": np.array(pos, np.int64), "e": np.array(erase, np.int64), "zero": np.array(0, np.int64)})
    check(model, [{"s": [f32(2, 3) for _ in range(length)], "t": f32(2, 3)}], runtime)


@pytest.mark.parametrize("split,axis,keepdims", [(None, 1, 1), (None, 0, 0), (2, 1, 1), ([1, 3, 2], 1, 1)])
def test_split_to_sequence_matches_ort(runtime, split, axis, keepdims):
    inits = {} if split is None else {"split": np.array(split, np.int64)}
    node = h.make_node("SplitToSequence", ["x"] + (["split"] if split is not None else []), ["s"], axis=axis,
                       keepdims=keepdims)
    model = seq_model([node], [("x", np.float32, [3, 6])], [("s", "seq")], inits)
    check(model, [{"x": f32(3, 6)}], runtime)


def test_a_fed_position_is_specialized_on(runtime):
    model = seq_model([h.make_node("SequenceAt", ["s", "p"], ["y"])], [("s", "seq"), ("p", np.int64, [])], ["y"])
    sess = check(model, [{"s": [f32(2), f32(2), f32(2)], "p": np.array(p, np.int64)} for p in (0, 2, -1, 2)],
                 runtime)
    assert len(sess._executors) == 3  # one plan per position value, reused for p=2


def test_sequences_of_different_lengths_and_element_shapes(runtime):
    model = seq_model([h.make_node("SequenceLength", ["s"], ["n"]), h.make_node("SequenceAt", ["s", "k"], ["last"])],
                      [("s", "seq")], ["n", "last"], {"k": np.array(-1, np.int64)})
    check(model, [{"s": [f32(2)]}, {"s": [f32(2), f32(5), f32(1, 3)]}, {"s": [f32(4), f32(4)]}], runtime)


def test_optionals_match_ort(runtime):
    nodes = [h.make_node("OptionalHasElement", ["o"], ["has"]), h.make_node("Optional", ["x"], ["wrapped"]),
             h.make_node("OptionalGetElement", ["wrapped"], ["back"])]
    model = seq_model(nodes, [("o", "opt"), ("x", np.float32, [3])], ["has", "back", ("wrapped", "opt")])
    check(model, [{"o": None, "x": f32(3)}, {"o": f32(2), "x": f32(3)}], runtime)


def test_sequence_map_and_a_loop_over_a_sequence_match_ort(runtime):
    body = h.make_graph([h.make_node("Mul", ["a", "b"], ["c"]), h.make_node("ReduceSum", ["c"], ["r"], keepdims=1)],
                        "map", [h.make_tensor_value_info(n, TP.FLOAT, None) for n in ("a", "b")],
                        [h.make_tensor_value_info("c", TP.FLOAT, None), h.make_tensor_value_info("r", TP.FLOAT, None)])
    mapped = seq_model([h.make_node("SequenceMap", ["s", "w"], ["prod", "sums"], body=body)],
                       [("s", "seq"), ("w", np.float32, [4])], [("prod", "seq"), ("sums", "seq")])
    check(mapped, [{"s": [f32(4), f32(4), f32(4)], "w": f32(4)}], runtime)
    # A Loop carrying a sequence: unrolled, one SequenceInsert per iteration.
    loop_body = h.make_graph([h.make_node("Cast", ["i"], ["fi"], to=TP.FLOAT), h.make_node("Mul", ["x", "fi"], ["v"]),
                              h.make_node("SequenceInsert", ["acc", "v"], ["acc2"]),
                              h.make_node("Identity", ["c"], ["c2"])], "body",
                             [h.make_tensor_value_info("i", TP.INT64, []), h.make_tensor_value_info("c", TP.BOOL, []),
                              h.make_value_info("acc", SEQ_F32)],
                             [h.make_tensor_value_info("c2", TP.BOOL, []), h.make_value_info("acc2", SEQ_F32)])
    loop = seq_model([h.make_node("SequenceEmpty", [], ["empty"], dtype=TP.FLOAT),
                      h.make_node("Loop", ["M", "", "empty"], ["out"], body=loop_body)],
                     [("x", np.float32, [2]), ("M", np.int64, [])], [("out", "seq")])
    check(loop, [{"x": f32(2), "M": np.array(m, np.int64)} for m in (3, 1)], runtime)


def test_lowering_errors_name_the_node():
    model = seq_model([h.make_node("SequenceConstruct", ["a", "b"], ["s"]),
                       h.make_node("SequenceAt", ["s", "k"], ["y"], name="pick")],
                      [("a", np.float32, [2]), ("b", np.float32, [2])], ["y"], {"k": np.array(5, np.int64)})
    with pytest.raises(ShapeInferenceError, match="node 'pick' \\(SequenceAt\\) input 1: position 5 is out of range"):
        compile_model(model)
    fed = seq_model([h.make_node("SequenceLength", ["s"], ["n"])], [("s", "seq")], ["n"])
    with pytest.raises(ShapeInferenceError, match="input 's' is a sequence.*InferenceSession"):
        compile_model(fed)


