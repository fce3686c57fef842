"""CompiledModel save/load: a lossless round trip through one file, and clear errors for bad files."""

from __future__ import annotations

import dataclasses
import io
import json
import zipfile

import numpy as np
import pytest
from onnx import helper as h

from onyxia.errors import PlanError
from onyxia.ir.dim_env import DimEnv
from onyxia.ir.graph import IrGraph
from onyxia.ir.shapes import SymDim
from onyxia.operators.base import PlanState
from onyxia.plan import CompiledModel, ShaderParam, WriteBuffer, load_plan
from tests.helpers import compile_model, make_model
from tests.models import gpt2_block


def rich_model():
    """Weights of several dtypes, a folded symbolic shape tensor that must be materialized on the
    device (WriteBuffer), a float param, a view, symbolic dims."""
    rng = np.random.default_rng(0)
    nodes = [
        h.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
        h.make_node("Mul", ["m", "scale"], ["ms"], name="scale"),
        h.make_node("Gather", ["emb", "ids"], ["g"], axis=0, name="embed"),
        h.make_node("Add", ["ms", "g"], ["y"], name="add"),
        h.make_node("Shape", ["x"], ["shp"], name="shape"),
        h.make_node("Cast", ["shp"], ["shp32"], to=6, name="cast"),
        h.make_node("Add", ["shp32", "one"], ["y2"], name="shape_plus_one"),
        h.make_node("Unsqueeze", ["y", "ax"], ["y3"], name="view"),
    ]
    inits = {"W": rng.standard_normal((4, 5)).astype(np.float32), "scale": np.float32(0.125),
             "emb": rng.standard_normal((7, 5)).astype(np.float16), "one": np.array([1, 1, 1], np.int32),
             "ax": np.array([0], np.int64)}
    inits["emb"] = inits["emb"].astype(np.float32)
    return make_model(nodes, [("x", np.float32, ["batch", "seq", 4]), ("ids", np.int64, ["batch", "seq"])],
                      ["y2", "y3"], inits)


def assert_same_plan(a: CompiledModel, b: CompiledModel) -> None:
    assert a.shaders == b.shaders
    assert a.templates == b.templates
    assert a.operations == b.operations
    assert a.steps == b.steps
    assert a.inputs == b.inputs and a.outputs == b.outputs
    assert a.symbolic_bindings == b.symbolic_bindings
    assert a.dims == b.dims and a.static_symbols == b.static_symbols
    assert a.metadata == b.metadata
    assert list(a.tensors) == list(b.tensors)
    for name, t in a.tensors.items():
        u = b.tensors[name]
        assert (t.name, t.dtype, t.shape, t.kind, t.alias_of) == (u.name, u.dtype, u.shape, u.kind, u.alias_of), name
        assert (t.data is None) == (u.data is None), name
        if t.data is not None:
            assert t.data.dtype == u.data.dtype and t.data.shape == u.data.shape, name
            np.testing.assert_array_equal(t.data, u.data, err_msg=name)


@pytest.mark.parametrize("static", [(), ("seq",), ("batch", "seq")])
def test_save_load_round_trip(tmp_path, static):
    compiled = compile_model(rich_model(), {"batch": 2, "seq": 3}, static=static)
    assert compiled.num_dispatches >= 3
    assert any(t.data is not None for t in compiled.tensors.values())
    path = tmp_path / "model.onyxia"
    compiled.save(path)
    loaded = CompiledModel.load(path)
    assert_same_plan(compiled, loaded)
    # Saving the loaded plan again gives an equal plan (nothing lost or added on the way).
    again = tmp_path / "again.onyxia"
    loaded.save(again)
    assert_same_plan(loaded, load_plan(again))


def test_round_trip_keeps_value_types(tmp_path):
    """Floats stay floats (1.0 must not come back as int 1), ints stay ints, defs keep their type,
    symbolic WriteBuffer data stays symbolic."""
    compiled = compile_model(rich_model(), {"batch": 2, "seq": 3})
    spec = compiled.shaders[0]
    spec = dataclasses.replace(spec, defs=spec.defs + (("FLAG", True), ("ONE_F", 1.0), ("NAME", "f32")),
                               constants=spec.constants + ((ShaderParam("EPS", "f32"), 1e-5),
                                                           (ShaderParam("ONE", "f32"), 1.0),
                                                           (ShaderParam("NEG", "i32"), -3),
                                                           (ShaderParam("BIG", "f32"), float("inf"))))
    compiled = dataclasses.replace(compiled, shaders=(spec, *compiled.shaders[1:]))
    path = tmp_path / "p.onyxia"
    compiled.save(path)
    loaded = load_plan(path)
    assert_same_plan(compiled, loaded)
    defs, constants = dict(loaded.shaders[0].defs), {p.name: v for p, v in loaded.shaders[0].constants}
    assert defs["FLAG"] is True and type(defs["ONE_F"]) is float and defs["NAME"] == "f32"
    assert type(constants["ONE"]) is float and type(constants["NEG"]) is int and constants["BIG"] == float("inf")
    writes = [s for s in loaded.steps if isinstance(s, WriteBuffer)]
    assert writes and any(isinstance(v, SymDim) for w in writes for v in w.data)


def _write_zip(path, files: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)


