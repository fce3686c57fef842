"""Slice bounds that are minus a length (`x[-seq:]`, `x[:-seq]`) are dim arithmetic: negative
counts from the end, -0 is the start, out of range clamps (ONNX's rules), so one plan follows
every length. T5's decoder slices its position bias by `-decoder_sequence_length`: a plain
InferenceSession over optimum's merged decoder runs every length with one compile
(tests/gpu/test_runtime_if.py). Oracle: onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

import onyxia
from tests.helpers import make_model, run_ort

pytestmark = pytest.mark.gpu

@pytest.mark.parametrize("bound", ["start", "end"])
def test_minus_a_length_as_slice_bound_matches_onnxruntime_at_every_length(runtime, bound):
    nodes = [h.make_node("Shape", ["y"], ["sy"]), h.make_node("Gather", ["sy", "zero"], ["m"]),
             h.make_node("Neg", ["m"], ["neg"]), h.make_node("Unsqueeze", ["neg", "ax"], ["b"]),
             h.make_node("Slice", ["x", "b", "big", "ax"] if bound == "start" else ["x", "zero1", "b", "ax"], ["out"])]
    model = make_model(nodes, [("x", np.float32, ["n", 3]), ("y", np.float32, ["k"])], ["out"], {
        "zero": np.array(0, np.int64), "zero1": np.array([0], np.int64), "ax": np.array([0], np.int64),
        "big": np.array([2**63 - 1], np.int64)})
    sess = onyxia.InferenceSession(model.SerializeToString(), runtime=runtime)
    # k < n, k = n, k = 0 (-0 is the start), k > n (clamped), empty data
    for n, k in [(5, 2), (5, 5), (5, 0), (4, 7), (6, 1), (0, 0), (0, 3)]:
        feeds = {"x": np.arange(n * 3, dtype=np.float32).reshape(n, 3), "y": np.zeros(k, np.float32)}
        (want,) = run_ort(model, feeds)
        got = sess.run(None, feeds)[0]
        assert got.shape == want.shape and np.array_equal(got, want), (n, k)
    assert sess.stats.compiles == 1 and sess.stats.recompiles == []
