"""The plan cache (onyxia/plan_cache.py) and compile_file's load report, without a GPU: a hit
returns the plan a fresh compile gives; a changed model, dims, static set or onyxia version
misses; a corrupt or foreign entry is ignored and rewritten."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
from onnx import helper as h

import onyxia.plan_cache as plan_cache
from onyxia.loading import DelayedProgress, LoadReport, compile_file
from onyxia.plan.model import save_plan
from onyxia.plan_cache import PlanCache
from tests.helpers import make_model


def _model(scale: float = 1.0):
    w = (np.arange(12, dtype=np.float32).reshape(4, 3) * scale).astype(np.float32)
    return make_model([h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Relu", ["m"], ["y"])],
                      [("x", np.float32, ["seq", 4])], ["y"], {"w": w})


def _plan_text(model, tmp_path, name="plan.onyxia") -> dict[str, bytes]:
    """A plan's saved members (plan.json and the weights): how two plans compare."""
    path = tmp_path / name
    save_plan(model, path)
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(_model().SerializeToString())
    return path


def test_a_hit_returns_the_plan_a_fresh_compile_gives(tmp_path, model_file):
    cache = PlanCache(tmp_path / "cache")
    cold, cold_report = compile_file(model_file, {"seq": 3}, plan_cache=cache)
    warm, warm_report = compile_file(model_file, {"seq": 3}, plan_cache=cache)
    fresh, fresh_report = compile_file(model_file, {"seq": 3}, plan_cache=False)
    assert (cold_report.cache, warm_report.cache, fresh_report.cache) == ("miss", "hit", "off")
    assert warm_report.stages == {} and warm_report.parse_s == 0.0  # no parse, no compiler
    assert set(cold_report.stages) >= {"resolution", "inference", "optimization", "planning"}
    assert _plan_text(warm, tmp_path, "a") == _plan_text(fresh, tmp_path, "b")
    assert len(list((tmp_path / "cache").glob("*.onyxia"))) == 1


def test_model_dims_static_and_version_changes_miss(tmp_path, model_file, monkeypatch):
    cache = PlanCache(tmp_path / "cache")
    assert compile_file(model_file, {"seq": 3}, plan_cache=cache)[1].cache == "miss"
    assert compile_file(model_file, {"seq": 4}, plan_cache=cache)[1].cache == "miss"
    assert compile_file(model_file, {"seq": 3}, ["seq"], plan_cache=cache)[1].cache == "miss"
    assert compile_file(model_file, {"seq": 3}, plan_cache=cache)[1].cache == "hit"
    model_file.write_bytes(_model(scale=2.0).SerializeToString())  # other weights, same graph
    changed, report = compile_file(model_file, {"seq": 3}, plan_cache=cache)
    assert report.cache == "miss"
    assert float(changed.tensors["w"].data.max()) == 22.0
    monkeypatch.setattr(plan_cache, "onyxia_version", lambda: "99.0")
    monkeypatch.setattr(plan_cache, "_FINGERPRINT", None)
    assert compile_file(model_file, {"seq": 3}, plan_cache=cache)[1].cache == "miss"


