"""A new input shape's first result waits for no tuning and no pipeline build once the runs
before it built ahead (runtime/replay.py _ahead_slice), and never recompiles: counted on the
null backend, not timed (tests/gpu/test_load_latency.py runs a session on an adapter). Where the
driver compiles at first dispatch (lavapipe), new dims first replay kernels that ran already
(runtime/select.py, warm first)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from onnx import helper as h

from onyxia.runtime.null import NULL_LIMITS, null_executor
from onyxia.runtime.select import SelectCommand, walk_commands
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


LAZY = replace(NULL_LIMITS, compiles_at_dispatch=True)  # lavapipe's way: kernels compile at first dispatch


def test_new_dims_replay_a_warm_stand_in_then_switch_as_work_ahead(tmp_path):
    # m = 80 runs the register product; at m = 1 the heuristic wants the decode kernel (matmul/
    # gemv and its split-K sum), which no run has dispatched: the first result at m = 1 replays
    # the register product (eligible there too), and a later run switches.
    exe = null_executor(compile_model(two_matmuls(), {"m": 80}), limits=LAZY,
                        tuning=TuneSettings(enabled=True, cache_dir=tmp_path / "cache", share=None))
    exe.run({"a": np.zeros((80, K), np.float32)})
    at_80 = labels(exe)
    exe.update_dimensions({"m": 1})
    assert exe.cold_kernels() == 0  # the next run dispatches only kernels that ran
    one = {"a": np.zeros((1, K), np.float32)}
    exe.run(one)
    assert labels(exe) == at_80 and exe.stats.warm_first == 2 and exe.stats.upgraded == 0
    assert {c.source for c in selects(exe)} == {"warm"}
    exe.run(one)  # switches one (this run compiles its two decode kernels: counted as work ahead)
    assert labels(exe).count("matmul/gemv") == 1 and exe.stats.upgraded == 1 and exe.stats.ahead_s > 0
    exe.run(one)  # and the other
    assert labels(exe).count("matmul/gemv") == 2 and exe.stats.upgraded == 2
    assert {c.source for c in selects(exe)} <= {"default", "guards"}
    exe.update_dimensions({"m": 80})  # back: warm already, no stand-in
    exe.run({"a": np.zeros((80, K), np.float32)})
    assert labels(exe) == at_80 and exe.stats.warm_first == 2 and exe.stats.recompiles == 0


def test_a_stand_in_waits_for_the_share_and_not_without_tuning(tmp_path):
    model = compile_model(two_matmuls(), {"m": 80})
    for enabled in (True, False):
        exe = null_executor(model, limits=LAZY, tuning=TuneSettings(enabled=enabled, cache_dir=tmp_path / "c"))
        exe.run({"a": np.zeros((80, K), np.float32)})
        exe.update_dimensions({"m": 1})
        exe.run({"a": np.zeros((1, K), np.float32)})
        # tuning off: every choice is the heuristic's (the decode kernel), compiled or not
        assert ("matmul/gemv" in labels(exe)) == (not enabled)
    exe = null_executor(model, limits=LAZY, tuning=TuneSettings(enabled=True, cache_dir=tmp_path / "d"))
    exe.run({"a": np.zeros((80, K), np.float32)})
    exe.stats.tuning_s = 1e6  # work ahead took far more than its share of the runs so far
    exe.update_dimensions({"m": 1})
    for _ in range(3):
        exe.run({"a": np.zeros((1, K), np.float32)})
    assert exe.stats.warm_first == 2 and exe.stats.upgraded == 0


def labels(exe) -> list[str]:
    return [exe.model.shaders[d.shader].label for d in exe.dispatch_commands() if all(d.workgroups)]


def selects(exe) -> list[SelectCommand]:
    """The products' kernel Selects (the split-K sums' own Selects aside)."""
    return [c for c in exe.commands if isinstance(c, SelectCommand) and c.tuned]


def test_row_classes_stand_in_for_each_other_at_new_dims(tmp_path):
    # The chunked product's row classes are an untuned Select whose alternatives all compute any
    # M (plan.Select.interchangeable): at m = 3 after m = 1 the rows4 class no run dispatched
    # waits while rows1, which ran (listed before it: a narrower class), replays; a later run
    # switches. Before, only tuned Selects stood in, and the first call at another batch
    # compiled the classes inside it (each squeeze-excite conv of mobilenet_v3_large at batch 2:
    # 0.54 s past the run on Mesa 25). A wider class does not stand in for a narrower one (it
    # would compute rows nobody wants: an LLM's decode after its prefill).
    cpu = replace(LAZY, cpu_adapter=True)
    exe = null_executor(compile_model(two_matmuls(), {"m": 1}), limits=cpu,
                        tuning=TuneSettings(enabled=True, cache_dir=tmp_path / "cache", share=None))
    exe.run({"a": np.zeros((1, K), np.float32)})
    rows = [c for c in walk_commands(exe.commands)
            if isinstance(c, SelectCommand) and c.step.key == "matmul/gemv_chunked/rows"]
    assert rows and all(c.interchangeable and not c.tuned for c in rows)
    assert {c.step.labels[c.chosen] for c in rows} == {"rows1"}
    exe.update_dimensions({"m": 3})
    assert exe.cold_kernels() == 0
    assert {(c.step.labels[c.chosen], c.source) for c in rows} == {("rows1", "warm")}
    assert {c.step.labels[c.wanted[0]] for c in rows if c.wanted} == {"rows4"}
    three = {"a": np.zeros((3, K), np.float32)}
    exe.run(three)
    for _ in range(len(rows)):  # each later run switches some (compiling their kernels)
        exe.run(three)
    assert {(c.step.labels[c.chosen], c.source) for c in rows} == {("rows4", "guards")}
    exe.update_dimensions({"m": 8})  # rows16: the warm rows1 and rows4 may stand in
    assert exe.cold_kernels() == 0 and {c.source for c in rows} == {"warm"}
    for _ in range(len(rows) + 1):
        exe.run({"a": np.zeros((8, K), np.float32)})
    assert {(c.step.labels[c.chosen], c.source) for c in rows} == {("rows16", "guards")}
    exe.update_dimensions({"m": 2})  # rows4 ran: the choice is warm, nothing stands in
    assert {(c.step.labels[c.chosen], c.source) for c in rows} == {("rows4", "guards")}

    fresh = null_executor(compile_model(two_matmuls(), {"m": 8}), limits=cpu,
                          tuning=TuneSettings(enabled=True, cache_dir=tmp_path / "fresh", share=None))
    fresh.run({"a": np.zeros((8, K), np.float32)})
    fresh.update_dimensions({"m": 1})  # only rows16 ran: it does not stand in for rows1
    fresh_rows = [c for c in walk_commands(fresh.commands)
                  if isinstance(c, SelectCommand) and c.step.key == "matmul/gemv_chunked/rows"]
    assert {(c.step.labels[c.chosen], c.source) for c in fresh_rows} == {("rows1", "guards")}
    assert fresh.cold_kernels() > 0
    assert exe.stats.recompiles == 0 and fresh.stats.recompiles == 0
