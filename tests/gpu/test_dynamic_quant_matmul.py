"""onyxia::DynamicQuantMatMul (passes/dynamic_quant_fusion.py) against onnxruntime running the chain
as written: DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul, as onnxruntime's quantize_dynamic
writes transformers.js' q8 decoders. Every step is exact arithmetic (the activation's range, its
rounding, an int32 product, two float multiplications), so the outputs must be equal bit for bit,
on both adapter kinds' kernels."""

from __future__ import annotations

import numpy as np
import pytest

from tests.builders.dynamic_quant import q8_model
from tests.helpers import compile_model, live_dispatches, run_ort

pytestmark = pytest.mark.gpu


def check(runtime, model, feeds_for, dims_list, adapters=("cpu", "gpu")):
    compiled = compile_model(model, dims_list[0])
    exe = runtime.load_model(compiled)
    for dims in dims_list:
        exe.update_dimensions(dims)
        feeds = feeds_for(dims)
        ref = run_ort(model, feeds)
        for kind in adapters:
            exe.assume_adapter(kind)
            ours = exe.run(feeds)
            for name, want in zip(compiled.outputs, ref):
                np.testing.assert_array_equal(ours[name], want, err_msg=f"{name} at {dims} on the {kind} kernels")


def feeds(k: int, *lead: str, scale: float = 1.0, seed: int = 1):
    def make(dims):
        rng = np.random.default_rng(seed + sum(dims.values()))
        return {"x": (rng.standard_normal([dims[d] for d in lead] + [k]) * scale).astype(np.float32)}
    return make


@pytest.mark.parametrize("wtype", ["int8", "uint8"])
@pytest.mark.parametrize("zp", ["tensor", "column", "none"])
def test_fused_chain_equals_onnxruntime(runtime, wtype, zp):
    """One row (each kernel reduces x's range itself) and several (a shared DynamicRange), two
    MatMuls on one activation, decode and prefill dims of one compiled plan."""
    model = q8_model(96, [64, 40], wtype, zp, ("m",))
    check(runtime, model, feeds(96, "m"), [{"m": 1}, {"m": 7}, {"m": 1}, {"m": 33}])


def test_one_matmul_three_dims_and_an_all_positive_activation(runtime):
    """A lone MatMul (its own range dispatch for several rows), x [b, s, K]; x > 0 (zero point 0)
    and x of one sign everywhere but zero."""
    model = q8_model(64, [12], "int8", "tensor", ("b", "s"))
    check(runtime, model, feeds(64, "b", "s"), [{"b": 1, "s": 1}, {"b": 2, "s": 5}])
    compiled = compile_model(model, {"b": 1, "s": 1})
    exe = runtime.load_model(compiled)
    x = np.abs(np.random.default_rng(3).standard_normal((1, 1, 64))).astype(np.float32)
    for value in (x, -x, np.zeros_like(x)):
        for kind in ("cpu", "gpu"):
            exe.assume_adapter(kind)
            np.testing.assert_array_equal(exe.run({"x": value})["y0"], run_ort(model, {"x": value})[0])


def test_long_k_stays_within_lavapipes_loop_cap(runtime):
    """K = 32768 (the fused kernels' bound): a thread's loop over K runs 32768 times, past half of
    lavapipe's ~65,535 iterations, and a row's range loop K / 8 more."""
    model = q8_model(32768, [8], "uint8", "column", ("m",))
    check(runtime, model, feeds(32768, "m", scale=3.0), [{"m": 1}, {"m": 4}])


def test_one_dispatch_per_matmul_for_one_row(runtime):
    """Three MatMuls on one activation: one dispatch each for one row; a shared range dispatch
    and one each for more; nothing of the chain as written is left."""
    model = q8_model(64, [32, 32, 16], "int8", "tensor", ("m",))
    compiled = compile_model(model, {"m": 1})
    for kind in ("cpu", "gpu"):
        one = [d.shader for d in live_dispatches(compiled, {"m": 1}, kind)]
        many = [d.shader for d in live_dispatches(compiled, {"m": 9}, kind)]
        labels = [compiled.shaders[i].label for i in one], [compiled.shaders[i].label for i in many]
        assert labels[0] == ["dynamic_quant_matmul"] * 3, (kind, labels)
        assert labels[1] == ["dynamic_range"] + ["dynamic_quant_matmul"] * 3, (kind, labels)


def test_elementwise_tail_runs_in_the_epilogue(runtime):
    """SiLU and a residual Add after the product: one dispatch for one row, onnxruntime's values
    (to its Sigmoid's float32 rounding)."""
    model = q8_model(64, [16], "int8", "tensor", ("m",), tail=True)
    compiled = compile_model(model, {"m": 1})
    for kind in ("cpu", "gpu"):
        assert [compiled.shaders[d.shader].label for d in live_dispatches(compiled, {"m": 1}, kind)] == \
            ["dynamic_quant_matmul"], kind
    exe = runtime.load_model(compiled)
    rng = np.random.default_rng(4)
    for m in (1, 6):
        exe.update_dimensions({"m": m})
        feeds = {"x": rng.standard_normal((m, 64)).astype(np.float32),
                 "r": rng.standard_normal((m, 16)).astype(np.float32)}
        ref = run_ort(model, feeds)[0]
        for kind in ("cpu", "gpu"):
            exe.assume_adapter(kind)
            np.testing.assert_allclose(exe.run(feeds)["t"], ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()),
                                       err_msg=f"m {m}, {kind} kernels")
