"""A new input shape's first result waits for no tuning and no pipeline build once the runs
before it built ahead (runtime/replay.py _ahead_slice), and never recompiles: counted on the
null backend, not timed (tests/gpu/test_load_latency.py runs a session on an adapter)."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from onyxia.runtime.null import null_executor
from onyxia.runtime.tuner import TuneSettings
from tests.helpers import compile_model, make_model

K, N = 512, 1024


def two_matmuls():
    return make_model([h.make_node("MatMul", ["a", "w0"], ["t"]), h.make_node("MatMul", ["t", "w1"], ["y"])],
                      [("a", np.float32, ["m", K])], ["y"],
                      {"w0": np.zeros((K, K), np.float32), "w1": np.zeros((K, N), np.float32)})


def counts(exe) -> tuple[int, int, int]:
    return exe.stats.load.pipelines, exe.stats.tuning_timings, exe.stats.recompiles


def test_a_second_shape_builds_and_times_nothing_on_its_first_run(tmp_path):
    exe = null_executor(compile_model(two_matmuls(), {"m": 80}),
                        tuning=TuneSettings(enabled=True, cache_dir=tmp_path / "cache", share=None))
    feeds = {"a": np.zeros((80, K), np.float32)}
    loaded = counts(exe)
    assert loaded[1] == 0 and exe.stats.load.deferred > 0  # nothing timed at load
    exe.run(feeds)
    assert counts(exe) == loaded  # the first result: no timing, nothing built
    for _ in range(4):  # later runs time the waiting steps, then build ahead
        exe.run(feeds)
    assert exe.stats.tuning_timings > 0 and not exe.tuner.pending and exe.stats.prebuilt > 0
    before = counts(exe)
    exe.update_dimensions({"m": 1})  # decode: other kernels (the coalesced matvec and its split-K sum)
    exe.run({"a": np.zeros((1, K), np.float32)})
    assert counts(exe) == before
    assert "matmul/gemv" in {exe.model.shaders[d.shader].label for d in exe.dispatch_commands()}


def test_tuning_off_still_builds_ahead(tmp_path):
    exe = null_executor(compile_model(two_matmuls(), {"m": 80}), tuning=TuneSettings(enabled=False))
    feeds = {"a": np.zeros((80, K), np.float32)}
    exe.run(feeds)
    assert exe.stats.prebuilt == 0  # not before a first result
    exe.run(feeds)
    assert exe.stats.prebuilt > 0 and exe.stats.tuning_timings == 0
