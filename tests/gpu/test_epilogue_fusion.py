"""EpilogueFusionPass: bias Add, activations, residual Add and SwiGLU after MatMulNBits run in the
product's epilogue, against onnxruntime, on both adapter kinds' kernels; fewer dispatches."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.helpers import compile_with_default_passes, live_dispatches, make_model, run_ort

pytestmark = pytest.mark.gpu
MS = {"com.microsoft": 1}
K, N = 64, 48


def _nbits(rng, name: str, a: str, accuracy: int, inits: dict):
    blocks = K // 32
    inits[f"{name}_w"] = rng.integers(0, 256, (N, blocks, 16), dtype=np.uint8)
    inits[f"{name}_s"] = rng.random(N * blocks).astype(np.float32) * 0.1 + 0.01
    inits[f"{name}_z"] = rng.integers(0, 256, (N * ((blocks + 1) // 2),), dtype=np.uint8)
    return helper.make_node("MatMulNBits", [a, f"{name}_w", f"{name}_s", f"{name}_z"], [name], name=name,
                            domain="com.microsoft", K=K, N=N, bits=4, block_size=32, accuracy_level=accuracy)


def _after(pattern: str, rng, inits: dict) -> list:
    """Nodes reading the product `p` and writing `y`."""
    inits["bias"] = rng.standard_normal(N).astype(np.float32)
    return {
        "bias": [helper.make_node("Add", ["p", "bias"], ["y"])],
        "relu": [helper.make_node("Relu", ["p"], ["y"])],
        "sigmoid": [helper.make_node("Sigmoid", ["p"], ["y"])],
        "tanh": [helper.make_node("Tanh", ["p"], ["y"])],
        "gelu": [helper.make_node("Gelu", ["p"], ["y"])],
        "leaky": [helper.make_node("LeakyRelu", ["p"], ["y"], alpha=0.2)],
        "silu": [helper.make_node("Sigmoid", ["p"], ["s"]), helper.make_node("Mul", ["p", "s"], ["y"])],
        "bias_relu": [helper.make_node("Add", ["p", "bias"], ["b"]), helper.make_node("Relu", ["b"], ["y"])],
        "residual": [helper.make_node("Add", ["r", "p"], ["y"])],
    }[pattern]


def pattern_model(pattern: str, accuracy: int):
    rng = np.random.default_rng(len(pattern))
    inits: dict = {}
    nodes = [_nbits(rng, "p", "a", accuracy, inits), *_after(pattern, rng, inits)]
    inputs = [("a", np.float32, ["M", K]), ("r", np.float32, ["M", N])]
    used = {t for nd in nodes for t in nd.input}
    return make_model(nodes, [i for i in inputs if i[0] in used], ["y"], inits, opset=20, extra_opsets=MS)


def swiglu_model(accuracy: int):
    """onnxruntime-genai's MLP: down(silu(gate(a)) * up(a))."""
    rng = np.random.default_rng(9)
    inits: dict = {}
    nodes = [_nbits(rng, "gate", "a", accuracy, inits), _nbits(rng, "up", "a", accuracy, inits),
             helper.make_node("Sigmoid", ["gate"], ["s"]), helper.make_node("Mul", ["gate", "s"], ["silu"]),
             helper.make_node("Mul", ["silu", "up"], ["y"])]
    return make_model(nodes, [("a", np.float32, ["M", K])], ["y"], inits, opset=20, extra_opsets=MS)


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


def validation_models() -> list:
    """(model, dims) for tests/gpu/test_shader_validation.py: MatMulNBitsShared with an epilogue,
    from f32 and int8 activations, decode and prefill rows."""
    return [(model, {"M": m}) for model in (swiglu_model(0), swiglu_model(4), pattern_model("residual", 4))
            for m in (1, 5)]
