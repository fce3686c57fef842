"""ElementwiseFusionPass: fewer dispatches, identical results (onnxruntime is the oracle)."""

import numpy as np
from onnx import helper as h

from tests.helpers import compile_model, make_model, run_ort


def _run(runtime, model, compiled, feeds):
    exe = runtime.load_model(compiled)
    ours = exe.run(feeds)
    for name, ref in zip(compiled.outputs, run_ort(model, feeds)):
        np.testing.assert_allclose(ours[name], ref, rtol=1e-5, atol=1e-6)
    return exe


def test_chain_with_params_and_broadcast_is_one_dispatch(runtime):
    nodes = [h.make_node("Add", ["x", "b"], ["t0"]), h.make_node("LeakyRelu", ["t0"], ["t1"], alpha=0.1),
             h.make_node("Mul", ["t1", "t0"], ["t2"]), h.make_node("LeakyRelu", ["t2"], ["t3"], alpha=0.3),
             h.make_node("Tanh", ["t3"], ["y"])]
    model = make_model(nodes, [("x", np.float32, ["n", 5]), ("b", np.float32, [5])], ["y"])
    compiled = compile_model(model, {"n": 4})
    assert [op.op_type for op in compiled.operations] == ["FusedElementwise"]
    assert compiled.num_dispatches == 1
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((4, 5)).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)}
    exe = _run(runtime, model, compiled, feeds)
    exe.update_dimensions({"n": 9})
    feeds["x"] = rng.standard_normal((9, 5)).astype(np.float32)
    np.testing.assert_allclose(exe.run(feeds)["y"], run_ort(model, feeds)[0], rtol=1e-5, atol=1e-6)
    assert exe.stats.recompiles == 0


def test_graph_outputs_and_shared_values_are_not_absorbed(runtime):
    # t0 is a graph output and t1 also feeds a ReduceSum outside the fusible group: neither may
    # disappear inside a fused kernel (t1's two uses inside the group share one value).
    nodes = [h.make_node("Exp", ["x"], ["t0"]), h.make_node("Neg", ["t0"], ["t1"]),
             h.make_node("Relu", ["t1"], ["a"]), h.make_node("Sigmoid", ["t1"], ["s"]),
             h.make_node("Add", ["a", "s"], ["y"]), h.make_node("ReduceSum", ["t1"], ["r"], keepdims=0)]
    model = make_model(nodes, [("x", np.float32, [3, 4])], ["y", "t0", "r"])
    compiled = compile_model(model, {})
    planned = [op.op_type for op in compiled.operations]
    assert planned.count("FusedElementwise") >= 1 and compiled.num_dispatches < 6, planned
    assert "t0" in compiled.tensors and "t1" in compiled.tensors
    _run(runtime, model, compiled, {"x": np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)})


def test_widening_cast_ends_a_float16_chain_unrounded(runtime):
    # Gemma's embedding scale: Mul in float16, then Cast to float32 for the norm. onnxruntime's CPU
    # provider has no float16 Mul: it multiplies in float32 and drops the Cast pair, so the product
    # reaches float32 unrounded. The fused chain does the same (f16 x f16 is exact in f32).
    nodes = [h.make_node("Mul", ["x", "c"], ["t"]), h.make_node("Cast", ["t"], ["y"], to=1)]
    model = make_model(nodes, [("x", np.float16, [64])], ["y"], {"c": np.array([5.66], np.float16)})
    compiled = compile_model(model, {})
    assert [op.op_type for op in compiled.operations] == ["FusedElementwise"]
    x = np.random.default_rng(4).standard_normal(64).astype(np.float16)
    ours = runtime.load_model(compiled).run({"x": x})["y"]
    ref = run_ort(model, {"x": x})[0]
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours, ref)
    assert np.any(ref != ref.astype(np.float16))  # rounding the product to float16 would differ


def test_chains_fuse_across_broadcasts(runtime):
    # x[b, s, h] * w[h] + y[b, 1, h] (a residual broadcast over the sequence), and a member whose
    # own output is smaller than the group's (Exp of a [b, 1, h] tensor, evaluated per output
    # element): elementwise ops commute with broadcasting, so the whole tree is one kernel.
    rng = np.random.default_rng(5)
    nodes = [h.make_node("Mul", ["x", "w"], ["t0"]), h.make_node("Add", ["t0", "y"], ["t1"]),
             h.make_node("Exp", ["y"], ["e"]), h.make_node("Mul", ["t1", "e"], ["t2"]),
             h.make_node("Tanh", ["t2"], ["z"])]
    model = make_model(nodes, [("x", np.float32, ["b", "s", 16]), ("y", np.float32, ["b", 1, 16])], ["z"],
                       {"w": rng.standard_normal(16).astype(np.float32)})
    compiled = compile_model(model, {"b": 2, "s": 5})
    assert [op.op_type for op in compiled.operations] == ["FusedElementwise"] and compiled.num_dispatches == 1
    exe = runtime.load_model(compiled)
    for b, s in ((2, 5), (3, 1), (1, 33)):
        exe.update_dimensions({"b": b, "s": s})
        feeds = {"x": rng.standard_normal((b, s, 16)).astype(np.float32),
                 "y": rng.standard_normal((b, 1, 16)).astype(np.float32)}
        np.testing.assert_allclose(exe.run(feeds)["z"], run_ort(model, feeds)[0], rtol=1e-5, atol=1e-6)
    assert exe.stats.recompiles == 0
