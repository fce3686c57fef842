"""SharedQuantizationPass: MatMulNBits nodes (accuracy_level 4) reading one activation share one
int8 quantization (onyxia::QuantizeQ8), against onnxruntime, on both adapter kinds' kernels."""

from __future__ import annotations

import numpy as np
import pytest

from tests.builders.quantize_sharing import K, norm_model, shared_model
from tests.helpers import compile_with_default_passes, live_dispatches, run_ort

pytestmark = pytest.mark.gpu


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


