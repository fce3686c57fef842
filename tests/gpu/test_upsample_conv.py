"""A nearest-2x Resize -> 3x3 Conv compiled as a phase conv at the image's size plus
PhaseInterleave (compiler/passes/upsample_conv.py) against onnxruntime: both adapter kinds'
kernels, symbolic image sizes changed without a recompile, float16, and diffusers' VAE decoder
and UNet as exported."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.builders.families import FIXTURES, load_info
from tests.builders.upsample_conv import upsample_conv_model
from tests.helpers import compile_with_default_passes, run_ort

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("bias", [True, False])
def test_matches_onnxruntime_over_changing_sizes(runtime, bias):
    model = upsample_conv_model(maps=8, channels=4, bias=bias)
    first = {"n": 1, "h": 9, "w": 7}
    pipeline, compiled = compile_with_default_passes(model, first)
    assert pipeline.context.reports["upsample-conv"].folded == {"conv": "up"}
    exe = runtime.load_model(compiled)
    rng = np.random.default_rng(2)
    for dims in (first, {"n": 2, "h": 4, "w": 13}, {"n": 1, "h": 1, "w": 1}):
        exe.update_dimensions(dims)
        feeds = {"x": rng.standard_normal((dims["n"], 4, dims["h"], dims["w"])).astype(np.float32)}
        ref = run_ort(model, feeds)[0]
        for kind in ("gpu", "cpu"):
            exe.assume_adapter(kind)
            ours = exe.run(feeds)["y"]
            assert ours.shape == ref.shape
            np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()), err_msg=kind)
    assert exe.stats.recompiles == 0


def test_float16(runtime):
    model = upsample_conv_model(maps=8, channels=4, dtype=np.float16)
    dims = {"n": 1, "h": 6, "w": 5}
    pipeline, compiled = compile_with_default_passes(model, dims)
    assert pipeline.context.reports["upsample-conv"].folded == {"conv": "up"}
    feeds = {"x": np.random.default_rng(3).standard_normal((1, 4, 6, 5)).astype(np.float16)}
    ref = run_ort(model, feeds)[0].astype(np.float32)
    ours = runtime.load_model(compiled).run(feeds)["y"].astype(np.float32)
    # the phase weights sum up to three taps before rounding to f16, onnxruntime rounds each product's sum
    np.testing.assert_allclose(ours, ref, rtol=5e-3, atol=5e-3 * float(np.abs(ref).max()))


@pytest.mark.parametrize("name", ["vae_decoder_small", "unet2d_small"])
def test_diffusers_decoders_as_exported(runtime, name):
    """diffusers' AutoencoderKL decoder and UNet2DConditionModel (the committed reduced-width
    fixtures): their upsampler Convs fold, and each matches onnxruntime at both of its sizes."""
    info = load_info(FIXTURES / f"{name}.onnx")
    model, sizes = onnx.load(info.path), info.sizes
    pipeline, compiled = compile_with_default_passes(model, sizes[0])
    folded = pipeline.context.reports["upsample-conv"].folded
    assert folded and all("upsamplers" in conv for conv in folded), folded
    exe = runtime.load_model(compiled)
    for dims in sizes:
        exe.update_dimensions(dims)
        feeds = info.feeds(dims)
        ref = run_ort(model, feeds)[0]
        ours = exe.run(feeds)[model.graph.output[0].name]
        np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    assert exe.stats.recompiles == 0
