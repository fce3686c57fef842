"""MatMul and Gemm against onnxruntime: every shape class, each kernel (tiled, decode, split-K),
symbolic M / K / N with dimension updates that switch kernels without recompiling."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper as h

from onyxia.runtime.null import null_executor
from onyxia.runtime.tuner import TuneSettings
from tests.builders.matmul import matmul_model
from tests.helpers import assert_matches_ort, compile_model, make_model, run_onyxia, run_ort

RNG = np.random.default_rng(0)


def rand(shape, dtype=np.float32):
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(-4, 5, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def kernels(compiled) -> list[str]:
    """The shaders planned (every alternative of a Select included)."""
    return [s.label.removeprefix("matmul/") for s in compiled.shaders]


def running(compiled) -> list[str]:
    """The kernels a GPU-type adapter runs with tuning off (the heuristic's choice)."""
    exe = null_executor(compiled, tuning=TuneSettings(enabled=False))
    return list(dict.fromkeys(exe.model.shaders[d.shader].label.removeprefix("matmul/")
                              for d in exe.dispatch_commands() if all(d.workgroups)))


# (A shape, B shape, kernels planned): 1-D operands, tile remainders, broadcast batch dims,
# the decode kernel with and without split-K.
STATIC_CASES = [
    ([7], [7], ["gemv"]),
    ([5], [5, 3], ["gemv"]),
    ([70, 6], [6], ["gemv"]),
    ([2, 3, 6], [6], ["gemv"]),  # y^T = b^T @ A^T: one row
    ([6], [2, 6, 3], ["gemv"]),
    ([1, 7], [7, 13], ["gemv"]),
    ([65, 33], [33, 17], ["gemm"]),
    ([130, 20], [20, 150], ["gemm"]),
    ([2, 1, 9, 6], [3, 6, 7], ["gemm"]),
    ([9, 6], [2, 6, 7], ["gemm"]),
    ([2, 3, 4, 5], [5, 6], ["gemm"]),  # the batch folds into M = 24
    ([3, 600], [600, 70], ["gemv", "splitk"]),
    ([2, 1, 513], [2, 513, 9], ["gemv", "splitk"]),
]


@pytest.mark.parametrize("a_shape,b_shape,expected", STATIC_CASES, ids=lambda v: str(v))
def test_matmul_static_shapes(runtime, a_shape, b_shape, expected):
    model = matmul_model(a_shape, b_shape)
    assert running(compile_model(model)) == expected
    assert_matches_ort(runtime, model, {"a": rand(a_shape), "b": rand(b_shape)}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("a_shape,b_shape", [([3, 5], [5, 4]), ([2, 20, 7], [7, 70]), ([1, 600], [600, 70])])
def test_matmul_integers(runtime, dtype, a_shape, b_shape):
    model = matmul_model(a_shape, b_shape, dtype)
    assert_matches_ort(runtime, model, {"a": rand(a_shape, dtype), "b": rand(b_shape, dtype)}, rtol=0, atol=0)


def test_matmul_uint32(runtime):
    model = matmul_model([3, 70, 5], [5, 4], np.uint32)
    feeds = {"a": RNG.integers(0, 9, (3, 70, 5)).astype(np.uint32), "b": RNG.integers(0, 9, (5, 4)).astype(np.uint32)}
    assert_matches_ort(runtime, model, feeds, rtol=0, atol=0)


@pytest.mark.parametrize("m", [2, 40])
def test_gemm_integers(runtime, m):
    """onnxruntime has no integer Gemm: onnx's reference evaluator is the oracle."""
    from onnx.reference import ReferenceEvaluator

    node = h.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=2.0, beta=3.0)
    model = make_model([node], [("a", np.int32, [m, 6]), ("b", np.int32, [5, 6]), ("c", np.int32, [5])], ["y"])
    feeds = {"a": rand((m, 6), np.int32), "b": rand((5, 6), np.int32), "c": rand((5,), np.int32)}
    ours = run_onyxia(runtime, model, feeds)[0]
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    assert ours.dtype == expected.dtype
    np.testing.assert_array_equal(ours, expected)


def test_static_symbol_is_baked(runtime):
    model = matmul_model(["seq", 40], [40, 30], weight=rand((40, 30)))
    compiled = compile_model(model, {"seq": 3}, static=["seq"])
    assert all(not s.immediates for s in compiled.shaders)
    exe = runtime.load_model(compiled)
    a = rand((3, 40))
    np.testing.assert_allclose(exe.run({"a": a})["y"], run_ort(model, {"a": a})[0], rtol=1e-5, atol=1e-5)


def test_symbolic_rows_switch_kernels_without_recompiling(runtime):
    """M = batch * seq is symbolic: prefill (tiled) and decode (split-K; on a CPU-type adapter
    the chunked kernel, one dispatch per row class) share one plan."""
    w = rand((600, 40))
    model = matmul_model(["batch", "seq", 600], [600, 40], weight=w)
    compiled = compile_model(model, {"batch": 2, "seq": 9})
    # the chunked kernel per row class (1, 4, 16, 32), then the Select's other alternatives in order:
    # coalesced (split-K), register (the chunked kernel's 32-row class again), shared
    assert kernels(compiled) == ["gemv_chunked"] * 4 + ["gemv", "splitk", "gemm"]
    exe = runtime.load_model(compiled)
    for dims in ({"batch": 2, "seq": 9}, {"batch": 1, "seq": 1}, {"batch": 3, "seq": 1}, {"batch": 1, "seq": 8},
                 {"batch": 1, "seq": 9}, {"batch": 2, "seq": 70}, {"batch": 1, "seq": 1}):
        exe.update_dimensions(dims)
        a = rand((dims["batch"], dims["seq"], 600))
        np.testing.assert_allclose(exe.run({"a": a})["y"], run_ort(model, {"a": a})[0], rtol=1e-4, atol=1e-4,
                                   err_msg=str(dims))
    assert exe.stats.recompiles == 0


def test_attention_like_symbolic_k_and_n(runtime):
    """scores = q @ k^T (N = past length), out = scores @ v (K = past length), decode and prefill."""
    scores = make_model([h.make_node("MatMul", ["q", "kt"], ["s"]), h.make_node("MatMul", ["s", "v"], ["y"])],
                        [("q", np.float32, [4, "seq", 16]), ("kt", np.float32, [4, 16, "past"]),
                         ("v", np.float32, [4, "past", 16])], ["y"])
    compiled = compile_model(scores, {"seq": 3, "past": 5})
    exe = runtime.load_model(compiled)
    for dims in ({"seq": 3, "past": 5}, {"seq": 1, "past": 300}, {"seq": 20, "past": 600}, {"seq": 1, "past": 1}):
        exe.update_dimensions(dims)
        feeds = {"q": rand((4, dims["seq"], 16)), "kt": rand((4, 16, dims["past"])), "v": rand((4, dims["past"], 16))}
        np.testing.assert_allclose(exe.run(feeds)["y"], run_ort(scores, feeds)[0], rtol=1e-4, atol=1e-4,
                                   err_msg=str(dims))
    assert exe.stats.recompiles == 0


GEMM_CASES = [
    # (M, K, N, transA, transB, C shape or None, alpha, beta, opset)
    (5, 7, 9, 0, 0, [9], 1.0, 1.0, 13),
    (70, 33, 65, 1, 0, [70, 65], 0.5, 2.0, 13),
    (70, 33, 65, 0, 1, [70, 1], 1.0, -1.0, 11),
    (40, 20, 30, 1, 1, [], 2.0, 0.5, 9),
    (1, 64, 48, 0, 1, [1, 48], 1.0, 1.0, 7),
    (1, 600, 48, 0, 1, [48], 0.25, 3.0, 13),
    (1, 600, 80, 0, 0, [1, 1], 1.0, 1.0, 13),
    (3, 8, 5, 0, 0, None, 1.5, 1.0, 13),
    (4, 6, 5, 1, 0, [4, 5], 1.0, 0.0, 7),
    (70, 33, 1, 0, 0, [70, 1], 1.0, 1.0, 13),  # one column: planned as y^T = b^T @ A^T
    (50, 300, 1, 0, 1, [1], 2.0, 1.0, 13),
]


@pytest.mark.parametrize("m,k,n,ta,tb,c_shape,alpha,beta,opset", GEMM_CASES, ids=lambda v: str(v))
def test_gemm(runtime, m, k, n, ta, tb, c_shape, alpha, beta, opset):
    a_shape = [k, m] if ta else [m, k]
    b_shape = [n, k] if tb else [k, n]
    inputs = [("a", np.float32, a_shape), ("b", np.float32, b_shape)]
    feeds = {"a": rand(a_shape), "b": rand(b_shape)}
    names = ["a", "b"]
    if c_shape is not None:
        inputs.append(("c", np.float32, c_shape))
        feeds["c"] = rand(c_shape)
        names.append("c")
    node = h.make_node("Gemm", names, ["y"], name="gemm", transA=ta, transB=tb, alpha=alpha, beta=beta)
    model = make_model([node], inputs, ["y"], opset=opset)
    assert_matches_ort(runtime, model, feeds, rtol=1e-4, atol=1e-4)


def test_gemm_symbolic_rows_with_weight_and_bias(runtime):
    """A torch Linear exported as Gemm(transB=1) with a symbolic batch: both kernels."""
    w, bias = rand((24, 300)), rand((24,))
    model = make_model([h.make_node("Gemm", ["x", "w", "bias"], ["y"], transB=1, alpha=0.5)],
                       [("x", np.float32, ["rows", 300])], ["y"], {"w": w, "bias": bias})
    exe = runtime.load_model(compile_model(model, {"rows": 1}))
    for rows in (1, 5, 33, 2):
        exe.update_dimensions({"rows": rows})
        x = rand((rows, 300))
        np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert exe.stats.recompiles == 0


def test_constant_operands_fold(runtime):
    a, b, c = rand((3, 4)), rand((5, 4)), rand((5,))
    model = make_model([h.make_node("Gemm", ["a", "b", "c"], ["g"], transB=1, beta=2.0),
                        h.make_node("MatMul", ["g", "w"], ["y0"]), h.make_node("Add", ["y0", "x"], ["y"])],
                       [("x", np.float32, [3, 2])], ["y"], {"a": a, "b": b, "c": c, "w": rand((5, 2))})
    compiled = compile_model(model)
    assert not any(s.label.startswith("matmul/") for s in compiled.shaders)
    assert_matches_ort(runtime, model, {"x": rand((3, 2))})


# Batch dims of up to 2 axes, each 1 or 2 (broadcasting), matrix dims around the tile sizes.
batch = st.lists(st.sampled_from([1, 2, 3]), max_size=2)
dim = st.sampled_from([1, 2, 3, 8, 9, 17, 64, 65])


@settings(max_examples=20, deadline=None)
@given(batch_a=batch, batch_b=batch, m=dim, k=st.sampled_from([1, 5, 16, 33, 300]), n=dim,
       vec_a=st.booleans(), vec_b=st.booleans())
def test_matmul_random_shapes(runtime, batch_a, batch_b, m, k, n, vec_a, vec_b):
    # Aligned batch dims that differ and are both not 1 cannot broadcast: make them agree.
    ra = batch_a[::-1]
    batch_b = [ra[i] if i < len(ra) and d != 1 and ra[i] != 1 else d for i, d in enumerate(batch_b[::-1])][::-1]
    a_shape = [k] if vec_a else [*batch_a, m, k]
    b_shape = [k] if vec_b else [*batch_b, k, n]
    model = matmul_model(a_shape, b_shape)
    assert_matches_ort(runtime, model, {"a": rand(a_shape), "b": rand(b_shape)}, rtol=1e-4, atol=1e-4)
