"""Kernels past lavapipe's per-invocation loop cap (issue 12, root cause 1).

lavapipe stops one invocation's loops after ~65,535 iterations in all, silently; kernels bound
their trip counts by construction (operators/base.py MAX_TRIPS) and split longer axes across
invocations. The "past the cap" cases are sized so that the old one-invocation-per-row kernels
would have looped more than 65,535 times (and returned wrong values); the others are the
smallest that make a kernel split (more than one part, several levels, ties across parts).
Oracles: onnxruntime, or onnx.reference where onnxruntime's own float32 accumulation drifts
over millions of elements (its ReduceLogSumExp over 16.8M elements is off by 3%).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

from tests.helpers import assert_matches_ort, compile_model, make_model, run_onyxia, run_ort

F, I64 = np.float32, np.int64
# One row longer than 256 lanes x 65,535 iterations: past the cap of the old reduce kernel.
PAST_CAP = 256 * 65_600
# Just over one part of a 256-lane reduction (256 x MAX_TRIPS = 1,048,576): two parts.
TWO_PARTS = 1_048_576 + 4_097


def reference(model, feeds):
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, feeds)


def assert_matches_reference(runtime, model, feeds, dims=None, rtol=1e-5, atol=1e-6):
    got = run_onyxia(runtime, model, feeds, dims)
    for ours, want in zip(got, reference(model, feeds)):
        assert ours.dtype == want.dtype and ours.shape == want.shape, (ours.shape, want.shape)
        np.testing.assert_allclose(ours, want, rtol=rtol, atol=atol)


def row_op(op: str, n: int, rows: int = 1, **attrs):
    axis_attrs = {"ArgMax": dict(axis=1, keepdims=0), "ArgMin": dict(axis=1, keepdims=0)}.get(op)
    if axis_attrs is not None:
        return make_model([h.make_node(op, ["x"], ["y"], **{**axis_attrs, **attrs})], [("x", F, [rows, n])], ["y"])
    return make_model([h.make_node(op, ["x", "axes"], ["y"], keepdims=0)], [("x", F, [rows, n])], ["y"],
                      {"axes": I64([1])})


@pytest.mark.parametrize("op", ["ReduceSum", "ArgMax"])
def test_rows_past_the_cap(runtime, op):
    x = np.random.default_rng(0).random((1, PAST_CAP), dtype=F)
    x[0, -3] = 2.0  # the maximum sits where a capped loop never gets
    assert_matches_reference(runtime, row_op(op, PAST_CAP), {"x": x}, rtol=1e-4)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceLogSumExp",
                                "ReduceSumSquare", "ReduceL1", "ReduceLogSum"])
def test_reductions_in_two_parts(runtime, op):
    x = np.random.default_rng(1).random((2, TWO_PARTS), dtype=F) + 0.5
    x[0, -1], x[1, 7] = 3.0, 0.1  # extremes in the second part of one row, the first of the other
    assert_matches_reference(runtime, row_op(op, TWO_PARTS, rows=2), {"x": x}, rtol=1e-4)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reductions_break_ties_across_parts(runtime, op, last):
    x = np.random.default_rng(2).random((2, TWO_PARTS), dtype=F) + 0.5
    best = 9.0 if op == "ArgMax" else -9.0
    x[0, [5, TWO_PARTS - 2]] = best  # a tie between the first and the second part
    x[1, [1_048_575, 1_048_576]] = best  # ... on both sides of the border
    x[1, 3] = np.nan if last else x[1, 3]  # NaN wins (the first one)
    assert_matches_reference(runtime, row_op(op, TWO_PARTS, rows=2, select_last_index=last), {"x": x})


def test_int64_sum_in_two_parts_reports_overflow(runtime):
    from onyxia.errors import ComputeError

    x = np.ones((1, TWO_PARTS), I64)
    model = make_model([h.make_node("ReduceSum", ["x"], ["y"], name="sum", keepdims=0)], [("x", I64, [1, TWO_PARTS])],
                       ["y"])  # no axes: every axis
    assert_matches_ort(runtime, model, {"x": x})
    x[0, :2] = 2**31 - 10  # each part fits, their sum does not
    x[0, -1] = 2**31 - 10
    with pytest.raises(ComputeError, match="node 'sum'"):
        run_onyxia(runtime, model, {"x": x})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceLogSumExp", "ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1])
def test_symbolic_walks_reduce_through_partials(runtime, op, axis):
    # A symbolic length may be anything: the walk always goes through partials. Rows and
    # columns (lanes along the walk, or across outputs).
    node = (h.make_node(op, ["x"], ["y"], axis=axis, keepdims=1) if op.startswith("Arg")
            else h.make_node(op, ["x", "axes"], ["y"], keepdims=1))
    model = make_model([node], [("x", F, ["a", "b"])], ["y"], {} if op.startswith("Arg") else {"axes": I64([axis])})
    exe = runtime.load_model(compile_model(model, {"a": 3, "b": 5}))
    rng = np.random.default_rng(3)
    for a, b in [(3, 5), (1, 700), (300, 2)]:
        x = rng.standard_normal((a, b)).astype(F)
        exe.update_dimensions({"a": a, "b": b})
        want = reference(model, {"x": x})[0]
        np.testing.assert_allclose(exe.run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)


# ---- row normalizations: Softmax, LogSoftmax, LayerNormalization, RMSNorm ---------------------

def norm_model(op: str, n, rows=1, x_shape=None):
    shape = x_shape or [rows, n]
    if op in ("Softmax", "LogSoftmax"):
        return make_model([h.make_node(op, ["x"], ["y"], axis=-1)], [("x", F, shape)], ["y"])
    scale = np.linspace(0.5, 1.5, n if isinstance(n, int) else 7).astype(F)
    if op == "LayerNormalization":
        return make_model([h.make_node(op, ["x", "s", "b"], ["y"], axis=-1)], [("x", F, shape)], ["y"],
                          {"s": scale, "b": scale[::-1].copy()})
    return make_model([h.make_node("RMSNormalization", ["x", "s"], ["y"], axis=-1)], [("x", F, shape)], ["y"],
                      {"s": scale}, opset=23)


def test_softmax_row_past_the_cap(runtime):
    # The old kernel walked the row twice per lane (statistics, outputs): 2 x 32,800 iterations.
    n = 256 * 32_800
    x = np.random.default_rng(4).standard_normal((1, n)).astype(F)
    x[0, -2] = 12.0  # the mass sits at the end of the row
    assert_matches_ort(runtime, norm_model("Softmax", n), {"x": x}, rtol=1e-3, atol=1e-9)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "LayerNormalization", "RMSNormalization"])
def test_row_normalizations_in_two_parts(runtime, op):
    x = np.random.default_rng(5).standard_normal((2, TWO_PARTS)).astype(F) * 3 + 1
    x[0, -1], x[1, 0] = 30.0, -30.0
    # float32 statistics over a million elements: onnxruntime's LayerNormalization is itself
    # 1.9e-4 from the float64 result here (onyxia's 1.1e-4)
    assert_matches_ort(runtime, norm_model(op, TWO_PARTS, rows=2), {"x": x}, rtol=2e-3, atol=5e-4)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_over_a_symbolic_axis(runtime, op):
    model = norm_model(op, None, x_shape=["a", "b"])
    exe = runtime.load_model(compile_model(model, {"a": 2, "b": 3}))
    rng = np.random.default_rng(6)
    for a, b in [(2, 3), (1, 900), (40, 1)]:
        x = rng.standard_normal((a, b)).astype(F)
        exe.update_dimensions({"a": a, "b": b})
        np.testing.assert_allclose(exe.run({"x": x})["y"], reference(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


# ---- TopK --------------------------------------------------------------------------------------

def topk_model(shape, k, axis=-1, largest=1, name="topk"):
    return make_model([h.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest, name=name)],
                      [("x", F, shape)], ["v", "i"], {"k": I64([k])})


def test_topk_over_a_vocabulary_past_the_cap(runtime):
    # k passes over 151,936 / 256 elements each: 128 x 594 iterations in the old kernel.
    logits = np.random.default_rng(7).standard_normal((1, 151_936)).astype(F)
    assert_matches_ort(runtime, topk_model([1, 151_936], 128), {"x": logits})


@pytest.mark.parametrize("shape, k, axis, largest", [
    ([2, 5000], 1024, 1, 1),      # the most candidates a segment keeps: levels halve the count
    ([4500, 3], 7, 0, 0),         # a strided line, smallest first
    ([3, 70_000], 3, -1, 1),      # three levels
])
def test_topk_long_lines_in_levels(runtime, shape, k, axis, largest):
    x = np.random.default_rng(8).integers(-40, 40, shape).astype(F)  # many ties, across segments
    assert_matches_ort(runtime, topk_model(shape, k, axis, largest), {"x": x})


def test_topk_too_many_selection_steps_is_refused_at_compile_time():
    from onyxia.errors import OnyxiaError

    with pytest.raises(OnyxiaError, match=r"node 'topk' \(TopK\).*k = 2000 over a line of 300000"):
        compile_model(topk_model([1, 300_000], 2000))


def test_topk_over_a_symbolic_line_reports_what_it_cannot_loop_over(runtime):
    from onyxia.errors import ComputeError

    model = topk_model([1, "n"], 300)
    exe = runtime.load_model(compile_model(model, {"n": 1000}))
    x = np.random.default_rng(9).standard_normal((1, 1000)).astype(F)
    for ours, want in zip(exe.run({"x": x}).values(), run_ort(model, {"x": x})):
        np.testing.assert_array_equal(ours, want)
    exe.update_dimensions({"n": 40_000})  # 300 x 157 steps
    with pytest.raises(ComputeError, match=r"node 'topk' \(TopK\): k x line length"):
        exe.run({"x": np.zeros((1, 40_000), F)})


# ---- attention split over the keys -----------------------------------------------------------

def sdpa_model(q_shape, kv_shape, **attrs):
    inputs = [("q", F, q_shape), ("k", F, kv_shape), ("v", F, kv_shape)]
    names = ["q", "k", "v"]
    if "mask" in attrs:
        mask = attrs.pop("mask")
        inputs.append(("m", F, list(mask)))
        names.append("m")
    return make_model([h.make_node("Attention", names, ["y"], **attrs)], inputs, ["y"], opset=23)


def test_attention_over_20000_keys(runtime):
    # One query row, head size 128: the old kernel looped 313 chunks x (128 + 2 x 64) times.
    rng = np.random.default_rng(10)
    t, d = 20_000, 128
    q = rng.standard_normal((1, 1, 1, d)).astype(F)
    k = rng.standard_normal((1, 1, t, d)).astype(F)
    v = rng.standard_normal((1, 1, t, d)).astype(F)
    k[0, 0, -1] = q[0, 0, 0] * 4  # the key that dominates sits at the very end
    assert_matches_ort(runtime, sdpa_model([1, 1, 1, d], [1, 1, t, d]), {"q": q, "k": k, "v": v},
                       rtol=1e-3, atol=1e-4)


def test_attention_splits_with_mask_and_causal_rows(runtime):
    # head 64: 7,232 keys per split, so 9,000 keys are two; rows of a causal block whose first
    # split holds all, some or none of their keys, and a mask hiding whole stretches.
    rng = np.random.default_rng(11)
    t, s, d = 9_000, 3, 64
    mask = np.zeros((s, t), F)
    mask[0, 7_000:] = -np.inf
    mask[1, :7_300] = -np.inf
    mask[2, :] = -np.inf  # no live key: zeros
    feeds = {"q": rng.standard_normal((1, 2, s, d)).astype(F), "k": rng.standard_normal((1, 2, t, d)).astype(F),
             "v": rng.standard_normal((1, 2, t, d)).astype(F), "m": mask}
    assert_matches_ort(runtime, sdpa_model([1, 2, s, d], [1, 2, t, d], mask=[s, t]), feeds, rtol=1e-4, atol=1e-5)
    causal = sdpa_model([1, 2, s, d], [1, 2, t, d], is_causal=1)
    feeds.pop("m")
    assert_matches_ort(runtime, causal, feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cpu", [0, 1], ids=["gpu-kernel", "cpu-kernel"])
def test_gqa_decode_over_a_cache_of_several_splits(runtime, cpu):
    from tests.builders.attention import KV_HEADS, Q_HEADS, gqa_model

    # head 16: the per-row kernels split at 4,672 keys (the 8-thread kernel's bound; a multiple of
    # 64): the 64-thread one (assume_adapter("gpu")) sees caches of 1, 2 and 13 splits. The tiled kernel
    # (assume_adapter("cpu")) splits at 61,440 keys: 60,001 keys are one walk of 15,001 loop trips.
    model = gqa_model(packed=False, batch=1, cache="P", rotary=False)
    exe = runtime.load_model(compile_model(model, {"S": 1, "P": 10}))
    exe.assume_adapter("cpu" if cpu else "gpu")
    rng = np.random.default_rng(12)
    for past in (10, 4_672, 60_000):  # 60,000: past the cap of the old one-workgroup-per-row kernel
        exe.update_dimensions({"S": 1, "P": past})
        f = {"q": rng.standard_normal((1, 1, Q_HEADS * 16)).astype(F),
             "k": rng.standard_normal((1, 1, KV_HEADS * 16)).astype(F),
             "v": rng.standard_normal((1, 1, KV_HEADS * 16)).astype(F),
             "pk": rng.standard_normal((1, KV_HEADS, past, 16)).astype(F),
             "pv": rng.standard_normal((1, KV_HEADS, past, 16)).astype(F),
             "sl": np.array([past], np.int32), "tl": np.array(past + 1, np.int32)}
        f["pk"][0, :, past // 2] = 2.0  # a key that matters in the middle
        np.testing.assert_allclose(exe.run(f)["o"], run_ort(model, f)[0], rtol=1e-4, atol=1e-5, err_msg=str(past))
    assert exe.stats.recompiles == 0


def test_gqa_decode_over_several_splits_with_a_large_head(runtime):
    from tests.builders.attention import KV_HEADS, Q_HEADS, gqa_model

    # head 160 (past the tiled kernel's 128): a CPU-type adapter runs the 8-thread per-row
    # kernel, 1,344 keys per split: caches of 1, 2 and 3 splits.
    d = 160
    model = gqa_model(packed=False, batch=1, cache="P", rotary=False, head=d)
    exe = runtime.load_model(compile_model(model, {"S": 1, "P": 10}))
    exe.assume_adapter("cpu")
    rng = np.random.default_rng(14)
    for past in (10, 1_344, 3_000):
        exe.update_dimensions({"S": 1, "P": past})
        f = {"q": rng.standard_normal((1, 1, Q_HEADS * d)).astype(F),
             "k": rng.standard_normal((1, 1, KV_HEADS * d)).astype(F),
             "v": rng.standard_normal((1, 1, KV_HEADS * d)).astype(F),
             "pk": rng.standard_normal((1, KV_HEADS, past, d)).astype(F),
             "pv": rng.standard_normal((1, KV_HEADS, past, d)).astype(F),
             "sl": np.array([past], np.int32), "tl": np.array(past + 1, np.int32)}
        f["pk"][0, :, past // 2] = 0.5  # a key that matters in the middle
        np.testing.assert_allclose(exe.run(f)["o"], run_ort(model, f)[0], rtol=1e-4, atol=1e-5, err_msg=str(past))
    assert exe.stats.recompiles == 0


@pytest.fixture(scope="module")
def runtime_without_subgroups(wgpu_adapter):
    import onyxia

    return onyxia.Runtime(wgpu_adapter, subgroups=False)


@pytest.mark.parametrize("kernel", ["tiled", "tiled-no-subgroups", "gpu-kernel"])
def test_gqa_prompt_after_a_long_prefix(runtime, runtime_without_subgroups, kernel):
    from tests.builders.attention import KV_HEADS, Q_HEADS, gqa_model

    # A prompt of 12 rows after 270,000 cached keys, head 16. The tiled prompt kernel (CPU-type
    # adapters; gqa_flash.wgsl) walks 4 keys per loop trip, so 61,440 keys per split: 270,012
    # keys are 5 splits, where one walk would loop 67,503 times. The 64-thread kernel takes its
    # own splits. One compiled plan, symbolic past.
    rt = runtime_without_subgroups if kernel == "tiled-no-subgroups" else runtime
    model = gqa_model(packed=False, batch=1, cache="P", rotary=False, softcap=4.0)
    exe = rt.load_model(compile_model(model, {"S": 12, "P": 10}))
    exe.assume_adapter("cpu" if int(kernel != "gpu-kernel") else "gpu")
    rng = np.random.default_rng(13)
    for past in (1_000, 270_000):
        exe.update_dimensions({"S": 12, "P": past})
        f = {"q": rng.standard_normal((1, 12, Q_HEADS * 16)).astype(F),
             "k": rng.standard_normal((1, 12, KV_HEADS * 16)).astype(F),
             "v": rng.standard_normal((1, 12, KV_HEADS * 16)).astype(F),
             "pk": rng.standard_normal((1, KV_HEADS, past, 16)).astype(F),
             "pv": rng.standard_normal((1, KV_HEADS, past, 16)).astype(F),
             "sl": np.array([past + 11], np.int32), "tl": np.array(past + 12, np.int32)}
        f["pk"][0, :, 7] = 2.0  # keys that matter at the start and in the middle
        f["pk"][0, :, past // 2] = -2.0
        np.testing.assert_allclose(exe.run(f)["o"], run_ort(model, f)[0], rtol=1e-4, atol=1e-5, err_msg=str(past))
    assert exe.stats.recompiles == 0


# ---- Scatter reductions over many updates ------------------------------------------------------

def scatter_model(op: str, n, reduction: str = "add", name: str = "scatter"):
    if op == "ScatterElements":
        return make_model([h.make_node(op, ["d", "i", "u"], ["y"], axis=0, reduction=reduction, name=name)],
                          [("d", F, [4]), ("i", I64, [n]), ("u", F, [n])], ["y"])
    return make_model([h.make_node(op, ["d", "i", "u"], ["y"], reduction=reduction, name=name)],
                      [("d", F, [4]), ("i", I64, [n, 1]), ("u", F, [n])], ["y"])


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
@pytest.mark.parametrize("reduction", ["add", "max"])
def test_scatter_reductions_past_the_cap(runtime, op, reduction):
    # 70,000 updates into 4 slots, applied in order by one thread per slot in the old kernel.
    n = 70_000
    rng = np.random.default_rng(13)
    idx = rng.integers(0, 2, n)  # slot 0 and 1 only
    idx[-1] = 3
    feeds = {"d": np.zeros(4, F), "i": idx if op == "ScatterElements" else idx.reshape(n, 1),
             "u": rng.random(n, dtype=F)}
    assert_matches_ort(runtime, scatter_model(op, n, reduction), feeds, rtol=1e-4)


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_scatter_reduction_over_a_symbolic_count_reports_past_its_passes(runtime, op):
    from onyxia.errors import ComputeError

    model = scatter_model(op, "n")
    exe = runtime.load_model(compile_model(model, {"n": 5}))  # one pass: up to 8,192 updates
    for n in (5, 8_192):
        exe.update_dimensions({"n": n})
        idx = np.arange(n) % 4
        feeds = {"d": np.ones(4, F), "i": idx if op == "ScatterElements" else idx.reshape(n, 1),
                 "u": np.ones(n, F)}
        np.testing.assert_array_equal(exe.run(feeds)["y"], run_ort(model, feeds)[0])
    exe.update_dimensions({"n": 8_193})
    idx = np.zeros(8_193, I64)
    feeds = {"d": np.ones(4, F), "i": idx if op == "ScatterElements" else idx.reshape(-1, 1), "u": np.ones(8_193, F)}
    with pytest.raises(ComputeError, match=rf"node 'scatter' \({op}\): .*more updates than the 8192"):
        exe.run(feeds)


# ---- CumSum --------------------------------------------------------------------------------------

def cumsum_model(shape, axis=1, **attrs):
    return make_model([h.make_node("CumSum", ["x", "a"], ["y"], name="cumsum", **attrs)], [("x", F, shape)], ["y"],
                      {"a": I64(axis)})


def test_cumsum_row_past_the_cap(runtime):
    # The old kernel: 2,000,000 / 256 chunks x (1 + 8 scan steps) iterations per lane.
    x = np.random.default_rng(14).integers(-3, 4, (1, 2_000_000)).astype(F)  # exact sums
    assert_matches_ort(runtime, cumsum_model([1, 2_000_000]), {"x": x}, rtol=0, atol=0)


@pytest.mark.parametrize("attrs", [dict(), dict(reverse=1), dict(exclusive=1), dict(reverse=1, exclusive=1)])
def test_cumsum_in_parts(runtime, attrs):
    x = np.random.default_rng(15).integers(-3, 4, (2, 530_000)).astype(F)  # three parts of 262,144 per row
    assert_matches_ort(runtime, cumsum_model([2, 530_000], **attrs), {"x": x}, rtol=0, atol=0)


def test_cumsum_over_a_symbolic_axis(runtime):
    model = cumsum_model(["a", "b"], axis=1, exclusive=1)
    exe = runtime.load_model(compile_model(model, {"a": 3, "b": 4}))
    rng = np.random.default_rng(16)
    for a, b in [(3, 4), (1, 300_000), (5, 1)]:
        x = rng.integers(-3, 4, (a, b)).astype(F)
        exe.update_dimensions({"a": a, "b": b})
        np.testing.assert_array_equal(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0])


# ---- normalizations by statistics over strided walks (moments.wgsl) ------------------------------

def test_instance_norm_over_a_long_image_in_parts(runtime):
    x = np.random.default_rng(17).standard_normal((1, 2, 1100, 1000)).astype(F) * 2 + 3  # 1.1M per channel
    model = make_model([h.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])], [("x", F, [1, 2, 1100, 1000])],
                       ["y"], {"s": F([0.5, 2.0]), "b": F([1.0, -1.0])})
    assert_matches_ort(runtime, model, {"x": x}, rtol=1e-3, atol=5e-4)


def test_lp_normalization_along_a_long_strided_axis_past_the_cap(runtime):
    # axis 0 of [270000, 32]: 8 lanes per column, which the old kernel walked twice (sums,
    # outputs): 2 x 33,750 iterations. Now parts of 32,768.
    x = np.random.default_rng(18).standard_normal((270_000, 32)).astype(F)
    model = make_model([h.make_node("LpNormalization", ["x"], ["y"], axis=0, p=2)], [("x", F, [270_000, 32])], ["y"])
    assert_matches_ort(runtime, model, {"x": x}, rtol=1e-3, atol=1e-7)


def test_group_norm_over_symbolic_sizes(runtime):
    model = make_model([h.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)],
                       [("x", F, [1, 4, "hw"])], ["y"], {"s": F([1, 2, 3, 4]), "b": F([0, 1, 0, 1])}, opset=21)
    exe = runtime.load_model(compile_model(model, {"hw": 5}))
    rng = np.random.default_rng(19)
    for hw in (5, 300, 1):
        x = rng.standard_normal((1, 4, hw)).astype(F)
        exe.update_dimensions({"hw": hw})
        np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


# ---- Hardmax -------------------------------------------------------------------------------------

def test_hardmax_over_a_symbolic_strided_axis(runtime):
    # A symbolic line takes the long-line path: ArgMax (proven past the cap above), then one
    # thread per element.
    model = make_model([h.make_node("Hardmax", ["x"], ["y"], axis=1)], [("x", F, [2, "n", 3])], ["y"])
    exe = runtime.load_model(compile_model(model, {"n": 4}))
    rng = np.random.default_rng(21)
    for n in (4, 1, 500):
        x = rng.integers(0, 5, (2, n, 3)).astype(F)  # ties: the first maximum wins
        exe.update_dimensions({"n": n})
        np.testing.assert_array_equal(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0])


# ---- Einsum (the generic one-thread-per-output kernel) ---------------------------------------------

def einsum_model(equation, shapes, dtype=F):
    names = [f"x{i}" for i in range(len(shapes))]
    return make_model([h.make_node("Einsum", names, ["y"], equation=equation)],
                      [(n, dtype, s) for n, s in zip(names, shapes)], ["y"], opset=12)


def test_einsum_sum_past_the_cap(runtime):
    n = 70_000  # three operands: the generic kernel, one thread summing 70,000 terms before
    rng = np.random.default_rng(22)
    feeds = {f"x{i}": rng.integers(-2, 3, (2, n)).astype(F) for i in range(3)}  # exact sums
    assert_matches_ort(runtime, einsum_model("bi,bi,bi->b", [[2, n]] * 3), feeds, rtol=0, atol=0)


def test_einsum_int64_sum_over_a_symbolic_length(runtime):
    model = einsum_model("i,i,i->", [["n"]] * 3, I64)
    exe = runtime.load_model(compile_model(model, {"n": 3}))
    rng = np.random.default_rng(23)
    for n in (3, 9_000):
        feeds = {f"x{i}": rng.integers(-5, 6, n).astype(I64) for i in range(3)}
        exe.update_dimensions({"n": n})
        np.testing.assert_array_equal(exe.run(feeds)["y"], run_ort(model, feeds)[0])
