"""Every plan the compiler produces passes the plan-file validation (onyxia/plan/check.py).

The hostile side (edited plans refused, naming the field) is tests/robustness/test_plans.py.
"""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.plan import STATUS_TENSOR, CompiledModel
from onyxia.plan import check as plan_check
from tests import control_models, models
from tests.helpers import make_model

DATA = Path(__file__).resolve().parents[1] / "data"
LLM_DIMS = {"batch_size": 1, "sequence_length": 4, "past_sequence_length": 8, "total_sequence_length": 12,
            "kv_cache_dim": 16}
CASES = {
    "bert_encoder": (models.bert_encoder, {"batch": 2, "seq": 8}),
    "gpt2_block": (models.gpt2_block, None),
    "mixer_block": (models.mixer_block, {"batch": 2, "width": 8}),
    "small_cnn": (models.small_cnn, None),
    **{Path(p).name: (lambda p=p: onnx.load(p), None)
       for p in sorted(glob.glob(str(DATA / "exported" / "*.dynamo.onnx")))},
    # Plan v3: nested steps (branches, loops), data symbols, the status word, native storage.
    **{f"control/{Path(p).name}": (lambda p=p: onnx.load(p), None)
       for p in sorted(glob.glob(str(DATA / "control" / "*.onnx")))},
    "if": (control_models.if_model, None),
    "if_arms_differ": (control_models.arms_differ_model, None),  # BranchStep then_dims/orelse_dims
    "while_loop": (lambda: control_models.counting_loop(m_input=True, while_limit=10.0), None),
    "scan": (control_models.scan_model, None),
    "nonzero": (lambda: make_model([h.make_node("NonZero", ["x"], ["y"])], [("x", np.float32, ["n"])], ["y"]), None),
    "int64_reports": (lambda: make_model([h.make_node("Mul", ["x", "x"], ["y"])], [("x", np.int64, ["n"])], ["y"]),
                      None),
    **{f"llm/{name}": (lambda name=name: onnx.load(DATA / "llm" / "genai" / name / "model.onnx"), LLM_DIMS)
       for name in ("llama-webgpu-fp16", "qwen2-webgpu-int4")},
}


def _default_dims(graph) -> dict[str, int]:
    symbols = {s for n in graph.inputs for d in (graph.tensor(n).shape or ()) if not isinstance(d, int)
               for s in d.symbols}
    return {s: 8 for s in symbols}


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_plans_pass_validation(tmp_path, name):
    build, dims = CASES[name]
    graph = onyxia.load_model(build())
    compiled = CompilerPipeline(onyxia.core_operator_registry()).compile(graph, dims or _default_dims(graph))
    compiled.save(tmp_path / "m.onyxia")
    loaded = CompiledModel.load(tmp_path / "m.onyxia")
    assert loaded.steps == compiled.steps and loaded.tensors.keys() == compiled.tensors.keys()
    assert loaded.shaders == compiled.shaders and loaded.sites == compiled.sites
    assert loaded.data_symbols == compiled.data_symbols


def test_cases_cover_plan_v3():
    """The plans above exercise what plan v3 added, so the validation of it is tested on real plans."""
    tags, status, storage = set(), False, set()
    for name in ("control/loop.onnx", "while_loop", "nonzero", "llm/llama-webgpu-fp16"):
        build, dims = CASES[name]
        graph = onyxia.load_model(build())
        compiled = CompilerPipeline(onyxia.core_operator_registry()).compile(graph, dims or _default_dims(graph))
        tags |= {s.tag for s in compiled.steps}
        status |= STATUS_TENSOR in compiled.tensors
        storage |= {t.storage for t in compiled.tensors.values()}
    assert {"branch", "loop", "read_symbol", "copy", "write", "dispatch"} <= tags
    assert status and "f16" in storage


def test_status_tensor_name_agrees():
    assert plan_check.STATUS_TENSOR == STATUS_TENSOR


def test_a_branch_may_set_only_data_symbols(tmp_path):
    """A branch's then_dims/orelse_dims name data symbols: a plan file aiming one at a caller's
    dim is refused, naming the field."""
    import json
    import zipfile

    from onyxia.errors import PlanError

    graph = onyxia.load_model(control_models.arms_differ_model())
    compiled = CompilerPipeline(onyxia.core_operator_registry()).compile(graph, {"n": 3})
    path = tmp_path / "m.onyxia"
    compiled.save(path)
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    doc = json.loads(members["plan.json"])
    branch = next(s for op in doc["operations"] for s in op["steps"] if s["t"] == "branch")
    assert branch["then_dims"] and branch["orelse_dims"] and branch["label"] == "pick"
    branch["then_dims"][0][0] = "n"
    members["plan.json"] = json.dumps(doc).encode()
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    with pytest.raises(PlanError, match=r"then_dims\[0\]: 'n' is not one of the plan's data symbols"):
        CompiledModel.load(path)
