"""UpsampleConvPass: which nearest-2x Resize -> 3x3 Conv pairs run at the image's size, which stay
and why; the phase weights and PhaseInterleave's layout against onnx.reference running the pair
(tests/gpu/test_upsample_conv.py runs the plans against onnxruntime)."""

from __future__ import annotations

import numpy as np
import onnx.reference
import pytest
from onnx import helper

from onyxia.compiler.passes.upsample_conv import phase_weights
from onyxia.operators.conv.phases import interleave
from tests.builders.upsample_conv import upsample_conv_model
from tests.helpers import compile_with_default_passes, make_model


def _report(model, dims=None):
    pipeline, compiled = compile_with_default_passes(model, dims or {"n": 1, "h": 5, "w": 6})
    return pipeline.context.reports["upsample-conv"], compiled


def test_folds_the_resize_into_a_phase_conv():
    report, compiled = _report(upsample_conv_model())
    assert report.folded == {"conv": "up"}
    ops = [op.op_type for op in compiled.operations if op.steps]
    assert ops == ["Conv", "PhaseInterleave"], ops  # no Resize left


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 4, 5), (2, 1, 7), (1, 6, 1)])
def test_phase_weights_and_interleave_compute_the_pair(bias, shape):
    """Conv 2x2 (pads 1) with the phase weights, then the interleave, against onnx.reference
    running Resize -> Conv: every border row and column, odd and 1-pixel images."""
    n, h, w = shape
    model = upsample_conv_model(bias=bias)
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    x = np.random.default_rng(1).standard_normal((n, 3, h, w)).astype(np.float32)
    ref = onnx.reference.ReferenceEvaluator(model).run(None, {"x": x})[0]
    inits = {"w": phase_weights(weights["w"])}
    if bias:
        inits["b"] = np.tile(weights["b"], 4)
    phases = make_model([helper.make_node("Conv", ["x", *inits], ["z"], kernel_shape=[2, 2], pads=[1, 1, 1, 1])],
                        [("x", np.float32, [n, 3, h, w])], ["z"], inits, opset=17)
    z = onnx.reference.ReferenceEvaluator(phases).run(None, {"x": x})[0]
    assert z.shape == (n, 20, h + 1, w + 1)
    np.testing.assert_allclose(interleave(z), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("modes", [("half_pixel", "round_prefer_floor"), ("pytorch_half_pixel", "round_prefer_ceil"),
                                   ("asymmetric", "round_prefer_floor")])
def test_other_modes_that_map_to_half_the_index(modes):
    coord, nearest = modes
    model = upsample_conv_model(resize={"coordinate_transformation_mode": coord, "nearest_mode": nearest})
    assert _report(model)[0].folded == {"conv": "up"}


def test_leaves_alone_with_reasons():
    relu = helper.make_node("Relu", ["u"], ["r"])
    cases = {
        "not nearest": upsample_conv_model(resize={"mode": "linear"}),
        "do not map": upsample_conv_model(resize={"nearest_mode": "ceil"}),
        "half_pixel floor": upsample_conv_model(resize={"coordinate_transformation_mode": "half_pixel"}),
        "scales": upsample_conv_model(scales=(1, 1, 3, 3)),
        "one axis": upsample_conv_model(scales=(1, 1, 1, 2)),
        "stride": upsample_conv_model(conv={"strides": [2, 2]}),
        "pads": upsample_conv_model(conv={"pads": [0, 0, 0, 0]}),
        "group": upsample_conv_model(maps=6, channels=6, conv={"group": 2},
                                     weights=np.ones((6, 3, 3, 3), np.float32)),
        "kernel": upsample_conv_model(conv={"kernel_shape": [1, 1], "pads": [0, 0, 0, 0]},
                                      weights=np.ones((5, 3, 1, 1), np.float32)),
    }
    for what, model in cases.items():
        report, _ = _report(model)
        assert report.folded == {} and "conv" in report.skipped, what
    # another reader of the upsampled image keeps the Resize; the Conv still folds
    report, compiled = _report(upsample_conv_model(extra=[relu], outputs=("y", "r")))
    assert report.folded == {"conv": "up"}
    assert "Resize" in [op.op_type for op in compiled.operations if op.steps]
