"""Load latency in a session on a real adapter, counted rather than timed: a second input shape
neither recompiles nor times kernels nor builds pipelines before its first result, which replays
kernels that ran already (runtime/select.py, warm first); the tuning
cache written by one process serves the next (no timing there); the load's progress line is
drawn only on a terminal."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

import onyxia
from onyxia.loading import DelayedProgress
from onyxia.runtime.tuner import TuneSettings
from tests.gpu.test_tuning import K, mlp
from tests.helpers import run_ort

ROOT = Path(__file__).resolve().parents[2]


def running(exe) -> set[str]:
    return {exe.model.shaders[d.shader].label for d in exe.dispatch_commands() if all(d.workgroups)}


def feeds(m: int) -> dict[str, np.ndarray]:
    return {"a": np.random.default_rng(m).standard_normal((m, K)).astype(np.float32)}


def test_a_second_shape_recompiles_nothing_and_waits_for_no_tuning_or_pipeline(runtime, tmp_path):
    model = mlp()
    sess = onyxia.InferenceSession(model, runtime=runtime, plan_cache=False)
    exe_settings = TuneSettings(enabled=True, cache_dir=tmp_path / "cache", repeats=2, share=None)
    sess.run(None, feeds(70))
    exe = sess.executor
    exe.tuner.settings = exe_settings  # tuning on for this executor (the suite runs with it off)
    exe.assume_adapter("gpu")  # GPU-type kernels: matvec ones at M = 1, others at M = 70
    for _ in range(8):  # later runs: the waiting steps timed, then pipelines built ahead
        sess.run(None, feeds(70))
    assert not exe.tuner.pending and exe.stats.prebuilt > 0
    prefill = running(exe)
    before = (exe.stats.load.pipelines, exe.stats.tuning_timings, exe.stats.recompiles)
    exe.update_dimensions({"m": 1})  # decode-like: the heuristic wants other kernels than M = 70's
    # lavapipe compiles a kernel at its first dispatch: the first result at M = 1 replays only
    # kernels that ran (at M = 70, or in the tuner's timing there)
    assert exe.cold_kernels() == 0
    [out] = sess.run(None, feeds(1))
    np.testing.assert_allclose(out, run_ort(model, feeds(1))[0], rtol=1e-4, atol=1e-4)
    [out] = sess.run(None, feeds(1))  # the next run switches to them, their pipelines built ahead
    np.testing.assert_allclose(out, run_ort(model, feeds(1))[0], rtol=1e-4, atol=1e-4)
    assert running(exe) != prefill and exe.stats.upgraded > 0
    assert (exe.stats.load.pipelines, exe.stats.tuning_timings, exe.stats.recompiles) == before
    assert sess.executor is exe and sess.stats.compiles == 1 and sess.stats.recompiles == []


def test_a_new_shape_with_the_same_kernels_times_nothing_on_its_first_call(runtime, tmp_path):
    # M = 70 then M = 72: the same choices (nothing a run replays changes), but the steps still
    # waiting to be timed at M = 70 must wait for the call after the new shape's first result
    # (InferenceSession.run holds work ahead when a feed's shape changes)
    model = mlp()
    sess = onyxia.InferenceSession(model, runtime=runtime, plan_cache=False)
    sess.run(None, feeds(70))
    exe = sess.executor
    exe.tuner.settings = TuneSettings(enabled=True, cache_dir=tmp_path / "cache", repeats=2, share=None)
    exe.tuner.cache = None  # no earlier test's timings (the suite's tuning cache)
    exe.assume_adapter("cpu")  # settle the Selects again with tuning on: the tuned ones wait
    sess.run(None, feeds(70))  # ... for a run at their shape class to have served a result
    assert exe.tuner.pending and exe.tuner.ready(), "nothing waiting: the test would prove nothing"
    replayed = running(exe)
    timings = exe.stats.tuning_timings
    [out] = sess.run(None, feeds(72))
    np.testing.assert_allclose(out, run_ort(model, feeds(72))[0], rtol=1e-4, atol=1e-4)
    assert running(exe) == replayed and exe.stats.tuning_timings == timings
    sess.run(None, feeds(72))  # the next call at that shape does the waiting work
    assert exe.stats.tuning_timings > timings


_CHILD = """
import json, sys
import numpy as np
import onyxia
from onyxia.runtime.select import SelectCommand
sess = onyxia.InferenceSession(sys.argv[1])
a = np.ones((3, 64), np.float32)
for _ in range(int(sys.argv[2])):
    sess.run(None, {"a": a})
exe = sess.executor
if len(sys.argv) > 3:  # what runs would finish in time (work ahead takes a share of their time)
    exe.tune()
print(json.dumps({"timings": exe.stats.tuning_timings, "pending": len(exe.tuner.pending),
                  "sources": sorted({c.source for c in exe.commands if isinstance(c, SelectCommand) and c.tuned}),
                  "cache": sess.load_report.cache}))
"""


def test_the_tuning_cache_of_one_process_serves_the_next(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    env = {**os.environ, "ONYXIA_TUNE": "1", "ONYXIA_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def child(runs: int, *tune: str) -> dict:
        done = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(runs), *tune], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = child(2, "tune")  # the first run untimed, then timing
    assert first["timings"] > 0 and first["pending"] == 0 and first["cache"] == "miss"
    second = child(2)
    assert second == {"timings": 0, "pending": 0, "sources": ["cache"], "cache": "hit"}


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_load_progress_line_is_drawn_only_on_a_terminal(runtime, capsys):
    model = mlp()
    terminal, pipe = _Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        sess = onyxia.InferenceSession(model, runtime=runtime, plan_cache=False,
                                       progress=DelayedProgress("loading", delay_s=0.0, stream=stream))
        sess.run(None, feeds(3))
    assert "pipelines" in terminal.getvalue() and terminal.getvalue().endswith("\r")  # drawn, then cleared
    assert pipe.getvalue() == ""
    onyxia.InferenceSession(model, runtime=runtime, plan_cache=False).run(None, feeds(3))  # the default: stderr
    assert capsys.readouterr().err == ""  # not a terminal here


def test_pipelines_built_together_report_each_and_run_right(runtime):
    from tests.helpers import compile_model

    model = mlp()
    calls = []
    exe = runtime.load_model(compile_model(model, {"m": 5}), progress=lambda done, total: calls.append((done, total)))
    built = exe.stats.load.pipelines
    assert built >= 2  # built on threads (WgpuBackend.make_programs)
    assert calls == [(n, built) for n in range(1, built + 1)]
    np.testing.assert_allclose(exe.run(feeds(5))["y"], run_ort(model, feeds(5))[0], rtol=1e-4, atol=1e-4)
