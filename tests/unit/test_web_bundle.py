"""The web bundle's Python side (onyxia/web/bundle.py), without a GPU: every plan shader has WGSL
for every adapter variant, rendered with the uniform transport; NaN/infinity constants become
run-time values (Tint refuses them as constant expressions); weights are in device encoding."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onyxia.errors import PlanError
from onyxia.ir import dtypes
from onyxia.web.bundle import VARIANTS, portable, variant_key, write_bundle
from tests.helpers import compile_model, make_model

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny_mlp.onnx"


def test_manifest_has_every_variant_and_device_bytes(tmp_path: Path) -> None:
    compiled = compile_model(onnx.load(EXAMPLE), {"batch": 2})
    doc = json.loads(write_bundle(compiled, tmp_path).read_text())
    keys = {variant_key(*v) for v in VARIANTS}
    assert keys == {"000", "001", "100", "101", "110", "111"}
    assert len(doc["shaders"]) == len(compiled.shaders) and all(set(s) == keys for s in doc["shaders"])
    for shader in doc["shaders"]:
        for index in shader.values():
            code = doc["wgsl"][index]
            assert "var<uniform> params: Params;" in code or "struct Params" not in code
            assert "var<immediate>" not in code
    chunk = (tmp_path / doc["chunks"][0][0]).read_bytes()
    for name, (_chunk, offset, nbytes) in doc["weights"].items():
        tensor = compiled.tensors[name]
        want = dtypes.to_device(np.asarray(tensor.data), dtypes.from_name(tensor.dtype), name).tobytes()
        assert chunk[offset:offset + len(want)] == want and nbytes == -(-len(want) // 4) * 4


def test_special_float_constants_are_evaluated_at_run_time() -> None:
    code = "fn onyxia_nan() -> f32 { return bitcast<f32>(0x7fc00000u); }\nlet x = bitcast<f32>(0x3f800000u);"
    out = portable(code)
    assert "bitcast<f32>(onyxia_runtime_bits(0x7fc00000u))" in out and "bitcast<f32>(0x3f800000u)" in out
    assert out.count("fn onyxia_runtime_bits") == 1 and portable("let y = 1.0;") == "let y = 1.0;"


def test_host_control_flow_is_refused_before_writing(tmp_path: Path) -> None:
    model = make_model([helper.make_node("NonZero", ["x"], ["y"], name="nz")], [("x", np.float32, [6])], ["y"])
    with pytest.raises(PlanError, match=r"1 node\(s\) need host control flow.*'nz' \(NonZero: a read_symbol step\)"):
        write_bundle(compile_model(model), tmp_path / "out")
    assert not (tmp_path / "out").exists()
