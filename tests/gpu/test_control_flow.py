"""If, Loop and Scan on the GPU against onnxruntime: subgraphs reading the enclosing graph,
host branches and loops, scan slices at moving offsets, conditions and trip counts read back,
and a condition known at compile time folding the If into its taken branch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto as TP
from onnx import helper as h

from onyxia.errors import ShapeInferenceError, ValueRequiredError
from onyxia.plan import BranchStep, LoopStep, ReadSymbol
from tests.builders.control_flow import linear_attention_model
from tests.control_models import counting_loop, fibonacci_loop, if_model, scan_model, vi
from tests.helpers import compile_model, make_model, run_onyxia, run_ort

RNG = np.random.default_rng(3)


def f32(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def assert_close(ours, ref) -> None:
    assert len(ours) == len(ref)
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, a.shape, b.dtype, b.shape)
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=f"output {i}")


def runs_like_ort(exe, model, feeds_list) -> None:
    for feeds in feeds_list:
        out = exe.run(feeds)
        assert_close([out[n] for n in exe.model.outputs], run_ort(model, feeds))
    assert exe.stats.recompiles == 0


# ---- If ---------------------------------------------------------------------------------------

def test_if_on_a_device_condition_runs_the_arm_it_reads(runtime):
    model = if_model()
    compiled = compile_model(model)
    assert [type(s) for s in compiled.steps if isinstance(s, BranchStep)] == [BranchStep]
    exe = runtime.load_model(compiled)
    x, y = f32(3), f32(3)
    runs_like_ort(exe, model, [{"x": x, "y": y, "s": np.array([s], np.float32)} for s in (1, -1, 2, 0)])


def test_if_with_a_known_condition_is_its_taken_branch(runtime):
    x, y = f32(3), f32(3)
    for cond in (True, False):
        compiled = compile_model(if_model(cond))
        assert not any(isinstance(s, BranchStep) for s in compiled.steps)
        ops = {runtime.load_model(compiled).model.shaders[s.shader].label for s in compiled.steps
               if hasattr(s, "shader")}
        # The other arm is not compiled; the taken one is inlined (IfInliningPass), so fusion sees it.
        assert ops == ({"map_Add"} if cond else {"fused_Mul_Neg"})
        ours = run_onyxia(runtime, if_model(cond), {"x": x, "y": y})
        live = run_onyxia(runtime, if_model(), {"x": x, "y": y, "s": np.array([1 if cond else -1], np.float32)})
        assert_close(ours, live)
        assert_close(ours, run_ort(if_model(cond), {"x": x, "y": y}))


def test_if_arms_holding_ops_that_run_as_bodies(runtime):
    """DynamicQuantizeLinear and LRN run as bodies of other ops (FunctionExpansionPass): inside an
    If's arms too (as in Optimum's merged decoders, whose arms quantize their activations)."""
    quant = [h.make_node("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
             h.make_node("DequantizeLinear", ["q", "qs", "qz"], ["t"])]
    then = h.make_graph(quant, "then", [], [vi("t")])
    lrn = h.make_node("LRN", ["x4"], ["e4"], size=3)
    orelse = h.make_graph([h.make_node("Reshape", ["x", "shape"], ["x4"]), lrn,
                           h.make_node("Reshape", ["e4", "flat"], ["e"])], "else", [], [vi("e")])
    node = h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=orelse)
    model = make_model([h.make_node("Greater", ["s", "zero"], ["c"]), node],
                       [("x", np.float32, [12]), ("s", np.float32, [1])], ["y"],
                       {"zero": np.zeros(1, np.float32), "shape": np.array([1, 3, 2, 2], np.int64),
                        "flat": np.array([12], np.int64)})
    exe = runtime.load_model(compile_model(model))
    runs_like_ort(exe, model, [{"x": f32(12), "s": np.array([s], np.float32)} for s in (1, -1)])


def test_if_folds_when_the_taken_branch_is_constant(runtime):
    then = h.make_graph([h.make_node("Add", ["k", "k"], ["t"])], "then", [], [vi("t")])
    orelse = h.make_graph([h.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e")])
    model = make_model([h.make_node("If", ["c"], ["o"], then_branch=then, else_branch=orelse)],
                       [("x", np.float32, [2])], ["o"], {"c": np.array(True), "k": np.array([1.5, 2], np.float32)})
    compiled = compile_model(model)
    assert not compiled.steps  # folded: the output is a constant
    assert_close(run_onyxia(runtime, model, {"x": f32(2)}), run_ort(model, {"x": f32(2)}))


def test_nested_if_and_a_branch_of_an_unknown_condition_with_several_nodes(runtime):
    inner = h.make_node("If", ["c2"], ["r"], then_branch=h.make_graph([h.make_node("Sub", ["x", "y"], ["d"])], "t2",
                                                                     [], [vi("d")]),
                        else_branch=h.make_graph([h.make_node("Abs", ["x"], ["a"])], "e2", [], [vi("a")]))
    then = h.make_graph([h.make_node("Less", ["y", "x"], ["c2"]), inner, h.make_node("Sqrt", ["r"], ["q"])], "then",
                        [], [vi("q")])
    orelse = h.make_graph([h.make_node("Exp", ["y"], ["e"])], "else", [], [vi("e")])
    model = make_model([h.make_node("If", ["c"], ["o"], then_branch=then, else_branch=orelse)],
                       [("x", np.float32, [1]), ("y", np.float32, [1]), ("c", np.bool_, [])], ["o"])
    exe = runtime.load_model(compile_model(model))
    runs_like_ort(exe, model, [{"x": np.array([x], np.float32), "y": np.array([y], np.float32), "c": np.array(c)}
                               for x, y, c in ((3, 1, True), (1, 3, True), (1, 3, False))])


def test_if_arms_of_different_sizes_on_a_run_time_condition_run_either(runtime):
    then = h.make_graph([h.make_node("Identity", ["x"], ["t"])], "then", [], [vi("t")])
    orelse = h.make_graph([h.make_node("Concat", ["x", "x"], ["e"], axis=0)], "else", [], [vi("e")])
    model = make_model([h.make_node("If", ["c"], ["o"], then_branch=then, else_branch=orelse, name="pick")],
                       [("x", np.float32, [2]), ("c", np.bool_, [])], ["o"])
    exe = runtime.load_model(compile_model(model))  # o: [dd_pick_out0_0], 2 or 4 by the arm
    runs_like_ort(exe, model, [{"x": f32(2), "c": np.array(c)} for c in (True, False, True)])


def test_if_arms_of_different_ranks_on_a_run_time_condition_are_refused():
    then = h.make_graph([h.make_node("Identity", ["x"], ["t"])], "then", [], [vi("t")])
    orelse = h.make_graph([h.make_node("Unsqueeze", ["x", "zero"], ["e"])], "else", [], [vi("e")])
    model = make_model([h.make_node("If", ["c"], ["o"], then_branch=then, else_branch=orelse, name="pick")],
                       [("x", np.float32, [2]), ("c", np.bool_, [])], ["o"], {"zero": np.array([0], np.int64)})
    with pytest.raises(ShapeInferenceError, match="node 'pick' \\(If\\): output 0: then_branch gives float32\\[2\\], "
                                                  "else_branch float32\\[1, 2\\]; .*one dtype and rank"):
        compile_model(model)


# ---- Loop -------------------------------------------------------------------------------------

def test_loop_with_a_static_trip_count_syncs_nothing(runtime):
    model = counting_loop(m=5)
    compiled = compile_model(model)
    (loop,) = [s for s in compiled.steps if isinstance(s, LoopStep)]
    assert loop.trip_count == 5 and loop.cond is None and loop.first is None
    exe = runtime.load_model(compiled)
    assert not exe._device_syncs  # the iterations go into the run's one submission
    runs_like_ort(exe, model, [{"x": f32(3), "a0": f32(3)} for _ in range(2)])


def test_loop_with_a_fed_trip_count_and_scan_outputs(runtime):
    model = counting_loop(m_input=True)
    compiled = compile_model(model)
    assert [s.tensor for s in compiled.steps if isinstance(s, ReadSymbol)] == ["M"]
    exe = runtime.load_model(compiled)
    runs_like_ort(exe, model, [{"x": f32(3), "a0": f32(3), "M": np.array(m, np.int64)} for m in (3, 0, 9, 1)])


@pytest.mark.parametrize("limit", [-1.0, 4.0, 30.0, 1000.0])
def test_loop_until_a_device_condition_turns_false(runtime, limit):
    model = counting_loop(m=12, while_limit=limit)
    compiled = compile_model(model)
    (loop,) = [s for s in compiled.steps if isinstance(s, LoopStep)]
    assert loop.cond is not None and loop.iterations in compiled.data_symbols
    exe = runtime.load_model(compiled)
    runs_like_ort(exe, model, [{"x": f32(3), "a0": np.zeros(3, np.float32)}])


def test_loop_carried_values_that_swap(runtime):
    model = fibonacci_loop(7)
    feeds = {"a0": np.array([0, 1], np.float32), "b0": np.array([1, 1], np.float32)}
    assert_close(run_onyxia(runtime, model, feeds), run_ort(model, feeds))


def growing_loop(m: int | None, while_limit: float | None = None):
    """v = Concat(v, v * 2) each iteration (the carried value doubles in length), a running total
    of v as a scan output of one shape; M an initializer, or a fed input when `m` is None;
    `while_limit`: the body's condition is sum(v) < limit (computed on the device)."""
    nodes = [h.make_node("Mul", ["v", "two"], ["v2"]), h.make_node("Concat", ["v", "v2"], ["grown"], axis=0),
             h.make_node("ReduceSum", ["grown"], ["total"], keepdims=0)]
    if while_limit is None:
        nodes.append(h.make_node("Identity", ["c"], ["c2"]))
    else:
        nodes.append(h.make_node("Less", ["total", "limit"], ["c2"]))
    body = h.make_graph(nodes, "grow", [vi("i", TP.INT64, []), vi("c", TP.BOOL, []), vi("v", shape=["n"])],
                        [vi("c2", TP.BOOL, []), vi("grown"), vi("total")],
                        [h.make_tensor("two", TP.FLOAT, [], [2.0]),
                         h.make_tensor("limit", TP.FLOAT, [], [while_limit or 0.0])])
    inits = {} if m is None else {"M": np.array(m, np.int64)}
    inputs = [("v0", np.float32, ["k"])] + ([("M", np.int64, [])] if m is None else [])
    cond = ["cond"] if while_limit is not None else [""]
    if while_limit is not None:
        inits["cond"] = np.array(True)
    return make_model([h.make_node("Loop", ["M", *cond, "v0"], ["v", "totals"], body=body, name="grow")],
                      inputs, ["v", "totals"], inits)


