"""Slice bounds that are minus a length (`x[-seq:]`, `x[:-seq]`) are dim arithmetic: negative
counts from the end, -0 is the start, out of range clamps (ONNX's rules), so one plan follows
every length. T5's decoder slices its position bias by `-decoder_sequence_length`: a plain
InferenceSession over optimum's merged decoder runs it at several lengths with one compile.
Oracle: onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import helper as h

import onyxia
from tests.helpers import make_model, run_ort

pytestmark = pytest.mark.gpu

T5_DECODER = (Path(__file__).resolve().parent.parent / "data" / "exported" / "seq2seq" / "t5" / "merged"
              / "decoder_model_merged.onnx")


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


def _decoder_feeds(rng, dec: int, past: int, cache: bool, enc: int = 6) -> dict[str, np.ndarray]:
    feeds = {"encoder_attention_mask": np.ones((1, enc), np.int64),
             "input_ids": rng.integers(0, 100, (1, dec)).astype(np.int64),
             "encoder_hidden_states": rng.standard_normal((1, enc, 32)).astype(np.float32),
             "use_cache_branch": np.array([cache])}
    for layer in range(2):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{layer}.decoder.{kv}"] = rng.standard_normal((1, 4, past, 8)).astype(np.float32)
            feeds[f"past_key_values.{layer}.encoder.{kv}"] = rng.standard_normal((1, 4, enc, 8)).astype(np.float32)
    return feeds


def test_t5_merged_decoder_runs_every_length_with_one_compile(runtime):
    import onnxruntime as ort

    sess = onyxia.InferenceSession(str(T5_DECODER), runtime=runtime)
    ref = ort.InferenceSession(str(T5_DECODER), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    # (decoder length, past length, cache branch): two lengths without a cache, two with one
    for dec, past, cache in [(3, 0, False), (5, 0, False), (1, 4, True), (2, 7, True)]:
        feeds = _decoder_feeds(rng, dec, past, cache)
        ours, want = sess.run(None, feeds), ref.run(None, feeds)
        for arg, a, b in zip(ref.get_outputs(), ours, want):
            assert a.shape == b.shape, (arg.name, dec, past)
            if b.size:
                rel = float(np.abs(a - b).max() / np.abs(b).max())
                assert rel <= 1e-4, (arg.name, dec, past, rel)
    assert sess.stats.compiles == 1 and sess.stats.recompiles == []
