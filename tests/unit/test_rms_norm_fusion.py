"""RmsNormFusionPass: PyTorch's spelled-out RMS norm becomes one SimplifiedLayerNormalization."""

from __future__ import annotations

import pytest
from onnx import TensorProto
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.compiler.passes import DeadCodeEliminationPass, DivMulFusionPass, RmsNormFusionPass
from onyxia.operators import core_operator_registry
from tests.builders.rms_norm_fusion import torch_rms_norm


def planned_ops(model) -> list[str]:
    pipeline = CompilerPipeline(core_operator_registry(), optimize=False)
    for p in (DivMulFusionPass(), RmsNormFusionPass(), DeadCodeEliminationPass()):
        pipeline.add_pass(p)
    return sorted(op.op_type for op in pipeline.compile(onyxia.load_model(model), {}).operations)


@pytest.mark.parametrize("weight,cast", [(True, True), (True, False), (False, False)])
def test_the_chain_becomes_one_norm(weight, cast):
    assert planned_ops(torch_rms_norm(weight=weight, cast=cast)) == ["SimplifiedLayerNormalization"]


@pytest.mark.parametrize("change", [{"exponent": 3.0}, {"axis": 0}, {"extra_reader": True}])
def test_other_chains_stay(change):
    assert "SimplifiedLayerNormalization" not in planned_ops(torch_rms_norm(**change))


def test_a_norm_of_a_dequantized_tensor_stays_as_onnxruntime_leaves_it():
    """onnxruntime gives each reader of a DequantizeLinear its own copy, which keeps its fusion
    from matching there; onyxia leaves the chain alone too, so both compute it alike."""
    dq = [h.make_node("DequantizeLinear", ["q", "qs"], ["x"])]
    model = torch_rms_norm(source=dq)
    model.graph.initializer.append(h.make_tensor("qs", TensorProto.FLOAT, [], [0.05]))
    assert "SimplifiedLayerNormalization" not in planned_ops(model)