@pytest.mark.parametrize("m", [1, 3])
def test_loop_carried_value_growing_each_iteration_is_unrolled(runtime, m):
    """A constant trip count: the Loop is unrolled (each iteration its own shapes), at two input
    lengths through one plan."""
    model = growing_loop(m)
    compiled = compile_model(model, {"k": 2})
    assert not [s for s in compiled.steps if isinstance(s, LoopStep)]
    exe = runtime.load_model(compiled)
    for k in (2, 5):
        exe.update_dimensions({"k": k})
        feeds = {"v0": f32(k)}
        out = exe.run(feeds)
        assert_close([out["v"], out["totals"]], run_ort(model, feeds))
        assert out["v"].shape == (k * 2**m,)


def test_loop_growing_with_a_fed_trip_count_specializes_per_count(runtime):
    import onyxia

    model = growing_loop(None)
    with pytest.raises(ValueRequiredError, match="node 'grow' \\(Loop\\) input 0: the trip count of a Loop that is "
                                                 "unrolled \\(loop-carried value 0 enters as float32\\[k\\] and "
                                                 "leaves the body as float32\\[2 \\* k\\]\\) \\('M'\\) must be "
                                                 "known at compile time"):
        compile_model(model, {"k": 2})
    sess = onyxia.InferenceSession(model.SerializeToString(), runtime=runtime)
    for m, k in [(2, 3), (2, 4), (4, 3)]:
        feeds = {"v0": f32(k), "M": np.array(m, np.int64)}
        assert_close(sess.run(None, feeds), run_ort(model, feeds))
    # one plan per trip count, each following the input length
    assert sess.stats.compiles == 2 and [r.symbol for r in sess.stats.recompiles] == ["M"]


