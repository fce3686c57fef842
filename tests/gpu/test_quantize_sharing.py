"""SharedQuantizationPass: MatMulNBits nodes (accuracy_level 4) reading one activation share one
int8 quantization (onyxia::QuantizeQ8), against onnxruntime, on both adapter kinds' kernels."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.helpers import compile_with_default_passes, live_dispatches, make_model, run_ort

pytestmark = pytest.mark.gpu
MS = {"com.microsoft": 1}
K = 128


def _nbits(rng, name: str, a: str, n: int, block: int, accuracy: int, inits: dict):
    blocks = K // block
    inits[f"{name}_w"] = rng.integers(0, 256, (n, blocks, block // 2), dtype=np.uint8)
    inits[f"{name}_s"] = rng.random(n * blocks).astype(np.float32) * 0.1 + 0.01
    inits[f"{name}_z"] = rng.integers(0, 256, (n * ((blocks + 1) // 2),), dtype=np.uint8)
    return helper.make_node("MatMulNBits", [a, f"{name}_w", f"{name}_s", f"{name}_z"], [name], name=name,
                            domain="com.microsoft", K=K, N=n, bits=4, block_size=block, accuracy_level=accuracy)




def shared_model():
    """q, k, v read `a` (one group); gate reads it with another block size, f32 reads it at
    accuracy_level 0; up and down read `h` = Relu(a), a group of two."""
    rng = np.random.default_rng(0)
    inits: dict = {}
    nodes = [_nbits(rng, "q", "a", 64, 32, 4, inits), _nbits(rng, "k", "a", 40, 32, 4, inits),
             _nbits(rng, "v", "a", 40, 32, 4, inits), _nbits(rng, "gate", "a", 24, 64, 4, inits),
             _nbits(rng, "f32", "a", 24, 32, 0, inits),
             helper.make_node("Relu", ["a"], ["h"]),
             _nbits(rng, "up", "h", 48, 32, 4, inits), _nbits(rng, "down", "h", 32, 32, 4, inits)]
    outs = ["q", "k", "v", "gate", "f32", "up", "down"]
    return make_model(nodes, [("a", np.float32, ["M", K])], outs, inits, extra_opsets=MS), outs


def _compile(model, dims, optimize=True):
    return compile_with_default_passes(model, dims, without=None if optimize else "quantize-sharing")


def _quantizers(compiled, dims) -> int:
    labels = [compiled.shaders[d.shader].label for d in live_dispatches(compiled, dims, "cpu")]
    return labels.count("quantize_q8_chunked")


def test_sharing_report_says_why():
    model, _ = shared_model()
    pipeline, compiled = _compile(model, {"M": 1})
    report = pipeline.context.reports["quantize-sharing"]
    assert report.shared == {"a": ["q", "k", "v"], "h": ["up", "down"]}
    assert "accuracy_level 0" in report.skipped["f32"]
    assert "the only int8 reader of 'a'" in report.skipped["gate"]
    # one quantization per group on a CPU-type adapter: 2 + gate's own, instead of 6
    dims = {"M": 1}
    assert _quantizers(compiled, dims) == 3
    assert _quantizers(_compile(model, {"M": 1}, optimize=False)[1], dims) == 6


@pytest.mark.parametrize("m", [1, 7])
def test_shared_quantization_matches_onnxruntime(runtime, m):
    model, outs = shared_model()
    a = np.random.default_rng(m).standard_normal((m, K)).astype(np.float32)
    a[0, :32] = 0.0  # an all-zero block
    ref = dict(zip(outs, run_ort(model, {"a": a})))
    exe = runtime.load_model(_compile(model, {"M": m})[1])
    for cpu in (0, 1):  # both adapter kinds' kernels, whatever this adapter is
        exe.assume_adapter("cpu" if cpu else "gpu")
        ours = exe.run({"a": a})
        for name in outs:
            np.testing.assert_allclose(ours[name], ref[name], rtol=1e-5, atol=1e-5 * float(np.abs(ref[name]).max()),
                                       err_msg=f"{name} cpu={cpu}")


def norm_model(bias: bool):
    """SkipSimplifiedLayerNormalization -> q, k (a group); its sum (a graph output) ->
    SimplifiedLayerNormalization -> lm (a lone reader): both norms quantize for their readers."""
    rng = np.random.default_rng(1)
    inits: dict = {"g1": rng.standard_normal(K).astype(np.float32), "g2": rng.standard_normal(K).astype(np.float32)}
    skip_inputs = ["x", "skip", "g1"]
    if bias:
        inits["b1"] = rng.standard_normal(K).astype(np.float32)
        skip_inputs.append("b1")
    nodes = [helper.make_node("SkipSimplifiedLayerNormalization", skip_inputs, ["y", "", "", "sum"],
                              domain="com.microsoft", epsilon=1e-6),
             _nbits(rng, "q", "y", 64, 32, 4, inits), _nbits(rng, "k", "y", 40, 32, 4, inits),
             helper.make_node("SimplifiedLayerNormalization", ["sum", "g2"], ["z"], epsilon=1e-5, axis=-1),
             _nbits(rng, "lm", "z", 48, 32, 4, inits)]
    outs = ["q", "k", "lm", "sum"]
    inputs = [("x", np.float32, [1, "M", K]), ("skip", np.float32, [1, "M", K])]
    return make_model(nodes, inputs, outs, inits, extra_opsets=MS), outs


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("m", [1, 9])
def test_norm_quantizes_its_output_as_onnxruntime(runtime, bias, m):
    model, outs = norm_model(bias)
    rng = np.random.default_rng(m)
    feeds = {"x": rng.standard_normal((1, m, K)).astype(np.float32),
             "skip": rng.standard_normal((1, m, K)).astype(np.float32)}
    ref = dict(zip(outs, run_ort(model, feeds)))
    pipeline, compiled = _compile(model, {"M": m})
    assert len(pipeline.context.reports["quantize-sharing"].fused_norms) == 2
    fused = len(live_dispatches(compiled, {"M": m}, "cpu"))
    unfused = _compile(model, {"M": m}, optimize=False)[1]
    assert fused < len(live_dispatches(unfused, {"M": m}, "cpu"))
    exe = runtime.load_model(compiled)
    for cpu in (0, 1):
        exe.assume_adapter("cpu" if cpu else "gpu")
        ours = exe.run(feeds)
        for name in outs:
            np.testing.assert_allclose(ours[name], ref[name], rtol=1e-5, atol=1e-5 * float(np.abs(ref[name]).max()),
                                       err_msg=f"{name} cpu={cpu}")


def validation_models() -> list:
    """(model, dims) for tests/gpu/test_shader_validation.py: QuantizeQ8, MatMulNBitsShared and
    RmsNormQ8 (with and without a skip's bias), decode and prefill rows."""
    return [(model, {"M": m}) for model in (shared_model()[0], norm_model(False)[0], norm_model(True)[0])
            for m in (1, 9)]
