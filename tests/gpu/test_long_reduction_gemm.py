"""GEMM-bound kernels past lavapipe's per-invocation loop cap (issue 12, root cause 1).

lavapipe stops one invocation's loops after ~65,535 iterations in all, silently. Products whose
reduction axis K is longer than that (MatMul, Gemm, Conv over many input channels) must split K
across invocations and add the partials in a second pass that also applies the epilogue (alpha,
beta * C, bias) once. Sized to run in seconds on lavapipe. Oracle: onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

from tests.helpers import assert_matches_ort, compile_model, make_model

pytestmark = pytest.mark.usefixtures("heuristic")  # the heuristic's choice is under test: no tuning

F = np.float32
LONG_K = 70_000  # one invocation walking all of K would loop past 65,535 times
RNG = np.random.default_rng(12)


def rand(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(F)


def labels(model) -> list[str]:
    return [s.label for s in compile_model(model).shaders]


@pytest.mark.parametrize("m,n", [(64, 64), (3, 40), (130, 20)])
def test_matmul_long_k(runtime, m, n):
    model = make_model([h.make_node("MatMul", ["a", "b"], ["y"])], [("a", F, [m, LONG_K]), ("b", F, [LONG_K, n])],
                       ["y"])
    assert "matmul/splitk" in labels(model)  # every kernel a product of these rows may take splits K
    assert_matches_ort(runtime, model, {"a": rand(m, LONG_K), "b": rand(LONG_K, n)}, rtol=1e-3, atol=2e-2)


def test_batched_matmul_long_k(runtime):
    model = make_model([h.make_node("MatMul", ["a", "b"], ["y"])], [("a", F, [2, 32, LONG_K]),
                                                                     ("b", F, [2, LONG_K, 16])], ["y"])
    assert_matches_ort(runtime, model, {"a": rand(2, 32, LONG_K), "b": rand(2, LONG_K, 16)}, rtol=1e-3, atol=2e-2)


@pytest.mark.parametrize("ta,tb,c_shape", [(0, 0, [64]), (1, 0, [64, 1]), (0, 1, [64, 64]), (1, 1, [])])
def test_gemm_long_k_with_bias(runtime, ta, tb, c_shape):
    m = n = 64
    a_shape = [LONG_K, m] if ta else [m, LONG_K]
    b_shape = [n, LONG_K] if tb else [LONG_K, n]
    node = h.make_node("Gemm", ["a", "b", "c"], ["y"], transA=ta, transB=tb, alpha=0.5, beta=2.0)
    model = make_model([node], [("a", F, a_shape), ("b", F, b_shape), ("c", F, c_shape)], ["y"])
    feeds = {"a": rand(*a_shape), "b": rand(*b_shape), "c": rand(*c_shape)}
    assert_matches_ort(runtime, model, feeds, rtol=1e-3, atol=2e-2)


@pytest.mark.parametrize("maps,group", [(16, 1), (4, 1), (32, 2)])
def test_conv_many_input_channels(runtime, maps, group):
    """8192 input channels x 3x3 taps: K = 73,728 products per output (per group: 36,864 x 2
    groups over 16,384 channels). Few output channels (4) take the direct kernel's place."""
    c = 8192 * group
    w, bias = rand(maps, c // group, 3, 3), rand(maps)
    node = h.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], group=group)
    model = make_model([node], [("x", F, [1, c, 5, 6])], ["y"], {"w": w, "b": bias})
    assert_matches_ort(runtime, model, {"x": rand(1, c, 5, 6)}, rtol=1e-3, atol=2e-2)


# ---- the many-rows variants, each forced on this adapter ---------------------------------------

def run_variant(runtime, model, feeds, cpu: int) -> list[np.ndarray]:

    compiled = compile_model(model)
    exe = runtime.load_model(compiled)
    if compiled.adapter_dependent:
        exe.assume_adapter("cpu" if cpu else "gpu")
    ran = {exe.model.shaders[d.shader].label for d in exe.dispatch_commands() if all(d.workgroups)}
    assert ("matmul/gemv_chunked" in ran) == bool(cpu and compiled.adapter_dependent), ran
    out = exe.run(feeds)
    return [out[name] for name in compiled.outputs]


@pytest.mark.parametrize("cpu", [1, 0])
@pytest.mark.parametrize("k", [68, LONG_K])
def test_many_rows_gemm_epilogue(runtime, cpu, k):
    """Gemm with C on 100 rows: the register-tiled variant (CPU) or the shared-memory one."""
    from tests.helpers import run_ort

    a, b, c = rand(100, k), rand(k, 72), rand(100, 1)
    model = make_model([h.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.5, beta=2.0)],
                       [("a", F, [100, k]), ("b", F, [k, 72]), ("c", F, [100, 1])], ["y"])
    feeds = {"a": a, "b": b, "c": c}
    np.testing.assert_allclose(run_variant(runtime, model, feeds, cpu)[0], run_ort(model, feeds)[0], rtol=1e-3,
                               atol=2e-2 if k == LONG_K else 1e-4)


@pytest.mark.parametrize("cpu", [1, 0])
@pytest.mark.parametrize("dtype", [F, np.float16])
def test_many_rows_batched_and_float16(runtime, cpu, dtype):
    from tests.helpers import run_ort

    model = make_model([h.make_node("MatMul", ["a", "b"], ["y"])], [("a", dtype, [2, 3, 70, 64]),
                                                                     ("b", dtype, [3, 64, 40])], ["y"])
    feeds = {"a": rand(2, 3, 70, 64).astype(dtype), "b": rand(3, 64, 40).astype(dtype)}
    tol = 1e-4 if dtype == F else 5e-2
    np.testing.assert_allclose(run_variant(runtime, model, feeds, cpu)[0].astype(F),
                               run_ort(model, feeds)[0].astype(F), rtol=tol, atol=tol)