def test_loop_growing_until_a_device_condition_is_refused_naming_the_node():
    with pytest.raises(ShapeInferenceError, match="node 'grow' \\(Loop\\): an unrolled Loop's condition must be "
                                                  "known at compile time \\(loop-carried value 0 enters as"):
        compile_model(growing_loop(6, while_limit=100.0), {"k": 2})


# ---- Scan -------------------------------------------------------------------------------------

@settings(max_examples=12, deadline=None)
@given(in_axis=st.sampled_from([0, 1]), reverse=st.sampled_from([0, 1]), out_axis=st.sampled_from([0, 1]),
       out_reverse=st.sampled_from([0, 1]), length=st.integers(1, 6))
def test_scan_matches_ort(runtime, in_axis, reverse, out_axis, out_reverse, length):
    model = scan_model(length, in_axis=in_axis, reverse=reverse, out_axis=out_axis, out_reverse=out_reverse)
    x = f32(length, 4) if in_axis == 0 else f32(4, length)
    feeds = {"s0": f32(4), "m0": f32(4), "x": x}
    assert_close(run_onyxia(runtime, model, feeds), run_ort(model, feeds))


def test_scan_over_a_symbolic_length_follows_update_dimensions(runtime):
    model = scan_model("t", reverse=1)
    compiled = compile_model(model, {"t": 4})
    exe = runtime.load_model(compiled)
    assert not exe._device_syncs
    for t in (4, 9, 1, 5):
        exe.update_dimensions({"t": t})
        runs_like_ort(exe, model, [{"s0": f32(4), "m0": f32(4), "x": f32(t, 4)}])
    exe.update_dimensions({"t": 0})  # onnxruntime and onnx.reference refuse an empty scan: the spec's
    feeds = {"s0": f32(4), "m0": f32(4), "x": f32(0, 4)}  # zero iterations keep the initial states
    out = exe.run(feeds)
    np.testing.assert_array_equal(out["s"], feeds["s0"])
    np.testing.assert_array_equal(out["m"], feeds["m0"])
    assert out["ys"].shape == (0, 4) and out["ms"].shape == (0, 4)


