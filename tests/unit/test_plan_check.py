"""Every plan the compiler produces passes the plan-file validation (onyxia/plan_check.py).

The hostile side (edited plans refused, naming the field) is tests/robustness/test_plans.py.
"""

from __future__ import annotations

import glob
from pathlib import Path

import onnx
import pytest

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.plan import CompiledModel
from tests import models

EXPORTED = Path(__file__).resolve().parents[1] / "data" / "exported"
CASES = {
    "bert_encoder": (models.bert_encoder, {"batch": 2, "seq": 8}),
    "gpt2_block": (models.gpt2_block, None),
    "mixer_block": (models.mixer_block, {"batch": 2, "width": 8}),
    "small_cnn": (models.small_cnn, None),
    **{Path(p).name: (lambda p=p: onnx.load(p), None) for p in sorted(glob.glob(str(EXPORTED / "*.dynamo.onnx")))},
}


def _default_dims(graph) -> dict[str, int]:
    symbols = {s for n in graph.inputs for d in graph.tensor(n).shape if not isinstance(d, int) for s in d.symbols}
    return {s: 8 for s in symbols}


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_plans_pass_validation(tmp_path, name):
    build, dims = CASES[name]
    graph = onyxia.load_model(build())
    compiled = CompilerPipeline(onyxia.core_operator_registry()).compile(graph, dims or _default_dims(graph))
    compiled.save(tmp_path / "m.onyxia")
    loaded = CompiledModel.load(tmp_path / "m.onyxia")
    assert loaded.steps == compiled.steps and loaded.tensors.keys() == compiled.tensors.keys()
