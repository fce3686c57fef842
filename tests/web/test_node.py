"""The JavaScript runtime (onyxia/web/onyxia.js) in Node on Dawn, against onnxruntime.

Each model compiles once in Python, is written as a web bundle (onyxia/web/bundle.py) and runs in
Node at every dims of its schedule (twice) through `updateDimensions` — smaller and larger than at
compile time (buffers regrow) — with outputs within the tolerance the Python model tests use and
no pipeline created for dims met before (the runtime's own counter). Bad feeds and dims come back as typed
errors naming the tensor or symbol.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onyxia.errors import OnyxiaError
from onyxia.ir.dim_parse import parse_dim
from onyxia.web.bundle import write_bundle
from tests.helpers import compile_model, make_model, run_ort
from tests.models import ModelCase
from tests.web.cases import ATOL, TOLERANCE, WEB_MODELS, mlp_feeds, web_case
from tests.web.harness import as_array, run_node

pytestmark = pytest.mark.web


def _runs(case: ModelCase, tmp_path: Path) -> tuple[list[dict], list[dict[str, np.ndarray]]]:
    runs, feeds = [], []
    for step, dims in enumerate(case.schedule):
        feed = case.feeds(dims, step)
        path = tmp_path / f"inputs_{step}.npz"
        np.savez(path, **feed)
        runs.append({"dims": dims, "inputs": str(path)})
        feeds.append(feed)
    return runs, feeds


@pytest.mark.parametrize("name", WEB_MODELS)
def test_node_matches_onnxruntime_across_dims_without_new_pipelines(name: str, tmp_path: Path) -> None:
    case, model, compiled = web_case(name)
    write_bundle(compiled, tmp_path / "bundle")
    runs, feeds = _runs(case, tmp_path)
    # The schedule twice: the second pass meets only dims (and kernel choices) seen before.
    # strict: safe WebGPU, so every kernel these models use passes Tint's uniformity analysis.
    report = run_node({"bundle": str(tmp_path / "bundle"), "runs": runs + runs, "encodeRepeats": 20, "strict": True},
                      tmp_path)
    assert report["ok"], report.get("error")
    assert "(cpu)" in report["adapter"], report["adapter"]  # SwiftShader: a real adapter, CPU type
    names = [o.name for o in model.graph.output]
    for run, feed, dims in zip(report["runs"], feeds + feeds, case.schedule * 2):
        assert run["dims"] == {**compiled.dims, **dims}
        for out_name, ref in zip(names, run_ort(model, feed)):
            got = as_array(run["outputs"][out_name])
            assert got.dtype == ref.dtype and got.shape == ref.shape, (out_name, dims, got.dtype, got.shape, ref.shape)
            tol = TOLERANCE.get(name, ATOL)
            np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=tol, atol=tol,
                                       err_msg=f"{out_name} at {dims}")
    # A pipeline is created when a chosen step first needs it, never again for the same dims.
    created = [run["stats"]["pipelines"] for run in report["runs"]]
    assert 0 < created[len(runs) - 1] == created[-1] <= len(compiled.shaders), created
    # The replay's encode() alone (benchmarks/bench_web.py compares it with Python's).
    assert report["dispatches"] == report["runs"][-1]["stats"]["dispatches"] > 0 and report["encodeMedianMs"] > 0
    per_dispatch = 1000 * report["encodeMedianMs"] / report["dispatches"]
    print(f"{name}: {report['dispatches']} dispatches, encode {per_dispatch:.2f} us per dispatch (median of 20)")
    grew = any(any(d[k] > compiled.dims[k] for k in d) for d in case.schedule)
    assert (report["runs"][-1]["stats"]["reallocs"] > 0) == grew


def test_zipped_bundle_loads_from_one_arraybuffer(tmp_path: Path) -> None:
    """load(ArrayBuffer): the folder zipped (deflated, as a server might ship it) gives the
    same numbers as the folder."""
    case, model, compiled = web_case("tiny_mlp")
    write_bundle(compiled, tmp_path / "bundle")
    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path in sorted((tmp_path / "bundle").iterdir()):
            zf.write(path, path.name)
    runs, _ = _runs(case, tmp_path)
    by_folder = run_node({"bundle": str(tmp_path / "bundle"), "runs": runs[:2]}, tmp_path)
    by_zip = run_node({"bundle": str(archive), "zip": True, "runs": runs[:2]}, tmp_path)
    assert by_folder["ok"] and by_zip["ok"], (by_folder.get("error"), by_zip.get("error"))
    assert [r["outputs"] for r in by_zip["runs"]] == [r["outputs"] for r in by_folder["runs"]]


@pytest.mark.parametrize("run, fragment, field", [
    ({"dims": {"batch": 3}, "feed_batch": 2}, "input 'features' has dims [2,8,8], expected [3,8,8]", "tensor"),
    ({"dims": {"sequence": 3}}, "unknown dimension 'sequence'", "symbol"),
    ({"dims": {"batch": -1}}, "dimension 'batch' must be a non-negative integer", "symbol"),
])
def test_bad_feeds_and_dims_are_typed_errors(run: dict, fragment: str, field: str, tmp_path: Path) -> None:
    _case_, _model_, compiled = web_case("tiny_mlp")
    write_bundle(compiled, tmp_path / "bundle")
    np.savez(tmp_path / "feed.npz", **mlp_feeds({"batch": run.get("feed_batch", 2)}))
    report = run_node({"bundle": str(tmp_path / "bundle"),
                       "runs": [{"dims": run["dims"], "inputs": str(tmp_path / "feed.npz")}]}, tmp_path)
    assert not report["ok"]
    assert report["error"].startswith("InputError: ") and fragment in report["error"], report["error"]
    assert report["errorFields"][field] is not None


def test_a_lost_int64_reaching_an_output_names_the_node(tmp_path: Path) -> None:
    """The status word's note (plan-format.md §10): Cast(3e9) to int64 has no 32-bit value; the
    output holding it fails the run naming the Cast; in range it is exact (onnxruntime)."""
    from onnx import TensorProto

    model = make_model([helper.make_node("Cast", ["f"], ["y"], to=TensorProto.INT64, name="to_int64")],
                       [("f", np.float32, [4])], ["y"])
    write_bundle(compile_model(model), tmp_path / "bundle")
    good, bad = np.array([2147483520.0, -7.5, 3.0, 0.5], np.float32), np.array([1.0, 3e9, 2.0, 4.0], np.float32)
    np.savez(tmp_path / "good.npz", f=good)
    np.savez(tmp_path / "bad.npz", f=bad)
    bundle = str(tmp_path / "bundle")
    report = run_node({"bundle": bundle, "runs": [{"dims": {}, "inputs": str(tmp_path / "good.npz")}]}, tmp_path)
    assert report["ok"], report.get("error")
    np.testing.assert_array_equal(as_array(report["runs"][0]["outputs"]["y"]), run_ort(model, {"f": good})[0])
    report = run_node({"bundle": bundle, "runs": [{"dims": {}, "inputs": str(tmp_path / "bad.npz")}]}, tmp_path)
    assert not report["ok"]
    assert report["error"].startswith("RunError: output 'y': node 'to_int64' (Cast) gave an int64 value outside"), \
        report["error"]


def test_weights_are_chunked_and_chunks_bounded(tmp_path: Path) -> None:
    """No chunk exceeds chunk_bytes; the chunked bundle computes what the one-chunk bundle does;
    a weight larger than a chunk is refused by name."""
    case, _model_, compiled = web_case("tiny_mlp")
    manifest = json.loads(write_bundle(compiled, tmp_path / "small", chunk_bytes=33000).read_text())
    assert manifest["plan"]["templates"] == {}  # the WGSL comes rendered
    assert len(manifest["chunks"]) == 2 and all(size <= 33000 for _, size in manifest["chunks"])
    write_bundle(compiled, tmp_path / "one")
    runs, _ = _runs(case, tmp_path)
    small = run_node({"bundle": str(tmp_path / "small"), "runs": runs[:1]}, tmp_path)
    one = run_node({"bundle": str(tmp_path / "one"), "runs": runs[:1]}, tmp_path)
    assert small["ok"] and small["runs"][0]["outputs"] == one["runs"][0]["outputs"]
    with pytest.raises(OnyxiaError, match="weight 'w1/panels' is 32768 bytes"):
        write_bundle(compiled, tmp_path / "tiny", chunk_bytes=16384)


EXPRESSIONS = ["batch", "64 * batch", "(batch + 3) // 4", "batch * seq + 1", "seq - 1", "4 * ((batch + 1) // 2)",
               "(seq - 9) // 2", "(seq - 9) % 4", "-(batch - 7) // 3", "batch-size * 2", "enc.seq + 1",
               "4 * 'batch size'", "('batch size' + 1) // 2", "batch size", "(3 - seq) / 2", "2 + 3 * 4 % 5 - 1"]


def test_expressions_evaluate_with_python_floor_semantics(tmp_path: Path) -> None:
    """onyxia.js's evaluator against onyxia's own parser (docs/plan-format.md §3): floor division
    and modulo of negative values, glued names (`batch-size`, `enc.seq`), quoted names."""
    from tests.web.harness import WEB_TESTS, node_command

    dims = {"batch": 3, "seq": 5, "batch-size": 7, "enc.seq": 11, "batch size": 13}
    script = tmp_path / "eval.mjs"
    script.write_text(f"import {{evaluate}} from {json.dumps(str(WEB_TESTS.parents[1] / 'onyxia/web/onyxia.js'))};\n"
                      f"const dims = {json.dumps(dims)};\n"
                      f"console.log(JSON.stringify({json.dumps(EXPRESSIONS)}.map((e) => evaluate(e, dims))));\n")
    got = json.loads(node_command([str(script)]).stdout)
    want = [int(parse_dim(text).evaluate(dims)) if hasattr(parse_dim(text), "evaluate") else int(parse_dim(text))
            for text in EXPRESSIONS]
    assert got == want


def _nonzero_model() -> onnx.ModelProto:
    """NonZero: its output count is read back from the data (a read_symbol host step)."""
    return make_model([helper.make_node("NonZero", ["x"], ["nz"])], [("x", np.float32, ["n"])], ["nz"], {})


def test_runtime_refuses_a_bundle_with_a_host_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bundle holding a host step (If/Loop branches, data-dependent counts), written past the
    check `onyxia web` makes (tests/unit/test_web_bundle.py), is refused by onyxia.js at load with
    a PlanError naming the step and the node."""
    from onyxia.web import bundle

    compiled = compile_model(_nonzero_model(), {"n": 6})
    monkeypatch.setattr(bundle, "host_steps", lambda model: [])
    write_bundle(compiled, tmp_path / "bundle")
    np.savez(tmp_path / "x.npz", x=np.arange(6, dtype=np.float32))
    report = run_node({"bundle": str(tmp_path / "bundle"), "runs": [{"dims": None, "inputs": str(tmp_path / "x.npz")}]},
                      tmp_path)
    assert not report["ok"]
    assert report["error"].startswith("PlanError: ")
    assert "'NonZero_0' (NonZero) is a 'read_symbol' step" in report["error"], report["error"]
    assert report["errorFields"]["node"] == "NonZero_0" and report["errorFields"]["step"] is not None