def _valid_doc(tmp_path) -> tuple[dict, dict[str, bytes]]:
    path = tmp_path / "valid.onyxia"
    compile_model(rich_model(), {"batch": 2, "seq": 3}).save(path)
    with zipfile.ZipFile(path) as zf:
        files = {n: zf.read(n) for n in zf.namelist()}
    return json.loads(files["plan.json"]), files


def test_each_template_is_stored_once(tmp_path):
    # Shaders that specialize one template (two Adds, a MatMul's gemv and gemm halves...) name it;
    # the file holds its text once.
    model = gpt2_block(opset=18, mask="range")
    compiled = compile_model(model, {"batch": 2, "seq": 8})
    keys = [s.template for s in compiled.shaders]
    assert set(keys) == set(compiled.templates) and len(compiled.templates) < len(keys)
    assert "matmul/gemm.wgsl" in compiled.templates
    path = tmp_path / "gpt2.onyxia"
    compiled.save(path)
    with zipfile.ZipFile(path) as zf:
        text = zf.read("plan.json").decode()
    doc = json.loads(text)
    assert doc["templates"] == compiled.templates
    assert [s["template"] for s in doc["shaders"]] == keys
    for key, wgsl in compiled.templates.items():
        assert text.count(json.dumps(wgsl)) == 1, key


def test_plan_of_an_older_version_says_to_compile_again(tmp_path):
    doc, files = _valid_doc(tmp_path)
    doc["version"] = 1
    path = tmp_path / "old.onyxia"
    _write_zip(path, {**files, "plan.json": json.dumps(doc).encode()})
    with pytest.raises(PlanError, match=r"old\.onyxia' is an onyxia plan of version 1; .* compile the model again"):
        load_plan(path)


@pytest.mark.parametrize("corruption", [
    "garbage", "truncated", "empty", "no_plan_json", "bad_json", "wrong_format", "wrong_version",
    "missing_key", "missing_array", "bad_step", "unknown_step", "bad_expression", "bad_npy", "directory",
    "missing_file", "unknown_template", "bad_templates",
])
def test_corrupt_plan_files_are_plan_errors(tmp_path, corruption):
    doc, files = _valid_doc(tmp_path)
    path = tmp_path / "corrupt.onyxia"
    good = tmp_path / "valid.onyxia"
    if corruption == "garbage":
        path.write_bytes(b"definitely not a zip file" * 10)
    elif corruption == "truncated":
        data = good.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif corruption == "empty":
        path.write_bytes(b"")
    elif corruption == "no_plan_json":
        _write_zip(path, {k: v for k, v in files.items() if k != "plan.json"})
    elif corruption == "bad_json":
        _write_zip(path, {**files, "plan.json": b"{not json"})
    elif corruption in ("wrong_format", "wrong_version", "missing_key", "bad_step", "unknown_step", "bad_expression",
                        "unknown_template", "bad_templates"):
        if corruption == "unknown_template":
            doc["shaders"][0]["template"] = "no/such.wgsl"
        elif corruption == "bad_templates":
            doc["templates"] = ["not", "a", "table"]
        elif corruption == "wrong_format":
            doc["format"] = "something-else"
        elif corruption == "wrong_version":
            doc["version"] = 999
        elif corruption == "missing_key":
            del doc["tensors"]
        elif corruption == "bad_step":
            doc["operations"][0]["steps"][0] = {"t": "dispatch"}
        elif corruption == "unknown_step":
            doc["operations"][0]["steps"][0]["t"] = "teleport"
        else:
            doc["symbolic_bindings"].append(["buffer", "x", 0, "batch ** 2"])
        _write_zip(path, {**files, "plan.json": json.dumps(doc).encode()})
    elif corruption == "missing_array":
        _write_zip(path, {k: v for k, v in files.items() if not k.endswith(".npy")})
    elif corruption == "bad_npy":
        _write_zip(path, {k: (b"\x93NUMPY garbage" if k.endswith(".npy") else v) for k, v in files.items()})
    elif corruption == "directory":
        path = tmp_path / "a_directory"
        path.mkdir()
    else:
        path = tmp_path / "does_not_exist.onyxia"
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert path.name in str(info.value)
    if corruption == "unknown_step":
        assert "unknown step kind 'teleport'" in str(info.value)


def test_pickled_arrays_are_refused(tmp_path):
    """A plan never executes code on load: object arrays (pickles) are rejected."""
    doc, files = _valid_doc(tmp_path)
    key = next(k for k in files if k.endswith(".npy"))
    buf = io.BytesIO()
    np.save(buf, np.array([object()], dtype=object), allow_pickle=True)
    path = tmp_path / "pickled.onyxia"
    _write_zip(path, {**files, key: buf.getvalue()})
    with pytest.raises(PlanError):
        load_plan(path)


def test_generated_templates_sharing_a_label_keep_their_own_keys():
    # Operators with generated WGSL name it by label; two different texts under one label (or a
    # label that looks like a shader path) must not overwrite each other.
    state = PlanState(IrGraph(), DimEnv())
    first = state.inline_template("custom", "fn a() {}\n")
    assert state.inline_template("custom", "fn a() {}\n") == first == "custom"
    second = state.inline_template("custom", "fn b() {}\n")
    assert second == "custom#2" and state.templates[first] != state.templates[second]
    path = state.template("indexing/fill.wgsl")
    assert path == "indexing/fill.wgsl" and state.inline_template(path, "fn c() {}\n") != path
    assert "fn c()" not in state.templates[path]
