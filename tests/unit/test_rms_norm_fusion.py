"""RmsNormFusionPass: PyTorch's spelled-out RMS norm becomes one SimplifiedLayerNormalization."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.compiler.passes import DeadCodeEliminationPass, DivMulFusionPass, RmsNormFusionPass
from onyxia.operators import core_operator_registry
from tests.helpers import make_model

K = 16


def planned_ops(model) -> list[str]:
    pipeline = CompilerPipeline(core_operator_registry(), optimize=False)
    for p in (DivMulFusionPass(), RmsNormFusionPass(), DeadCodeEliminationPass()):
        pipeline.add_pass(p)
    return sorted(op.op_type for op in pipeline.compile(onyxia.load_model(model), {}).operations)


def torch_rms_norm(*, weight=True, cast=True, exponent=2.0, axis=-1, extra_reader=False, source=None):
    """Hugging Face's RMSNorm as torch.onnx exports it: x * (1 / sqrt(mean(x^2) + eps)) * w."""
    nodes = list(source or [])
    nodes += [h.make_node("Pow", ["x", "two"], ["p"]), h.make_node("ReduceMean", ["p", "axes"], ["m"]),
              h.make_node("Add", ["m", "eps"], ["a"]), h.make_node("Sqrt", ["a"], ["s"]),
              h.make_node("Div", ["one", "s"], ["r"]), h.make_node("Mul", ["x", "r"], ["n"])]
    out = "n"
    if cast:
        nodes.append(h.make_node("Cast", ["n"], ["c"], to=TensorProto.FLOAT))
        out = "c"
    if weight:
        nodes.append(h.make_node("Mul", ["w", out], ["y"]))
        out = "y"
    outputs = [out] + (["m"] if extra_reader else [])
    inits = {"two": np.array(exponent, np.float32), "axes": np.array([axis], np.int64),
             "eps": np.array(1e-6, np.float32), "one": np.array(1.0, np.float32),
             "w": np.linspace(0.5, 1.5, K).astype(np.float32)}
    first = "q" if source else "x"
    return make_model(nodes, [(first, np.float32 if not source else np.int8, [3, K])], outputs, inits)


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
