"""DivMulFusionPass: Mul(x, Div(1, y)) -> Div(x, y), where onnxruntime makes the same rewrite."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.compiler.passes import DeadCodeEliminationPass, DivMulFusionPass
from onyxia.operators import core_operator_registry
from tests.helpers import make_model


def planned_ops(model) -> list[str]:
    pipeline = CompilerPipeline(core_operator_registry(), optimize=False)
    pipeline.add_pass(DivMulFusionPass())
    pipeline.add_pass(DeadCodeEliminationPass())
    return sorted(op.op_type for op in pipeline.compile(onyxia.load_model(model), {}).operations)


def rms_norm(numerator: float = 1.0, swap: bool = False, extra_use: bool = False, expose: bool = False):
    """x * (1 / sqrt(v)), as PyTorch exports x * rsqrt(v)."""
    nodes = [h.make_node("Sqrt", ["v"], ["s"]), h.make_node("Div", ["one", "s"], ["r"]),
             h.make_node("Mul", ["r", "x"] if swap else ["x", "r"], ["y"])]
    outputs = ["y"]
    if extra_use:
        nodes.append(h.make_node("Neg", ["r"], ["z"]))
        outputs.append("z")
    if expose:
        outputs.append("r")
    return make_model(nodes, [("x", np.float32, [4, 8]), ("v", np.float32, [4, 1])], outputs,
                      {"one": np.array(numerator, np.float32)})


@pytest.mark.parametrize("swap", [False, True])
def test_reciprocal_times_x_becomes_one_division(swap):
    assert planned_ops(rms_norm(swap=swap)) == ["Div", "Sqrt"]


@pytest.mark.parametrize("case", [{"numerator": 2.0}, {"extra_use": True}, {"expose": True}])
def test_other_shapes_of_the_graph_keep_div_and_mul(case):
    assert "Mul" in planned_ops(rms_norm(**case))


def test_a_broadcasting_one_is_left_alone():
    """Div(ones [4, 8], s [4, 1]) is [4, 8]: x / s would not be the same shape of product."""
    nodes = [h.make_node("Div", ["one", "s"], ["r"]), h.make_node("Mul", ["x", "r"], ["y"])]
    model = make_model(nodes, [("x", np.float32, [1, 8]), ("s", np.float32, [4, 1])], ["y"],
                       {"one": np.ones((4, 8), np.float32)})
    assert "Mul" in planned_ops(model)
