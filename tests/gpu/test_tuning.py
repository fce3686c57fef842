"""The autotuner on a real adapter: a model run with tuning on and off matches onnxruntime for
decode, short and long prefills; nothing is timed at load or at a shape class's first run; a
second load reads the disk cache and times nothing; a deleted cache only costs a re-tune;
`onyxia tune` writes the cache that a later load uses."""

from __future__ import annotations

import math
import shutil

import numpy as np
from onnx import helper as h

from onyxia.runtime.select import SelectCommand
from onyxia.runtime.tuner import TuneSettings
from tests.helpers import compile_model, make_model, run_ort

RNG = np.random.default_rng(3)
K, H = 64, 96


def mlp():
    w1 = (RNG.standard_normal((K, H)) / 8).astype(np.float32)
    w2 = (RNG.standard_normal((H, K)) / 8).astype(np.float32)
    return make_model([h.make_node("MatMul", ["a", "w1"], ["m"]), h.make_node("Relu", ["m"], ["r"]),
                       h.make_node("MatMul", ["r", "w2"], ["y"])], [("a", np.float32, ["m", K])], ["y"],
                      {"w1": w1, "w2": w2})


def tunables(exe) -> list[SelectCommand]:
    return [c for c in exe.commands if isinstance(c, SelectCommand) and c.tuned]


def test_tuned_and_heuristic_runs_match_onnxruntime(runtime, tmp_path):
    model = mlp()
    compiled = compile_model(model, {"m": 70})
    on = runtime.load_model(compiled, tuning=TuneSettings(enabled=True, cache_dir=tmp_path / "cache", repeats=2,
                                                          share=None))
    off = runtime.load_model(compiled, tuning=TuneSettings(enabled=False, cache_dir=tmp_path / "cache"))
    assert on.stats.tuning_timings == 0  # nothing timed at load
    for m in (1, 5, 70, 1):
        feeds = {"a": RNG.standard_normal((m, K)).astype(np.float32)}
        ref = run_ort(model, feeds)[0]
        for exe in (on, off):
            exe.update_dimensions({"m": m})
            for _ in range(2):  # the heuristic's choice, then (on) the timed one
                np.testing.assert_allclose(exe.run(feeds)["y"], ref, rtol=1e-4, atol=1e-4, err_msg=f"m={m}")
    assert on.stats.tuning_timings > 0 and off.stats.tuning_timings == 0
    assert {c.source for c in tunables(on)} <= {"timed", "cache"}
    assert {c.source for c in tunables(off)} == {"default"}
    assert on.stats.recompiles == 0 and on.stats.reallocs == 0


def test_second_load_times_nothing_and_a_deleted_cache_retunes(runtime, tmp_path):
    compiled = compile_model(mlp(), {"m": 1})
    tuning = TuneSettings(enabled=True, cache_dir=tmp_path / "cache", repeats=2, share=None)
    feeds = {"a": RNG.standard_normal((1, K)).astype(np.float32)}

    def settled(exe):
        exe.run(feeds)
        for _ in range(40):  # runs after the first time what waits, an alternative or more a slice
            if not exe.tuner.pending:
                break
            exe.run(feeds)
        assert not exe.tuner.pending
        return exe

    first = settled(runtime.load_model(compiled, tuning=tuning))
    assert first.stats.tuning_timings > 0
    second = settled(runtime.load_model(compiled, tuning=tuning))
    assert second.stats.tuning_timings == 0 and {c.source for c in tunables(second)} == {"cache"}
    assert [c.chosen for c in tunables(second)] == [c.chosen for c in tunables(first)]
    shutil.rmtree(tmp_path / "cache")
    assert settled(runtime.load_model(compiled, tuning=tuning)).stats.tuning_timings > 0


def test_cli_tune_writes_the_cache_a_load_uses(runtime, tmp_path, monkeypatch, capsys):
    import onnx

    from onyxia.cli import main

    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    monkeypatch.setenv("ONYXIA_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["tune", str(path), "--dim", "m=3"]) == 0
    out = capsys.readouterr().out
    assert "tuned 2 kernel choices" in out and "matmul/f32" in out and "[4x" in out
    monkeypatch.setenv("ONYXIA_TUNE", "1")
    exe = runtime.load_model(compile_model(mlp(), {"m": 3}))
    assert exe.stats.tuning_timings == 0 and {c.source for c in tunables(exe)} == {"cache"}


def test_a_compiled_alternative_far_over_the_cutoff_replays_once(runtime, tmp_path):
    """The tuner compiles an alternative's kernels first (compile_now: an empty grid each, where
    the driver compiles at first dispatch), so its warm-up is a replay: one far over the cutoff
    is the only one. Without `warm` the warm-up may hold a compile and a second replay follows."""
    import time

    model = mlp()
    exe = runtime.load_model(compile_model(model, {"m": 70}), tuning=TuneSettings(enabled=False))
    cmd = tunables(exe)[0]
    k = cmd.chosen
    exe.build_programs(cmd.commands_of(k))
    cold = exe.cold_dispatches(cmd.replayed_by(k))
    assert cold, "nothing cold after a fresh load: the test would prove nothing"
    exe.backend.compile_now(cold)
    exe.mark_warm(cold)
    assert not exe.cold_dispatches(cmd.replayed_by(k))
    backend = exe.backend
    replays = []
    encode, stamped = backend.encode, backend._stamped
    backend.encode = lambda *a: replays.append("wall") or encode(*a)
    backend._stamped = lambda commands, n: replays.extend(["stamp"] * n) or stamped(commands, n)
    deadline = time.perf_counter() + 60
    assert len(backend.time_commands(cmd.alternatives[k], 5, deadline, cutoff=1e-9, warm=True)) == 1
    assert replays == ["wall"]
    replays.clear()
    assert len(backend.time_commands(cmd.alternatives[k], 5, deadline, cutoff=1e-9)) == 1
    assert len(replays) == 2
    feeds = {"a": RNG.standard_normal((70, K)).astype(np.float32)}  # the empty grids changed nothing
    np.testing.assert_allclose(exe.run(feeds)["y"], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_a_probe_runs_a_share_of_the_grid_and_changes_no_result(runtime):
    """probe_commands (the tuner's estimate of an alternative far over the cutoff) runs each
    dispatch on about 1/share of its grid's longest axis and reports that fraction; the
    kernels bound their work by their parameters, so a later full run is exact."""
    model = mlp()
    exe = runtime.load_model(compile_model(model, {"m": 2048}), tuning=TuneSettings(enabled=False))
    feeds = {"a": RNG.standard_normal((2048, K)).astype(np.float32)}
    exe.run(feeds)
    dispatches = [d for d in exe.dispatch_commands() if all(d.workgroups)]
    seconds, share = exe.backend.probe_commands(dispatches, 8)
    full = sum(math.prod(d.workgroups) for d in dispatches)
    part = sum(math.prod(d.workgroups) // max(d.workgroups) * -(-max(d.workgroups) // 8) for d in dispatches)
    assert seconds > 0 and share == part / full < 0.5
    np.testing.assert_allclose(exe.run(feeds)["y"], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)
