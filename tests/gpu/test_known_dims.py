"""A GroupQueryAttention whose past KV head dim is a dim_param (onnxruntime-genai's builder writes
`kv_cache_dim`) compiles with that dim given, runs like onnxruntime, and the runtime holds the
plan to the assumption kv_cache_dim = head size."""

from __future__ import annotations

import numpy as np
import pytest

import onyxia
from onyxia.errors import DimensionError
from tests.builders.known_dims import gqa_model
from tests.helpers import compile_model, run_ort

HEADS, KV_HEADS, HEAD = 4, 2, 16


def _feeds(rng, seq: int, total: int) -> dict[str, np.ndarray]:
    return {"q": rng.standard_normal((1, seq, HEADS * HEAD), dtype=np.float32),
            "k": rng.standard_normal((1, seq, KV_HEADS * HEAD), dtype=np.float32),
            "v": rng.standard_normal((1, seq, KV_HEADS * HEAD), dtype=np.float32),
            "sl": np.array([total - 1], np.int32), "tl": np.array(total, np.int32)}


def test_gqa_with_symbolic_kv_head_dim_matches_onnxruntime(runtime):
    model = gqa_model("kv_cache_dim")
    prompt = 5
    exe = runtime.load_model(compile_model(model, {"S": prompt, "P": 0, "kv_cache_dim": HEAD}))
    rng = np.random.default_rng(0)
    past = ours_past = (np.zeros((1, KV_HEADS, 0, HEAD), np.float32),) * 2
    total = 0
    for step in range(3):  # prefill, then two decode steps feeding present back as past
        seq = prompt if step == 0 else 1
        total += seq
        if step:
            exe.update_dimensions({"S": 1, "P": total - 1})
        f = _feeds(rng, seq, total)
        ref = run_ort(model, {**f, "pk": past[0], "pv": past[1]})
        ours = exe.run({**f, "pk": ours_past[0], "pv": ours_past[1]})
        np.testing.assert_allclose(ours["o"], ref[0], rtol=1e-4, atol=1e-5, err_msg=f"step {step}")
        for name, r in zip(("prk", "prv"), ref[1:]):
            np.testing.assert_allclose(ours[name], r, rtol=1e-5, atol=1e-6, err_msg=f"step {step} {name}")
        past, ours_past = (ref[1], ref[2]), (ours["prk"], ours["prv"])
    assert exe.stats.recompiles == 0


def test_update_dimensions_that_break_the_assumption_name_it(runtime):
    exe = runtime.load_model(compile_model(gqa_model("kv_cache_dim"), {"S": 2, "P": 0, "kv_cache_dim": HEAD}))
    with pytest.raises(DimensionError, match=r"kv_cache_dim = 32 must be 16: node 'gqa'"):
        exe.update_dimensions({"kv_cache_dim": 32})
    assert exe.dims["kv_cache_dim"] == HEAD  # refused: the executor is unchanged


def test_session_binds_the_kv_head_dim_from_the_feeds(runtime):
    model = gqa_model("kv_cache_dim")
    sess = onyxia.InferenceSession(model, runtime=runtime)
    f = {**_feeds(np.random.default_rng(1), 3, 3), "pk": np.zeros((1, KV_HEADS, 0, HEAD), np.float32),
         "pv": np.zeros((1, KV_HEADS, 0, HEAD), np.float32)}
    for ours, ref in zip(sess.run(None, f), run_ort(model, f)):
        np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)
