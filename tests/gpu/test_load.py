"""Loading: the plan cache through InferenceSession (a hit runs like a fresh compile, against
onnxruntime), the load report's fields, deferred pipelines and shared identical shaders."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import onyxia
from onyxia.plan import Dispatch
from tests.helpers import compile_model, run_ort
from tests.models import bert_encoder


@pytest.fixture
def bert_file(tmp_path):
    path = tmp_path / "bert.onnx"
    path.write_bytes(bert_encoder().SerializeToString())
    return path


def _feeds(seq: int = 5):
    rng = np.random.default_rng(0)
    return {"input_ids": rng.integers(0, 64, (1, seq)).astype(np.int64),
            "attention_mask": np.ones((1, seq), np.int64)}


def test_a_cache_hit_runs_like_a_fresh_compile(runtime, tmp_path, bert_file):
    cache = tmp_path / "plans"
    feeds = _feeds()
    want = run_ort(bert_encoder(), feeds)
    results = {}
    for attempt in ("cold", "warm", "fresh"):
        sess = onyxia.InferenceSession(str(bert_file), runtime=runtime,
                                       plan_cache=False if attempt == "fresh" else cache)
        results[attempt] = sess.run(None, feeds)
        report = sess.load_report
        assert report.cache == {"cold": "miss", "warm": "hit", "fresh": "off"}[attempt]
        assert bool(report.stages) == (attempt != "warm")  # a hit skips the compiler
        assert report.runtime.pipelines > 0 and report.runtime.total_s > 0 and report.first_run_s > 0
        assert report.parse_s > 0 and report.runtime.render_s > 0 and report.runtime.pipelines_s > 0
    for got in results.values():
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    for a, b in zip(results["warm"], results["fresh"]):
        np.testing.assert_array_equal(a, b)
    # Other dims (static set) miss; feeds of other lengths reuse the executor (no new load).
    sess = onyxia.InferenceSession(str(bert_file), runtime=runtime, plan_cache=cache, static=["seq"])
    sess.run(None, feeds)
    assert sess.load_report.cache == "miss"


def test_pipelines_of_alternatives_not_replayed_wait_until_chosen(runtime):
    model = bert_encoder()
    compiled = compile_model(model, {"batch": 1, "seq": 5})
    exe = runtime.load_model(compiled)
    load = exe.stats.load
    assert load.pipelines + load.shared + load.deferred == len({d.shader for s in compiled.steps
                                                              for d in s.dispatches()})
    kind = "gpu" if exe.adapter_facts.kind == "cpu" else "cpu"
    before = len(exe.programs)
    exe.assume_adapter(kind)  # the other kind's kernels: built now, and they compute the same
    assert len(exe.programs) >= before
    want = run_ort(model, _feeds())
    for name, b in zip(compiled.outputs, want):
        np.testing.assert_allclose(exe.run(_feeds())[name], b, rtol=1e-4, atol=1e-4)


def test_identical_shaders_share_one_pipeline(runtime):
    """A plan whose second shader is a copy of the first (another label): one pipeline, the
    same results."""
    model = bert_encoder()
    compiled = compile_model(model, {"batch": 1, "seq": 5})
    first = next(s for op in compiled.operations for s in op.steps if isinstance(s, Dispatch))  # not in a Select
    copy = dataclasses.replace(compiled.shaders[first.shader], label="copy")
    shaders = (*compiled.shaders, copy)
    seen = {"done": False}

    def repoint(step):
        if isinstance(step, Dispatch) and step.shader == first.shader and not seen["done"]:
            seen["done"] = True
            return dataclasses.replace(step, shader=len(shaders) - 1)
        return step

    operations = tuple(dataclasses.replace(op, steps=tuple(repoint(s) for s in op.steps))
                       for op in compiled.operations)
    assert seen["done"]
    duplicated = dataclasses.replace(compiled, shaders=shaders, operations=operations)
    plain, shared = runtime.load_model(compiled), runtime.load_model(duplicated)
    assert shared.stats.load.shared == plain.stats.load.shared + 1
    assert shared.stats.load.pipelines == plain.stats.load.pipelines
    for name in compiled.outputs:
        np.testing.assert_array_equal(plain.run(_feeds())[name], shared.run(_feeds())[name])
