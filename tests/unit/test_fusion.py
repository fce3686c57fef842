"""ElementwiseFusionPass decisions visible in the plan (no GPU; the fused kernels run in
tests/gpu/test_fusion.py)."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.operators import core_operator_registry
from tests.helpers import compile_model, make_model


def test_non_float_and_comparisons_stay_unfused():
    nodes = [h.make_node("Add", ["i", "i"], ["j"]), h.make_node("Mul", ["j", "i"], ["k"]),
             h.make_node("Greater", ["x", "x"], ["g"])]
    model = make_model(nodes, [("i", np.int32, [4]), ("x", np.float32, [4])], ["k", "g"])
    planned = [op.op_type for op in compile_model(model, {}).operations]
    assert "FusedElementwise" not in planned


def test_opting_out_keeps_one_dispatch_per_op():
    nodes = [h.make_node("Relu", ["x"], ["t"]), h.make_node("Neg", ["t"], ["y"])]
    model = make_model(nodes, [("x", np.float32, [4])], ["y"])
    plain = CompilerPipeline(core_operator_registry(), optimize=False).compile(onyxia.load_model(model), {})
    assert plain.num_dispatches == 2 and compile_model(model, {}).num_dispatches == 1
