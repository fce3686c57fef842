"""The autotuner (runtime/tuner.py) replayed without a GPU: the null backend's stand-in cost (one
microsecond per workgroup) makes the fastest alternative known, so these tests check what is
timed, chosen, cached and re-read, not real speed (tests/gpu/test_tuning.py runs it for real)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from onnx import helper as h

from onyxia.runtime import tuner as tuner_module
from onyxia.runtime.null import NULL_LIMITS, null_executor
from onyxia.runtime.select import SelectCommand
from onyxia.runtime.tuner import TuneCache, TuneSettings, shape_class
from tests.helpers import compile_model, make_model

K, N = 512, 1024


def weight_matmul():
    w = np.zeros((K, N), np.float32)
    return make_model([h.make_node("MatMul", ["a", "w"], ["y"])], [("a", np.float32, ["m", K])], ["y"], {"w": w})


@pytest.fixture(scope="module")
def compiled():
    return compile_model(weight_matmul(), {"m": 80})


def settings(tmp_path, **kw) -> TuneSettings:
    """Tuning on; by default a slice at every run after the first (share None): these tests
    count what each run does, test_work_ahead_waits_until_runs_have_earned_it the share rule."""
    return TuneSettings(enabled=True, cache_dir=tmp_path / "cache", **{"share": None, **kw})


def running(exe) -> list[str]:
    return list(dict.fromkeys(exe.model.shaders[d.shader].label.removeprefix("matmul/")
                              for d in exe.dispatch_commands() if all(d.workgroups)))


def tunables(exe) -> list[SelectCommand]:
    return [c for c in exe.commands if isinstance(c, SelectCommand) and c.tuned]


def feeds(m: int) -> dict:
    return {"a": np.zeros((m, K), np.float32)}


def at_decode(compiled, tuning):
    exe = null_executor(compiled, tuning=tuning)
    exe.update_dimensions({"m": 1})
    exe.run(feeds(1))  # the first run at a new shape class replays the heuristic's choice, untimed
    exe.run(feeds(1))  # the next one times the waiting step first
    return exe


def test_nothing_is_timed_at_load_or_at_the_first_run_of_a_shape_class(compiled, tmp_path):
    exe = null_executor(compiled, tuning=settings(tmp_path))
    assert exe.stats.tuning_timings == 0 and [c.source for c in tunables(exe)] == ["default"]
    exe.update_dimensions({"m": 1})
    exe.run(feeds(1))
    assert exe.stats.tuning_timings == 0 and running(exe) == ["gemv", "splitk"]
    exe.run(feeds(1))
    assert exe.stats.tuning_timings >= 3 and running(exe) == ["gemm"]
    exe.update_dimensions({"m": 40})  # a new class: its first run is the heuristic's again
    timed = exe.stats.tuning_timings
    exe.run(feeds(40))
    assert exe.stats.tuning_timings == timed and tunables(exe)[0].source == "default"
    assert exe.stats.recompiles == 0


def two_products():
    layers = [h.make_node("MatMul", ["a", "w0"], ["t"]), h.make_node("MatMul", ["t", "w1"], ["y"])]
    return make_model(layers, [("a", np.float32, ["m", K])], ["y"],
                      {"w0": np.zeros((K, K), np.float32), "w1": np.zeros((K, N), np.float32)})


def eligible(cmd: SelectCommand) -> int:
    return sum(cmd.eligible)


def test_a_run_times_one_alternative_at_least_and_none_past_its_slice(tmp_path):
    """A slice's unit is one alternative: a run waits for one alternative's first replays (on
    lavapipe its compile), not a whole step's; a step is chosen once all of its eligible
    alternatives are timed, over the runs that takes, and chooses what one explicit tune does."""
    compiled = compile_model(two_products(), {"m": 1})
    exe = null_executor(compiled, tuning=settings(tmp_path, slice_s=0.0))
    first, second = tunables(exe)
    exe.run(feeds(1))
    assert exe.stats.tuning_timings == 0 and len(exe.tuner.pending) == 2
    need = eligible(first) + eligible(second)
    assert eligible(first) > 1 and eligible(second) > 1
    for n in range(1, need + 1):
        exe.run(feeds(1))  # a slice of 0 s: one alternative, the rest waits for later runs
        assert exe.stats.tuning_timings == n
        assert exe.stats.tuned == (n >= eligible(first)) + (n == need)
        assert len(exe.tuner.pending) == 2 - exe.stats.tuned
        assert first.source == ("timed" if n >= eligible(first) else "default")
    assert not exe.tuner.pending and not exe.tuner.partial
    exe.run(feeds(1))
    assert exe.stats.tuning_timings == need  # nothing waits
    explicit = null_executor(compiled, tuning=settings(tmp_path / "other"))
    explicit.tune(force=True)
    assert [c.chosen for c in tunables(explicit)] == [first.chosen, second.chosen]


def test_a_step_timed_over_slices_keeps_to_its_budget(tmp_path, monkeypatch):
    """The budget bounds a step's timing summed over its slices: past it the step keeps the
    default, uncached (deferred), and no run times it again."""
    exe = null_executor(compile_model(two_products(), {"m": 1}), tuning=settings(tmp_path, slice_s=0.0, budget_s=1.0))
    first, _ = tunables(exe)
    clock = iter(float(t) for t in range(10_000))  # the tuner's clock: each reading a second later
    monkeypatch.setattr(tuner_module, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    exe.run(feeds(1))
    for _ in range(6):
        exe.run(feeds(1))
    assert (first.key, first.shape_class) in exe.tuner.deferred and first.source == "default"
    assert exe.stats.tuned == 0 and not exe.tuner.partial
    timed = exe.stats.tuning_timings
    exe.run(feeds(1))
    assert exe.stats.tuning_timings == timed
    assert not TuneCache(tmp_path / "cache", exe.tuner.adapter).entries  # no choice cached


def test_a_later_process_goes_on_timing_where_an_earlier_one_stopped(tmp_path):
    """The times of a step timed in part are cached: an executor loaded later (another process)
    times only the alternatives not timed yet and chooses what one explicit tune does; once
    chosen, the partial entry is gone."""
    compiled = compile_model(two_products(), {"m": 1})
    earlier = null_executor(compiled, tuning=settings(tmp_path, slice_s=0.0))
    first, _ = tunables(earlier)
    need = eligible(first)
    earlier.run(feeds(1))
    earlier.run(feeds(1))
    earlier.run(feeds(1))  # two of the first step's alternatives timed, then the process ends
    assert earlier.stats.tuning_timings == 2 and earlier.stats.tuned == 0
    cache = TuneCache(tmp_path / "cache", earlier.tuner.adapter)
    assert len(cache.partial_times(first.key, first.shape_class)) == 2 and not cache.entries
    later = null_executor(compiled, tuning=settings(tmp_path, slice_s=0.0))
    later.run(feeds(1))
    for _ in range(need - 2):
        later.run(feeds(1))
    assert later.stats.tuning_timings == need - 2 and later.stats.tuned == 1
    chosen = tunables(later)[0]
    explicit = null_executor(compiled, tuning=settings(tmp_path / "other"))
    explicit.tune(force=True)
    assert chosen.source == "timed" and chosen.chosen == tunables(explicit)[0].chosen
    cache = TuneCache(tmp_path / "cache", later.tuner.adapter)
    assert not cache.partial_times(first.key, first.shape_class)
    assert cache.get(first.key, first.shape_class) == chosen.step.labels[chosen.chosen]


def test_work_ahead_waits_until_runs_have_earned_it(tmp_path):
    exe = null_executor(compile_model(two_products(), {"m": 1}), tuning=settings(tmp_path, slice_s=0.0, share=0.5))
    exe.run(feeds(1))
    assert exe.stats.run_s == 0.0  # a first run at new dims: not counted (the driver compiles)
    exe.run(feeds(1))  # nothing spent ahead yet: one alternative
    assert exe.stats.tuning_timings == 1
    # Say that took a second while runs have taken 1.5 s: 1 > 0.5 x 1.5, the next run waits.
    exe.stats.tuning_s, exe.stats.run_s = 1.0, 1.5
    exe.run(feeds(1))
    assert exe.stats.tuning_timings == 1 and exe.stats.run_s > 1.5
    exe.stats.run_s = 2.0  # earned: 1 <= 0.5 x 2
    exe.run(feeds(1))
    assert exe.stats.tuning_timings == 2


def test_steps_like_one_timed_in_an_earlier_slice_take_its_choice(tmp_path):
    layers = [h.make_node("MatMul", ["a", "w0"], ["t"]), h.make_node("MatMul", ["t", "w1"], ["u"]),
              h.make_node("MatMul", ["t", "w2"], ["v"])]
    model = make_model(layers, [("a", np.float32, ["m", K])], ["u", "v"],
                       {"w0": np.zeros((K, K), np.float32), "w1": np.zeros((K, N), np.float32),
                        "w2": np.ones((K, K), np.float32)})
    exe = null_executor(compile_model(model, {"m": 1}), tuning=settings(tmp_path, slice_s=0.0))
    first, other, third = tunables(exe)
    assert first.key == third.key != other.key  # two products of one shape: one choice to make
    exe.run(feeds(1))
    for _ in range(eligible(first) + eligible(other)):
        exe.run(feeds(1))  # a slice: one alternative
    # the third takes the first's choice, untimed
    assert exe.stats.tuned == 2 and not exe.tuner.pending
    assert exe.stats.tuning_timings == eligible(first) + eligible(other)
    assert third.chosen == first.chosen and third.source == "timed"


def test_off_is_the_heuristic_and_times_nothing(compiled, tmp_path):
    exe = at_decode(compiled, replace(settings(tmp_path), enabled=False))
    assert running(exe) == ["gemv", "splitk"]  # the coalesced kernel on a GPU-type adapter
    assert exe.stats.tuning_timings == 0 and not exe.backend.timed
    assert not (tmp_path / "cache").exists()


def test_off_ignores_choices_cached_by_a_tuned_run(compiled, tmp_path):
    """ONYXIA_TUNE=0 means the heuristic's kernels (reproducible: what the JS runtime replays),
    not what another process timed and cached."""
    tuned = at_decode(compiled, settings(tmp_path))
    assert running(tuned) == ["gemm"] and (tmp_path / "cache").exists()
    off = at_decode(compiled, replace(settings(tmp_path), enabled=False))
    assert running(off) == ["gemv", "splitk"] and tunables(off)[0].source == "default"


def test_the_fastest_is_chosen_cached_and_read_back(compiled, tmp_path):
    exe = at_decode(compiled, settings(tmp_path))
    [cmd] = tunables(exe)
    assert cmd.step.labels == ("chunked", "coalesced", "register", "register16", "shared")
    assert cmd.shape_class == f"1x{N}x{K}x1"
    assert exe.stats.tuning_timings >= 3 and exe.stats.tuned >= 1
    # fewest workgroups under the null cost model: the shared-memory tiled kernel's 8
    assert running(exe) == ["gemm"] and cmd.source == "timed"
    assert exe.stats.recompiles == 0 and exe.stats.reallocs == 0

    again = at_decode(compiled, settings(tmp_path))
    assert again.stats.tuning_timings == 0 and running(again) == ["gemm"]
    assert tunables(again)[0].source == "cache"

    shutil.rmtree(tmp_path / "cache")  # a deleted cache costs a re-tune, nothing else
    third = at_decode(compiled, settings(tmp_path))
    assert third.stats.tuning_timings >= 3 and running(third) == ["gemm"]


def test_each_shape_class_is_timed_once(compiled, tmp_path):
    exe = at_decode(compiled, settings(tmp_path))
    timed = exe.stats.tuning_timings
    exe.update_dimensions({"m": 40})  # M rounds up to 64: a new class, timed at its second run
    assert tunables(exe)[0].shape_class == f"64x{N}x{K}x1"
    exe.run(feeds(40))
    exe.run(feeds(40))
    # the eligible alternatives only: the coalesced kernel takes at most 8 rows (its guard)
    assert tunables(exe)[0].eligible == [True, False, True, True, True]
    assert exe.stats.tuning_timings == timed + 4
    exe.update_dimensions({"m": 33})  # the same class: nothing timed
    exe.run(feeds(33))
    exe.update_dimensions({"m": 1})
    exe.run(feeds(1))
    assert exe.stats.tuning_timings == timed + 4 and running(exe) == ["gemm"]
    assert exe.stats.recompiles == 0 and exe.stats.reallocs == 0


def test_a_corrupt_cache_only_costs_a_retune(compiled, tmp_path):
    exe = at_decode(compiled, settings(tmp_path))
    path = exe.tuner.cache.path
    path.write_text("{not json")
    again = at_decode(compiled, settings(tmp_path))
    assert again.stats.tuning_timings >= 3 and running(again) == ["gemm"]
    assert json.loads(path.read_text())["entries"]  # rewritten whole
    path.write_text(json.dumps({"version": 1, "adapter": "null", "entries": {"x": 3, "y|z": {"choice": 7}}}))
    assert at_decode(compiled, settings(tmp_path)).stats.tuning_timings >= 3


def test_another_adapter_has_its_own_timings(compiled, tmp_path):
    at_decode(compiled, settings(tmp_path))
    exe = null_executor(compiled, tuning=settings(tmp_path), limits=replace(NULL_LIMITS, adapter="other/gpu"))
    exe.update_dimensions({"m": 1})
    exe.run(feeds(1))
    exe.run(feeds(1))
    assert exe.stats.tuning_timings >= 3
    assert len(list((tmp_path / "cache").glob("tuning-*.json"))) == 2


def test_over_budget_keeps_the_heuristic_uncached(compiled, tmp_path):
    exe = at_decode(compiled, settings(tmp_path, budget_s=0.0))
    assert exe.stats.tuning_timings == 0 and running(exe) == ["gemv", "splitk"]
    assert not list((tmp_path / "cache").glob("tuning-*.json"))


def test_forced_tuning_times_every_step_again(compiled, tmp_path):
    exe = at_decode(compiled, settings(tmp_path))
    before = exe.stats.tuning_timings
    [result] = exe.tune(force=True)
    assert exe.stats.tuning_timings == before + 3  # at one row the register kernels are not eligible
    assert result.choice == "shared" and set(result.times) == {"chunked", "coalesced", "shared"}
    assert result.times["shared"] < result.times["coalesced"]


def test_outputs_the_caller_may_hold_survive_timing(compiled, tmp_path):
    exe = at_decode(compiled, replace(settings(tmp_path), enabled=False))
    buf = exe.buffers[exe.root("y")]
    exe.backend.copyin(buf, np.full(N, 7, np.float32))
    exe.tune(force=True)
    assert np.all(np.frombuffer(exe.backend.copyout(buf, 4 * N), np.float32) == 7)


def test_cache_file_round_trip(tmp_path):
    from onyxia.runtime.tuner import TuneResult

    cache = TuneCache(tmp_path, "v/d/drv/Vulkan")
    cache.put([TuneResult("k", "1x2", {"a": 1.0, "b": 2.0}, "a")])
    assert TuneCache(tmp_path, "v/d/drv/Vulkan").get("k", "1x2") == "a"
    assert TuneCache(tmp_path, "v/d/drv/Vulkan").get("k", "2x2") is None
    assert not list(tmp_path.glob(".tuning-*"))  # the temporary file was renamed away


def test_unwritable_cache_dir_is_not_an_error(compiled, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    exe = at_decode(compiled, TuneSettings(enabled=True, cache_dir=blocker / "cache"))
    assert running(exe) == ["gemm"]


def test_environment_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("ONYXIA_TUNE", "0")
    monkeypatch.setenv("ONYXIA_CACHE_DIR", str(tmp_path / "c"))
    s = TuneSettings.from_env()
    assert not s.enabled and s.cache_dir == tmp_path / "c"
    monkeypatch.setenv("ONYXIA_TUNE", "1")
    monkeypatch.delenv("ONYXIA_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    s = TuneSettings.from_env()
    assert s.enabled and s.cache_dir == tmp_path / "xdg" / "onyxia"


@pytest.mark.parametrize("values,symbolic,expected", [
    ([1, 1024, 512], (True, False, False), "1x1024x512"), ([5, 8], (True, True), "8x8"),
    ([65, 3], (True, False), "128x3"), ([0, 3], (True, False), "0x3"), ([7], (False,), "7"),
])
def test_shape_class_rounds_symbolic_values_up_to_a_power_of_two(values, symbolic, expected):
    assert shape_class(values, symbolic) == expected


def test_a_class_over_budget_is_not_timed_again_until_the_next_load(compiled, tmp_path):
    exe = at_decode(compiled, settings(tmp_path, budget_s=0.0))
    assert exe.stats.tuning_timings == 0
    for m in (40, 1, 40, 1):  # prefill and decode alternate: nothing is timed at any run
        exe.update_dimensions({"m": m})
        exe.run(feeds(m))
    assert exe.stats.tuning_timings == 0 and running(exe) == ["gemv", "splitk"]
    again = at_decode(compiled, settings(tmp_path))  # the next load tries again
    assert again.stats.tuning_timings == 3  # decode's 3 (the load's class M = 80 never ran)


def test_an_alternative_far_slower_than_the_best_is_replayed_once(compiled, tmp_path, monkeypatch):
    exe = at_decode(compiled, settings(tmp_path))
    samples = {}
    time_commands = exe.backend.time_commands

    def spy(commands, repeats, deadline, cutoff=float("inf"), warm=False):
        out = time_commands(commands, repeats, deadline, cutoff, warm)
        live = tuple(exe.model.shaders[c.shader].label for c in commands if all(getattr(c, "workgroups", (0,))))
        samples[live] = len(out)
        return out

    monkeypatch.setattr(exe.backend, "time_commands", spy)
    [result] = exe.tune(force=True)
    # The current choice (shared, 8 us under the null cost) first; coalesced (36 us) is over
    # 4x that and stops after one replay, chunked (16 us) is timed in full.
    assert list(result.times) == ["shared", "chunked", "coalesced"]
    assert samples[("matmul/gemv", "matmul/splitk")] == 1
    assert samples[("matmul/gemm",)] == 5


def test_a_probe_rules_out_an_alternative_far_over_the_cutoff(compiled, tmp_path, monkeypatch):
    """Past PROBE_MIN_CUTOFF an alternative first runs on a share of its workgroups; one whose
    estimate is over twice the cutoff is never replayed in full (its estimate is its time), a
    closer one is timed as before."""
    monkeypatch.setattr(tuner_module, "PROBE_MIN_CUTOFF", 0.0)  # the null costs are microseconds
    monkeypatch.setattr(tuner_module, "SLOWER_CUTOFF", 1.5)  # shared 8 us: cutoff 12, ruled out past 24
    exe = at_decode(compiled, settings(tmp_path))
    timed = []
    time_commands = exe.backend.time_commands

    def spy(commands, repeats, deadline, cutoff=float("inf"), warm=False):
        timed.append(tuple(exe.model.shaders[c.shader].label.removeprefix("matmul/")
                           for c in commands if all(getattr(c, "workgroups", (0,)))))
        return time_commands(commands, repeats, deadline, cutoff, warm)

    monkeypatch.setattr(exe.backend, "time_commands", spy)
    exe.backend.probed.clear()
    [result] = exe.tune(force=True)
    assert list(result.times) == ["shared", "chunked", "coalesced"] and result.choice == "shared"
    assert ("gemv", "splitk") not in timed  # coalesced (36 us): its probe's estimate, no replay
    assert result.times["coalesced"] == pytest.approx(36e-6)
    assert ("gemm",) in timed and len(exe.backend.probed) == 2  # chunked (16 us): probed, then timed


def test_a_run_encodes_only_the_replayed_alternative(compiled, tmp_path):
    from onyxia.plan.cost import plan_cost

    exe = at_decode(compiled, replace(settings(tmp_path), enabled=False))
    assert compiled.num_dispatches > 2
    # the coalesced kernel and its split-K sum; the cost model pairs with what runs
    costs = plan_cost(exe.model, exe.dims, exe.select_choices(), adapter=exe.adapter_facts)
    assert exe.dispatches_per_run == len(costs.live) == 2
