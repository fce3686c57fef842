"""The realistic test models' plans: shape chains fold, views are free (no GPU; the models run
against onnxruntime in tests/gpu/test_models.py)."""

from __future__ import annotations

import pytest

from onyxia.plan.cost import plan_cost
from tests.builders.model_cases import _REGISTRY, CASES, VIEW_OPS, _compiled, _model
from tests.models import MODELS, shape_chain_nodes


@pytest.mark.parametrize("name", sorted(CASES))
def test_shape_chains_fold_and_views_are_free(name: str, record_property) -> None:
    compiled, model = _compiled(name), _model(name)
    chains = shape_chain_nodes(model)
    if any(n.op_type == "Reshape" for n in model.graph.node):
        assert chains, "the builders compute reshape shapes from Shape: no such chain found"
    planned = {op.name: op for op in compiled.operations}
    assert not chains & set(planned), f"shape computations planned instead of folded: {sorted(chains & set(planned))}"
    assert "Shape" not in {op.op_type for op in compiled.operations}
    views = [op.name for op in compiled.operations if op.op_type in VIEW_OPS and op.steps]
    assert not views, f"view ops should alias their input, not copy: {views}"
    onnx_nodes = sum(n.op_type != "Constant" for n in model.graph.node)
    record_property("dispatches", compiled.num_dispatches)
    record_property("planned_ops", len(compiled.operations))
    print(f"{name}: {onnx_nodes} ONNX nodes -> {len(compiled.operations)} planned ops, "
          f"{compiled.num_dispatches} dispatches, {len(compiled.shaders)} shaders")
    # What a run launches (the heuristic's kernel variants at these dims): the plan-wide count adds
    # every Select alternative, which says little once epilogues absorb the cheap ops.
    launched = sum(d.live for d in plan_cost(compiled).dispatches)
    assert 0 < launched <= 2 * len(compiled.operations)


def test_cnn_availability_is_reported() -> None:
    """Not a skip: says in the log whether the CNN case ran (it joins CASES once Conv/MaxPool exist)."""
    missing = [f"{d or 'ai.onnx'}::{op}" for d, op in MODELS["small_cnn"].needs if (d, op) not in _REGISTRY]
    print("small_cnn: " + (f"left out, {', '.join(missing)} not registered yet" if missing else "included"))
    assert ("small_cnn" in CASES) == (not missing)