@pytest.mark.parametrize("damage", ["garbage", "truncated", "foreign", "empty", "flipped", "flipped weight"])
def test_a_corrupt_or_foreign_entry_is_ignored_and_rewritten(tmp_path, model_file, damage):
    cache = PlanCache(tmp_path / "cache")
    plan, _ = compile_file(model_file, {"seq": 3}, plan_cache=cache)
    [entry] = list((tmp_path / "cache").glob("*.onyxia"))
    if damage == "garbage":
        entry.write_bytes(b"not a plan at all")
    elif damage == "truncated":
        entry.write_bytes(entry.read_bytes()[:100])
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage.startswith("flipped"):  # one byte inside a member's data: the cache reads its own
        # files without the schema checks (plan/model.py load_plan), so zip's CRC-32 must catch it
        with zipfile.ZipFile(entry) as zf:
            info = zf.getinfo("plan.json" if damage == "flipped" else
                              next(n for n in zf.namelist() if n.endswith(".npy")))
        data = bytearray(entry.read_bytes())
        start = info.header_offset + 30 + len(info.filename.encode()) + int.from_bytes(
            data[info.header_offset + 28:info.header_offset + 30], "little")
        data[start + info.compress_size // 2] ^= 0x5A
        entry.write_bytes(bytes(data))
    else:  # another key's (valid) plan under this name
        other = tmp_path / "other.onnx"
        other.write_bytes(_model(scale=3.0).SerializeToString())
        compile_file(other, {"seq": 3}, plan_cache=cache)
        [foreign] = [p for p in (tmp_path / "cache").glob("*.onyxia") if p != entry]
        entry.write_bytes(foreign.read_bytes())
    again, report = compile_file(model_file, {"seq": 3}, plan_cache=cache)
    assert report.cache == "miss"
    assert _plan_text(again, tmp_path, "a") == _plan_text(plan, tmp_path, "b")
    assert compile_file(model_file, {"seq": 3}, plan_cache=cache)[1].cache == "hit"  # rewritten


def test_an_unwritable_cache_only_costs_a_compile(tmp_path, model_file):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would go")
    plan, report = compile_file(model_file, {"seq": 3}, plan_cache=PlanCache(blocker / "plans"))
    assert report.cache == "miss" and plan.outputs == ("y",)


def test_the_environment_turns_the_cache_off(tmp_path, model_file, monkeypatch):
    monkeypatch.setenv("ONYXIA_CACHE_DIR", str(tmp_path / "root"))
    assert compile_file(model_file, {"seq": 3})[1].cache == "miss"
    assert list((tmp_path / "root" / "plans").glob("*.onyxia"))
    monkeypatch.setenv("ONYXIA_PLAN_CACHE", "0")
    assert compile_file(model_file, {"seq": 3})[1].cache == "off"


def test_external_data_is_part_of_the_key(tmp_path):
    import onnx

    model = _model()
    onnx.save_model(model, tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.data", size_threshold=0)
    before = plan_cache.model_digest(tmp_path / "m.onnx")
    data = bytearray((tmp_path / "m.data").read_bytes())
    data[-1] ^= 0x40
    (tmp_path / "m.data").write_bytes(bytes(data))
    assert before is not None and plan_cache.model_digest(tmp_path / "m.onnx") not in (None, before)


def test_load_report_rows_name_every_part():
    report = LoadReport(parse_s=0.01, stages={"inference": 0.02, "planning": 0.03}, cache="miss", cache_s=0.004)
    names = [name for name, _ in report.rows()]
    assert names[:3] == ["parse", "compile: inference", "compile: planning"]
    assert {"plan cache (miss)", "device", "buffers + weight upload", "WGSL render", "shader modules",
            "pipelines"} <= set(names)
    assert report.total_s == pytest.approx(0.064)
    assert "loaded in" in report.line() and any("pipelines:" in line for line in report.lines())


class _Terminal(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_draws_only_on_a_terminal_after_its_delay():
    quiet, late, drawn = _Terminal(True), _Terminal(True), _Terminal(False)
    DelayedProgress("loading", delay_s=60, stream=quiet)(1, 2)
    DelayedProgress("loading", delay_s=0, stream=drawn)(1, 2)
    progress = DelayedProgress("loading", delay_s=0, stream=late)
    progress.stage("pipelines")(3, 4)
    assert quiet.getvalue() == "" and drawn.getvalue() == ""
    assert "pipelines" in late.getvalue() and "3/4" in late.getvalue()
    progress.close()
    assert late.getvalue().endswith("\r")


def test_a_later_write_is_waited_for_by_a_get_of_its_key(tmp_path, model_file, monkeypatch):
    # A session writes its plan on a thread (put_later): a get() of that key in this process waits
    # for the entry instead of missing, and the caller's own path does not wait for the write.
    import threading

    cache = PlanCache(tmp_path / "cache")
    plan, _ = compile_file(model_file, {"seq": 3}, plan_cache=False)
    release = threading.Event()
    put = PlanCache.put

    def slow_put(self, key, model):
        release.wait(10)
        return put(self, key, model)

    monkeypatch.setattr(PlanCache, "put", slow_put)
    cache.put_later("k" * 40, plan)
    assert not list((tmp_path / "cache").glob("*.onyxia"))  # still writing
    threading.Timer(0.2, release.set).start()
    got = cache.get("k" * 40)  # waits for the write
    assert got is not None and _plan_text(got, tmp_path, "a") == _plan_text(plan, tmp_path, "b")
    plan_cache.wait_for_write()
    assert not plan_cache._WRITES


def test_a_digest_is_remembered_by_the_files_stat_until_they_change(tmp_path, monkeypatch):
    """PlanCache.digest: the model's and its external data's bytes hashed once; later lookups
    go by size, times and inode; a change to either file (or a file changed too recently to
    trust its times) is hashed again."""
    import os

    import onnx

    onnx.save_model(_model(), tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.data", size_threshold=0)
    cache = PlanCache(tmp_path / "cache")
    hashed = []
    real = plan_cache._file_digest
    monkeypatch.setattr(plan_cache, "_file_digest", lambda path: hashed.append(path) or real(path))
    expected = real(tmp_path / "m.onnx")[0]
    assert cache.digest(tmp_path / "m.onnx") == expected and cache.digest(tmp_path / "m.onnx") == expected
    assert len(hashed) == 2  # just written: too recent to trust its times
    monkeypatch.setattr(plan_cache, "_SETTLED_S", 0.0)
    assert cache.digest(tmp_path / "m.onnx") == expected and len(hashed) == 3
    assert cache.digest(tmp_path / "m.onnx") == expected and len(hashed) == 3  # remembered
    assert PlanCache(tmp_path / "cache").digest(tmp_path / "m.onnx") == expected and len(hashed) == 3
    data = bytearray((tmp_path / "m.data").read_bytes())
    data[-1] ^= 0x40
    (tmp_path / "m.data").write_bytes(bytes(data))
    changed = cache.digest(tmp_path / "m.onnx")
    assert changed == real(tmp_path / "m.onnx")[0] != expected and len(hashed) == 4
    st = os.stat(tmp_path / "m.onnx")
    os.utime(tmp_path / "m.onnx", ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # touched: hashed again
    assert cache.digest(tmp_path / "m.onnx") == changed and len(hashed) == 5
    (tmp_path / "cache" / "digests.json").write_text("{not json")  # a damaged memo costs a hash
    assert cache.digest(tmp_path / "m.onnx") == changed and len(hashed) == 6


def test_a_trusted_load_maps_the_weights_aligned_and_checks_them(tmp_path):
    """The plan cache reads its own files (trusted) with the weights mapped, not copied: aligned
    (save_plan pads each member's start to 64 bytes), read-only, equal to what was saved; a plan
    whose members are not aligned (an earlier onyxia's) still loads, copies where needed."""
    from onyxia.plan import CompiledModel

    path = tmp_path / "model.onnx"
    path.write_bytes(_model(scale=0.5).SerializeToString())
    plan, _ = compile_file(path, {"seq": 3}, plan_cache=False)
    save_plan(plan, tmp_path / "p.onyxia")
    mapped = CompiledModel.load(tmp_path / "p.onyxia", trusted=True)
    checked = CompiledModel.load(tmp_path / "p.onyxia")
    weights = [n for n, t in plan.tensors.items() if t.data is not None and t.data.size > 1]
    assert weights
    for name in weights:
        a = mapped.tensors[name].data
        assert a.flags.aligned and not a.flags.writeable and not a.flags.owndata
        np.testing.assert_array_equal(a, plan.tensors[name].data)
        np.testing.assert_array_equal(checked.tensors[name].data, plan.tensors[name].data)
    # members written without the padding (an earlier onyxia's files): loaded all the same
    with zipfile.ZipFile(tmp_path / "p.onyxia") as src, zipfile.ZipFile(tmp_path / "q.onyxia", "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename),
                         compress_type=zipfile.ZIP_DEFLATED if info.filename == "plan.json" else zipfile.ZIP_STORED)
    with zipfile.ZipFile(tmp_path / "q.onyxia") as zf:
        starts = [i.header_offset + 30 + len(i.filename) for i in zf.infolist() if i.filename.endswith(".npy")]
    assert any(start % 64 for start in starts)
    plain = CompiledModel.load(tmp_path / "q.onyxia", trusted=True)
    for name in weights:
        np.testing.assert_array_equal(plain.tensors[name].data, plan.tensors[name].data)
