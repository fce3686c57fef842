"""EpilogueFusionPass on MatMul and Gemm without a device: what is fused, what is left alone and
why (the fused kernels run against onnxruntime in tests/gpu/test_matmul_epilogue.py)."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.compiler.passes import default_optimization_passes
from onyxia.plan.cost import plan_cost
from tests.helpers import make_model

F = np.float32


def _compile(model, dims, epilogue=True):
    pipeline = CompilerPipeline(onyxia.core_operator_registry(), optimize=False)
    for p in default_optimization_passes():
        if epilogue or p.name != "epilogue-fusion":
            pipeline.add_pass(p)
    compiled = pipeline.compile(onyxia.load_model(model), dims)
    return pipeline.context.reports["epilogue-fusion" if epilogue else "elementwise-fusion"], compiled


def _launched(compiled, dims) -> int:
    return sum(d.live for d in plan_cost(compiled, dims).dispatches)


def test_mlp_layers_run_as_one_product_each():
    rng = np.random.default_rng(0)
    nodes, inits, x = [], {}, "x"
    for i in range(3):
        inits[f"w{i}"], inits[f"b{i}"] = rng.standard_normal((16, 16)).astype(F), rng.standard_normal(16).astype(F)
        nodes += [h.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  h.make_node("Add", [f"m{i}", f"b{i}"], [f"s{i}"]), h.make_node("Relu", [f"s{i}"], [f"h{i}"])]
        x = f"h{i}"
    model = make_model(nodes, [("x", F, ["n", 16])], [x], inits)
    report, fused = _compile(model, {"n": 4})
    assert sorted(report.fused) == ["mm0", "mm1", "mm2"] and not report.skipped
    assert [op.op_type for op in fused.operations] == ["MatMulEpilogue"] * 3
    _, plain = _compile(model, {"n": 4}, epilogue=False)
    for n in (1, 4, 100):
        assert _launched(fused, {"n": n}) == 3 and _launched(plain, {"n": n}) == 6


def test_declines_with_reasons():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 8)).astype(F)
    nodes = [
        h.make_node("MatMul", ["x", "w"], ["two"], name="two"), h.make_node("Relu", ["two"], ["r1"]),
        h.make_node("Sigmoid", ["two"], ["r2"]),
        h.make_node("MatMul", ["x", "w"], ["out"], name="output"), h.make_node("Relu", ["out"], ["r3"]),
        h.make_node("MatMul", ["x", "w"], ["grow"], name="grow"), h.make_node("Add", ["grow", "big"], ["r4"]),
        h.make_node("MatMul", ["x", "w"], ["soft"], name="soft"), h.make_node("Softmax", ["soft"], ["r5"]),
        h.make_node("MatMul", ["i", "iw"], ["int"], name="int32"), h.make_node("Add", ["int", "ib"], ["r6"]),
        h.make_node("MatMul", ["l", "lw"], ["long"], name="int64"), h.make_node("Add", ["long", "lb"], ["r7"]),
        h.make_node("MatMul", ["hx", "hw"], ["half"], name="widened"), h.make_node("Mul", ["half", "hx"], ["hm"]),
        h.make_node("Cast", ["hm"], ["r8"], to=1),  # fused with the Mul: a float16 chain ending in float32
    ]
    inits = {"w": w, "iw": np.ones((8, 8), np.int32), "lw": np.ones((8, 8), np.int64), "ib": np.ones(8, np.int32),
             "lb": np.ones(8, np.int64), "hw": w.astype(np.float16)}
    model = make_model(nodes, [("x", F, [4, 8]), ("big", F, [3, 4, 8]), ("i", np.int32, [4, 8]),
                               ("l", np.int64, [4, 8]), ("hx", np.float16, [4, 8])],
                       ["r1", "r2", "out", "r3", "r4", "r5", "r6", "r7", "r8"], inits)
    report, _ = _compile(model, {})
    skipped = report.skipped
    assert not report.fused, report.fused
    assert "read by 2 nodes" in skipped["two"]
    assert "graph output" in skipped["output"]
    assert "broadcasts the product" in skipped["grow"]
    assert "not a fusible elementwise op" in skipped["soft"]
    assert "only float products" in skipped["int32"] and "only float products" in skipped["int64"]
    assert "not a computed float16 tensor" in skipped["widened"]


def _gemm_and_five_operands(c: bool):
    """Gemm, then one fused chain reading the product and five more tensors."""
    rng = np.random.default_rng(2)
    operands = [f"r{j}" for j in range(5)]
    nodes = [h.make_node("Gemm", ["a", "b", "c"] if c else ["a", "b"], ["p"], name="gemm")]
    prev = "p"
    for j, r in enumerate(operands):
        nodes.append(h.make_node("Add", [prev, r], [f"t{j}"]))
        prev = f"t{j}"
    inits = {"b": rng.standard_normal((8, 8)).astype(F), "c": rng.standard_normal(8).astype(F)}
    return make_model(nodes, [("a", F, [4, 8])] + [(r, F, [4, 8]) for r in operands], [prev], inits)


def test_gemm_with_c_declines_past_eight_storage_buffers():
    report, _ = _compile(_gemm_and_five_operands(c=True), {})
    assert "bind 9 storage buffers" in report.skipped["gemm"]
    # without C there is room: a, b, y and the five operands
    report, compiled = _compile(_gemm_and_five_operands(c=False), {})
    assert "gemm" in report.fused and not report.skipped
    assert [op.op_type for op in compiled.operations] == ["GemmEpilogue"]
