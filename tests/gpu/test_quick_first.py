"""Quick first (runtime/ahead.py) on lavapipe, which compiles a kernel at its first dispatch: a
load's first run replays, for a tuned Select with no cached choice, the variant of the choice's
kernel family that specializes the least text (a smaller register tile: it compiles in a
fraction of the time); helper devices then compile the choice in the background, a later run
switches to it, and the tuning cache records that the driver has it, so that the next load
replays the choice from its first run. Every run matches onnxruntime."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper as h

import onyxia
from onyxia.runtime.ahead import QUICK_SHARE
from onyxia.runtime.select import SelectCommand
from onyxia.runtime.tuner import TuneCache, TuneResult, TuneSettings
from tests.builders.families import models
from tests.helpers import compile_model, make_model, run_ort

RNG = np.random.default_rng(7)


def conv_pair():
    """Two 3x3 convs (the second with a residual Add): register tiles on a CPU-type adapter."""
    w1 = (RNG.standard_normal((32, 16, 3, 3)) / 12).astype(np.float32)
    w2 = (RNG.standard_normal((32, 32, 3, 3)) / 16).astype(np.float32)
    b = RNG.standard_normal(32).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "w1", "b"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             h.make_node("Relu", ["c1"], ["r1"]),
             h.make_node("Conv", ["r1", "w2", "b"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             h.make_node("Add", ["c2", "r1"], ["y"])]
    return make_model(nodes, [("x", np.float32, ["n", 16, "hh", "ww"])], ["y"], {"w1": w1, "w2": w2, "b": b})


def register_selects(exe) -> list[SelectCommand]:
    return [c for c in exe.commands if isinstance(c, SelectCommand) and c.tuned
            and c.step.labels[c.default].startswith("register")]


def load(runtime, compiled, tmp_path, enabled: bool = True):
    exe = runtime.load_model(compiled, tuning=TuneSettings(enabled=enabled, cache_dir=tmp_path / "cache"))
    exe.tuner.pending.clear()  # no timing in the runs' slices changes a choice behind the test
    return exe


@pytest.fixture()
def model_and_feeds():
    model = conv_pair()
    feeds = {"x": RNG.standard_normal((1, 16, 20, 24)).astype(np.float32)}
    return model, feeds, run_ort(model, feeds)[0]


def test_first_run_replays_the_quick_tile_then_switches_once_the_helpers_compiled_the_choice(
        runtime, tmp_path, model_and_feeds):
    model, feeds, want = model_and_feeds
    compiled = compile_model(model, {"n": 1, "hh": 20, "ww": 24})
    exe = load(runtime, compiled, tmp_path)
    assert exe.backend.compiles_ahead, "lavapipe with Mesa's disk cache: helper devices compile ahead"
    selects = register_selects(exe)
    assert len(selects) == 2
    for cmd in selects:
        labels = cmd.step.labels
        assert cmd.source == "quick" and cmd.wanted == (cmd.default, "default")
        family = labels[cmd.default].split("/")[0]
        assert labels[cmd.chosen].split("/")[0] == family and cmd.chosen != cmd.default
        # the smallest specialization of the family, well under the choice's
        sizes = {k: exe._specialization(cmd, k) for k, ok in enumerate(cmd.eligible)
                 if ok and labels[k].split("/")[0] == family}
        assert sizes[cmd.chosen] == min(sizes.values()) <= QUICK_SHARE * sizes[cmd.default]
    assert exe.stats.load.quick == 2

    out = exe.run(feeds)["y"]
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    assert all(cmd.source == "quick" for cmd in selects)  # the first run stood them in

    assert exe.finish_quick(120) == 2  # the helpers compiled the choices: switched, nothing compiled
    for cmd in selects:
        assert (cmd.chosen, cmd.source, cmd.wanted) == (cmd.default, "default", None)
    assert exe.stats.upgraded == 2
    cold = exe.cold_dispatches([c for cmd in selects for c in cmd.replayed_by(cmd.chosen)])
    assert all(exe.backend.compiled_ahead([exe.programs[c.shader]]) for c in cold)
    out = exe.run(feeds)["y"]
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)

    # The cache now says the driver has the choices: the next load replays them from its first run.
    doc = json.loads(exe.tuner.cache.path.read_text())
    assert sum(len(v) for v in doc["compiled"].values()) == 2
    again = load(runtime, compiled, tmp_path)
    assert [(c.chosen, c.source) for c in register_selects(again)] == [(c.default, "default") for c in selects]
    assert again.stats.load.quick == 0
    np.testing.assert_allclose(again.run(feeds)["y"], want, rtol=1e-4, atol=1e-4)


def test_a_later_run_switches_by_itself_and_new_dims_keep_matching(runtime, tmp_path, model_and_feeds,
                                                                  monkeypatch):
    model, feeds, want = model_and_feeds
    exe = load(runtime, compile_model(model, {"n": 1, "hh": 20, "ww": 24}), tmp_path)
    np.testing.assert_allclose(exe.run(feeds)["y"], want, rtol=1e-4, atol=1e-4)
    assert exe.backend.wait_ahead(120)
    # Not before the driver has the choice: a run would compile it itself.
    with monkeypatch.context() as m:
        m.setattr(exe.backend, "compiled_ahead", lambda programs: False)
        np.testing.assert_allclose(exe.run(feeds)["y"], want, rtol=1e-4, atol=1e-4)
        assert exe.stats.upgraded == 0 and all(c.source == "quick" for c in register_selects(exe))
    np.testing.assert_allclose(exe.run(feeds)["y"], want, rtol=1e-4, atol=1e-4)  # its slice switched first
    assert exe.stats.upgraded == 2 and all(c.source == "default" for c in register_selects(exe))
    other = {"x": RNG.standard_normal((2, 16, 9, 13)).astype(np.float32)}
    exe.update_dimensions({"n": 2, "hh": 9, "ww": 13})
    np.testing.assert_allclose(exe.run(other)["y"], run_ort(model, other)[0], rtol=1e-4, atol=1e-4)


def test_no_stand_in_with_tuning_off_or_a_choice_from_the_cache(runtime, tmp_path, model_and_feeds):
    model, feeds, want = model_and_feeds
    compiled = compile_model(model, {"n": 1, "hh": 20, "ww": 24})
    off = load(runtime, compiled, tmp_path, enabled=False)
    assert off.stats.load.quick == 0 and all(c.chosen == c.default for c in register_selects(off))
    np.testing.assert_allclose(off.run(feeds)["y"], want, rtol=1e-4, atol=1e-4)

    # A timed choice in the cache (another process tuned it): replayed as such, no stand-in.
    cmd = register_selects(off)[0]
    label = cmd.step.labels[cmd.default]
    TuneCache(tmp_path / "cache", off.limits.adapter).put([TuneResult(cmd.key, cmd.shape_class, {label: 1e-3}, label)])
    on = load(runtime, compiled, tmp_path)
    sources = sorted(c.source for c in register_selects(on))
    assert sources == ["cache", "quick"]  # the other conv's choice was never compiled here
    np.testing.assert_allclose(on.run(feeds)["y"], want, rtol=1e-4, atol=1e-4)


def test_the_cache_keeps_compiled_marks_beside_timed_choices_and_reads_junk_tolerantly(tmp_path):
    cache = TuneCache(tmp_path, "adapter-a")
    cache.put([TuneResult("k1", "1x8", {"a/1": 1.0, "a/2": 2.0}, "a/1")], [("k2", "1x8", "a/2")])
    cache.put([], [("k2", "1x8", "a/3"), ("k2", "1x8", "a/2")])
    again = TuneCache(tmp_path, "adapter-a")
    assert again.get("k1", "1x8") == "a/1"
    assert again.has_compiled("k2", "1x8", "a/2") and again.has_compiled("k2", "1x8", "a/3")
    assert not again.has_compiled("k2", "1x16", "a/2") and not again.has_compiled("k1", "1x8", "a/1")
    assert not TuneCache(tmp_path, "adapter-b").has_compiled("k2", "1x8", "a/2")  # another adapter's file
    doc = json.loads(cache.path.read_text())
    doc["compiled"] = {"k2|1x8": "not a list", 7: ["x"]}
    cache.path.write_text(json.dumps(doc))
    junk = TuneCache(tmp_path, "adapter-a")
    assert junk.get("k1", "1x8") == "a/1" and not junk.has_compiled("k2", "1x8", "a/2")


def test_a_torchvision_resnet_stands_in_quick_tiles_and_matches_onnxruntime_before_and_after(
        runtime, tmp_path, monkeypatch):
    """The committed torch.onnx export of resnet18 (tests/data/exported/families), loaded
    as a user would with tuning on: its first run replays quick tiles, the switched plan the
    heuristic's choices, both as onnxruntime."""
    monkeypatch.setenv("ONYXIA_TUNE", "1")
    monkeypatch.setenv("ONYXIA_CACHE_DIR", str(tmp_path / "cache"))
    info = {m.name: m for m in models()}["resnet18"]
    feeds = info.feeds(info.sizes[0], seed=0)
    want = ort.InferenceSession(str(info.path), providers=["CPUExecutionProvider"]).run(None, feeds)
    sess = onyxia.InferenceSession(str(info.path), runtime=runtime, plan_cache=False)
    exe = sess._executor_for(feeds)
    exe.tuner.pending.clear()  # no timing in the runs' slices changes a choice behind the test
    stood = [c for c in register_selects(exe) if c.source == "quick"]
    assert stood and exe.stats.load.quick == len(stood)
    for got, ref in zip(sess.run(None, feeds), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    assert exe.finish_quick(300) == len(stood)
    assert all(c.source == "default" and c.chosen == c.default for c in stood)
    for got, ref in zip(sess.run(None, feeds), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
