"""EpilogueFusionPass: bias Add, activations, residual Add and SwiGLU after MatMulNBits run in the
product's epilogue, against onnxruntime, on both adapter kinds' kernels; fewer dispatches."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.builders.epilogue_fusion import MS, K, _nbits, pattern_model, swiglu_model
from tests.helpers import compile_with_default_passes, live_dispatches, make_model, run_ort

pytestmark = pytest.mark.gpu


def _compile(model, dims, epilogue=True):
    return compile_with_default_passes(model, dims, without=None if epilogue else "epilogue-fusion")


def _dispatches(compiled, dims, adapter: str) -> int:
    return len(live_dispatches(compiled, dims, adapter))


def _check(runtime, model, m: int):
    rng = np.random.default_rng(m)
    feeds = {i.name: rng.standard_normal((m, i.type.tensor_type.shape.dim[1].dim_value)).astype(np.float32)
             for i in model.graph.input}
    ref = run_ort(model, feeds)[0]
    pipeline, compiled = _compile(model, {"M": m})
    report = pipeline.context.reports["epilogue-fusion"]
    assert report.fused, report.skipped
    for cpu in (0, 1):
        kind = "cpu" if cpu else "gpu"
        assert _dispatches(compiled, {"M": m}, kind) < _dispatches(_compile(model, {"M": m}, epilogue=False)[1],
                                                                   {"M": m}, kind)
    exe = runtime.load_model(compiled)
    for cpu in (0, 1):  # both adapter kinds' kernels, whatever this adapter is
        exe.assume_adapter("cpu" if cpu else "gpu")
        ours = exe.run(feeds)["y"]
        np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()), err_msg=f"cpu={cpu}")


@pytest.mark.parametrize("pattern", ["bias", "relu", "sigmoid", "tanh", "gelu", "leaky", "silu", "bias_relu",
                                     "residual"])
@pytest.mark.parametrize("accuracy", [0, 4])
def test_epilogue_matches_onnxruntime(runtime, pattern, accuracy):
    _check(runtime, pattern_model(pattern, accuracy), m=3)


@pytest.mark.parametrize("m", [1, 7])
@pytest.mark.parametrize("accuracy", [0, 4])
def test_swiglu_runs_in_up_projection_epilogue(runtime, m, accuracy):
    _check(runtime, swiglu_model(accuracy), m)


def test_declines_with_reasons():
    rng = np.random.default_rng(0)
    inits: dict = {"col": rng.standard_normal((5, 1)).astype(np.float32)}
    nodes = [_nbits(rng, "two", "a", 0, inits), helper.make_node("Relu", ["two"], ["r1"]),
             helper.make_node("Sigmoid", ["two"], ["r2"]),
             _nbits(rng, "bcast", "a", 0, inits), helper.make_node("Add", ["bcast", "col"], ["r3"]),
             _nbits(rng, "reshape", "a", 0, inits), helper.make_node("Softmax", ["reshape"], ["r4"])]
    model = make_model(nodes, [("a", np.float32, [5, K])], ["r1", "r2", "r3", "r4"], inits, opset=20,
                       extra_opsets=MS)
    pipeline, _ = _compile(model, {})
    skipped = pipeline.context.reports["epilogue-fusion"].skipped
    assert "read by 2 nodes" in skipped["two"]
    assert "neither the product's shape" in skipped["bcast"]
    assert "not a fusible elementwise op" in skipped["reshape"]


def test_elementwise_fusion_says_why_a_producer_stays_apart():
    nodes = [helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Sigmoid", ["r"], ["s"]),
             helper.make_node("Exp", ["r"], ["e"]), helper.make_node("Mul", ["s", "e"], ["y"]),
             helper.make_node("Neg", ["y"], ["z"])]
    model = make_model(nodes, [("a", np.float32, [4, 8])], ["y", "z"], opset=20)
    pipeline, _ = _compile(model, {})
    report = pipeline.context.reports["elementwise-fusion"]
    assert any("is a graph output" in why for why in report.declined.values())
    assert report.fused  # Mul absorbed Sigmoid, Exp and Relu (read only inside the group)