def test_web_folder_from_a_compiled_plan(tmp_path: Path) -> None:
    """`onyxia web PLAN.onyxia`: the plan archive rendered into a bundle computes what the ONNX
    model's bundle does (the JS runtime reads bundles; the archive's templates are rendered here)."""
    from onyxia.cli import main as onyxia_main

    case, model, compiled = web_case("tiny_mlp")
    compiled.save(tmp_path / "mlp.onyxia")
    assert onyxia_main(["web", str(tmp_path / "mlp.onyxia"), "-o", str(tmp_path / "from_plan")]) == 0
    write_bundle(compiled, tmp_path / "from_model")
    runs, _ = _runs(case, tmp_path)
    from_plan = run_node({"bundle": str(tmp_path / "from_plan"), "runs": runs[:2]}, tmp_path)
    from_model = run_node({"bundle": str(tmp_path / "from_model"), "runs": runs[:2]}, tmp_path)
    assert from_plan["ok"] and from_model["ok"], (from_plan.get("error"), from_model.get("error"))
    assert [r["outputs"] for r in from_plan["runs"]] == [r["outputs"] for r in from_model["runs"]]
    with pytest.raises(OnyxiaError, match="is a compiled plan: its dims are the ones it was compiled at"):
        onyxia_main(["--debug", "web", str(tmp_path / "mlp.onyxia"), "-o", str(tmp_path / "x"), "--dim", "batch=3"])
