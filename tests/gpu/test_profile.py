"""`onyxia bench --profile --trace`: the roofline report and a Chrome/Perfetto trace with one
slice per dispatch that runs."""

import dataclasses
import json

import numpy as np
import onnx
import pytest
from onnx import helper as h

from onyxia.cli import main
from onyxia.plan.cost import plan_cost
from onyxia.runtime import peaks as peaks_module
from onyxia.runtime.peaks import CACHE_FILE, AdapterPeaks, adapter_peaks
from tests.helpers import compile_model, make_model

pytestmark = pytest.mark.gpu


def _model():
    nodes = [h.make_node("MatMul", ["x", "w"], ["t"]), h.make_node("Relu", ["t"], ["u"]),
             h.make_node("Add", ["u", "x"], ["y"])]
    return make_model(nodes, [("x", np.float32, ["m", 16])], ["y"], {"w": np.eye(16, dtype=np.float32)})


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ONYXIA_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_bench_profile_writes_a_trace_with_one_slice_per_dispatch(runtime, tmp_path, cache, capsys, monkeypatch):
    # Seed the cache so the test does not spend seconds measuring the adapter.
    monkeypatch.setattr(peaks_module, "measure", lambda device, key, limit=None: AdapterPeaks(1e9, 1e10, key))
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    trace = tmp_path / "out.json"
    assert main(["bench", str(path), "--dim", "m=8", "--iterations", "1", "--warmup", "0", "--no-ort",
                 "--profile", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "GB/s" in out and "GF/s" in out and "roof" in out
    doc = json.loads(trace.read_text())
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    exe = runtime.load_model(compile_model(_model(), {"m": 8}))  # the dims the adapter runs with
    live = plan_cost(exe.model, exe.dims, exe.select_choices(), adapter=exe.adapter_facts).live
    assert len(slices) == len(live)
    for event, cost in zip(slices, live):
        assert event["args"]["node"] == cost.op and event["args"]["shader"] == cost.shader
        assert event["args"]["bytes"] == cost.bytes
        assert event["dur"] >= 0 and "roofline_fraction" in event["args"]
    assert (cache / CACHE_FILE).exists()


def test_profile_takes_each_dispatchs_median_over_its_passes(runtime, monkeypatch):
    # Each dispatch's time is the median of its own samples over the passes (a slow pass or a
    # slow dispatch in one pass does not move it), its start the first pass's.
    from onyxia.runtime import profile as profile_module

    exe = runtime.load_model(compile_model(_model(), {"m": 8}))
    feeds = {"x": np.ones((8, 16), np.float32)}
    real = profile_module.time_dispatches(exe, feeds)
    passes = iter([(3.0, 0.0), (1.0, 5.0), (2.0, 7.0)])  # (this pass's time offset, its start offset)

    def timed(exe, feeds):
        base, start = next(passes)
        return [dataclasses.replace(t, nanoseconds=100.0 * i + base, start=start + i) for i, t in enumerate(real)]

    monkeypatch.setattr(profile_module, "time_dispatches", timed)
    got = profile_module.profile(exe, feeds, repeats=3)
    assert [p.timing.nanoseconds for p in got] == [100.0 * i + 2.0 for i in range(len(real))]
    assert [p.timing.start for p in got] == [float(i) for i in range(len(real))]


def test_profile_repeats_must_be_positive(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    assert main(["bench", str(path), "--dim", "m=8", "--no-ort", "--profile", "--profile-repeats", "0"]) == 1
    assert "--profile-repeats must be at least 1" in capsys.readouterr().err


def test_trace_needs_profile(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    assert main(["bench", str(path), "--dim", "m=8", "--iterations", "1", "--no-ort",
                 "--trace", str(tmp_path / "t.json")]) == 1
    assert "--trace needs --profile" in capsys.readouterr().err


def test_adapter_peaks_are_measured_once_and_cached(runtime, cache, monkeypatch):
    monkeypatch.setattr(peaks_module, "COPY_BYTES", 1 << 20)  # small kernels: this checks the plumbing
    monkeypatch.setattr(peaks_module, "REPEATS", 1)
    first = adapter_peaks(runtime)
    assert first.bandwidth > 0 and first.flops > 0
    table = json.loads((cache / CACHE_FILE).read_text())
    assert set(table) == {first.key}
    monkeypatch.setattr(peaks_module, "measure", lambda *a, **k: pytest.fail("measured twice"))
    again = adapter_peaks(runtime)
    assert (again.bandwidth, again.flops) == (first.bandwidth, first.flops)


def test_the_fma_peak_is_the_faster_loop_form(runtime, monkeypatch):
    # peaks._fma: the trip count a constant or hidden behind num_workgroups (Mesa 25 ran the
    # constant one at half speed); both run on the adapter, the faster one is the peak
    monkeypatch.setattr(peaks_module, "COPY_BYTES", 1 << 20)
    monkeypatch.setattr(peaks_module, "REPEATS", 1)
    assert "select(" in peaks_module._fma(True) and "select(" not in peaks_module._fma(False)
    timed = peaks_module._timed
    seconds = iter([None, 2.0, 1.0])  # the copy (really timed), the constant form, the hidden one

    def fake(device, pipeline, bind, groups, written):
        real = timed(device, pipeline, bind, groups, written)
        planted = next(seconds)
        return real if planted is None else planted

    monkeypatch.setattr(peaks_module, "_timed", fake)
    peaks = peaks_module.measure(runtime.device, "k")
    per_run = peaks_module.FMA_THREADS * peaks_module.FMA_ITERATIONS * peaks_module.FMA_CHAINS * 8
    assert peaks.flops == per_run / 1.0