def test_scan_body_arity_errors_name_the_attribute():
    body = h.make_graph([h.make_node("Add", ["s", "xi"], ["s2"])], "b", [vi("s", shape=[4]), vi("xi", shape=[4])],
                        [vi("s2", shape=[4])])
    model = make_model([h.make_node("Scan", ["s0", "x"], ["s", "y"], body=body, num_scan_inputs=1, name="sc")],
                       [("s0", np.float32, [4]), ("x", np.float32, [3, 4])], ["s"])
    with pytest.raises(ShapeInferenceError, match="node 'sc' \\(Scan\\): attribute 'body'"):
        compile_model(model)


def test_scan_state_growing_each_iteration_is_refused_naming_the_node():
    body = h.make_graph([h.make_node("Concat", ["s", "xi"], ["s2"], axis=0)], "b",
                        [vi("s", shape=[4]), vi("xi", shape=[4])], [vi("s2")])
    model = make_model([h.make_node("Scan", ["s0", "x"], ["s"], body=body, num_scan_inputs=1, name="sc")],
                       [("s0", np.float32, [4]), ("x", np.float32, [3, 4])], ["s"])
    with pytest.raises(ShapeInferenceError, match="node 'sc' \\(Scan\\): state 0 enters as float32\\[4\\] and "
                                                  "leaves the body as float32\\[8\\]; onyxia keeps each state"):
        compile_model(model)


def gated_linear_attention_model():
    """Gated LinearAttention without past_state: the absent optional input precedes `decay`."""
    shapes = [("q", np.float32, [1, 3, 8]), ("k", np.float32, [1, 3, 8]), ("v", np.float32, [1, 3, 8]),
              ("decay", np.float32, [1, 3, 8])]
    node = h.make_node("LinearAttention", ["q", "k", "v", "", "decay"], ["y", "state"], q_num_heads=2,
                       kv_num_heads=2, update_rule="gated")
    return make_model([node], shapes, ["y", "state"], opset=27)


@pytest.mark.parametrize("build", [linear_attention_model, gated_linear_attention_model], ids=["linear", "gated"])
def test_linear_attention_runs_as_its_function_body_with_a_scan(runtime, build):
    """LinearAttention's ONNX function body scans the sequence (Scan): expanded, then planned as
    a LoopStep. onnxruntime has no kernel for it: onnx.reference is the oracle."""
    from onnx.reference import ReferenceEvaluator

    model = build()
    compiled = compile_model(model)
    assert any(isinstance(s, LoopStep) for s in compiled.steps)
    feeds = {n.name: f32(1, 3, 8) for n in model.graph.input}
    if "decay" in feeds:  # a log-space decay: negative
        feeds["decay"] = -np.abs(feeds["decay"])
    assert_close(run_onyxia(runtime, model, feeds), ReferenceEvaluator(model).run(None, feeds))


def test_subgraphs_reading_a_fused_chain_keep_its_intermediate(runtime):
    """A branch and a loop body read `b`, the middle of an elementwise chain the fusion pass
    merges: the implicit reads keep `b` materialized."""
    then = h.make_graph([h.make_node("Neg", ["b"], ["t"])], "then", [], [vi("t")])
    orelse = h.make_graph([h.make_node("Abs", ["b"], ["e"])], "else", [], [vi("e")])
    body = h.make_graph([h.make_node("Add", ["acc", "b"], ["acc2"]), h.make_node("Identity", ["c"], ["c2"])], "body",
                        [vi("i", TP.INT64, []), vi("c", TP.BOOL, []), vi("acc", shape=[4])],
                        [vi("c2", TP.BOOL, []), vi("acc2")])
    nodes = [h.make_node("Relu", ["x"], ["a"]), h.make_node("Sigmoid", ["a"], ["b"]), h.make_node("Exp", ["b"], ["c"]),
             h.make_node("If", ["cond"], ["o"], then_branch=then, else_branch=orelse),
             h.make_node("Loop", ["M", "", "x"], ["l"], body=body)]
    model = make_model(nodes, [("x", np.float32, [4]), ("cond", np.bool_, [])], ["c", "o", "l"],
                       {"M": np.array(3, np.int64)})
    exe = runtime.load_model(compile_model(model))
    runs_like_ort(exe, model, [{"x": f32(4), "cond": np.array(c)} for c in (True, False)])
