"""BatchNormalization, InstanceNormalization, GroupNormalization, MeanVarianceNormalization and
LpNormalization on the GPU against onnxruntime (and their folding)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

from tests.builders.normalization_extra import C, affine, bn_params, norm_model, randn
from tests.helpers import assert_matches_ort, compile_model, make_model, run_onyxia, run_ort


@pytest.mark.parametrize("x_shape,params,opset,attrs", [
    ([2, C, 5, 4], bn_params(C), 15, dict(epsilon=1e-3)),
    ([3, C], bn_params(C), 15, {}),
    ([2, C, 3, 2, 2], bn_params(C), 9, {}),
    ([2, C, 3], bn_params(C, 3), 7, dict(spatial=0)),  # per-activation parameters
])
def test_batchnorm_matches_ort(runtime, x_shape, params, opset, attrs):
    model = norm_model("BatchNormalization", x_shape, params, opset, **attrs)
    assert_matches_ort(runtime, model, {"x": randn(*x_shape, scale=2.0)}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,x_shape,params,opset,attrs", [
    ("InstanceNormalization", [2, C, 5, 7], affine(), 18, {}),
    ("InstanceNormalization", [2, C, 300], affine(), 18, dict(epsilon=1e-2)),
    ("InstanceNormalization", [1, C, 2, 3, 4], affine(), 18, {}),
    ("GroupNormalization", [2, C, 5, 4], affine(), 21, dict(num_groups=3)),
    ("GroupNormalization", [2, C, 5, 4], affine(), 21, dict(num_groups=6, epsilon=1e-3)),
    ("GroupNormalization", [2, C, 5, 4], affine(2), 18, dict(num_groups=2)),  # opset 18: per group
    ("MeanVarianceNormalization", [2, C, 5, 4], {}, 13, {}),
    ("MeanVarianceNormalization", [2, C, 5, 4], {}, 13, dict(axes=[1])),
    ("MeanVarianceNormalization", [2, C, 5, 4], {}, 13, dict(axes=[0, 2])),
    ("LpNormalization", [2, C, 5, 4], {}, 18, dict(axis=1, p=1)),
    ("LpNormalization", [2, C, 5, 4], {}, 18, {}),
    ("LpNormalization", [2, C, 5, 4], {}, 18, dict(axis=0)),
])
def test_moments_normalizations_match_ort(runtime, op, x_shape, params, opset, attrs):
    model = norm_model(op, x_shape, params, opset, **attrs)
    x = randn(*x_shape, scale=3.0, offset=20.0)  # |mean| >> std: the shifted sums stay accurate
    assert_matches_ort(runtime, model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_lp_normalization_of_zeros_is_zero(runtime):
    model = norm_model("LpNormalization", [3, 4], {}, axis=1)
    x = randn(3, 4)
    x[1] = 0.0
    assert_matches_ort(runtime, model, {"x": x})


@pytest.mark.parametrize("op,params,attrs", [
    ("BatchNormalization", bn_params(C), {}),
    ("InstanceNormalization", affine(), {}),
    ("GroupNormalization", affine(), dict(num_groups=2)),
])
def test_symbolic_batch_and_spatial_dims(runtime, op, params, attrs):
    model = norm_model(op, ["n", C, "h", "w"], params, 21, **attrs)
    exe = runtime.load_model(compile_model(model, {"n": 1, "h": 4, "w": 4}))
    for dims in ({"n": 1, "h": 4, "w": 4}, {"n": 3, "h": 9, "w": 30}, {"n": 2, "h": 1, "w": 3}):
        exe.update_dimensions(dims)
        x = randn(dims["n"], C, dims["h"], dims["w"], scale=2.0, offset=1.0)
        np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert exe.stats.recompiles == 0


def test_constant_normalizations_fold(runtime):
    x = randn(2, C, 3, 2)
    nodes = [h.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y0"]),
             h.make_node("InstanceNormalization", ["c", "s", "b"], ["y1"]),
             h.make_node("GroupNormalization", ["c", "s", "b"], ["y2"], num_groups=3),
             h.make_node("MeanVarianceNormalization", ["c"], ["y3"]),
             h.make_node("LpNormalization", ["c"], ["y4"], axis=1),
             h.make_node("Neg", ["x"], ["z"])]
    model = make_model(nodes, [("x", np.float32, [1])], ["y0", "y1", "y2", "y3", "y4", "z"],
                       {"c": x, **bn_params(C)}, opset=21)
    assert len(compile_model(model).shaders) == 1  # only Neg runs
    one = {"x": np.ones(1, np.float32)}
    for a, b in zip(run_onyxia(runtime, model, one), run_ort(model, one)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)




@pytest.mark.parametrize("cpu", [0, 1], ids=["gpu-kernel", "cpu-kernel"])
@pytest.mark.parametrize("op,params,attrs", [
    ("InstanceNormalization", affine(), {}),
    ("GroupNormalization", affine(), dict(num_groups=2)),
    ("MeanVarianceNormalization", {}, dict(axes=[0, 2])),
])
def test_moments_kernels_of_both_adapter_kinds(runtime, cpu, op, params, attrs):
    """Rows of 64+ or a symbolic count of elements run 8 threads a row on a CPU-type adapter
    (one SIMD batch), 256 elsewhere (assume_adapter): both against onnxruntime, symbolic rows
    short, long (70,000: three parts of the 8-thread rows' 32,768) and back."""
    model = norm_model(op, ["n", C, "hw"], params, 21, **attrs)
    exe = runtime.load_model(compile_model(model, {"n": 1, "hw": 100}))
    exe.assume_adapter("cpu" if cpu else "gpu")
    for dims in ({"n": 1, "hw": 100}, {"n": 2, "hw": 70_000}, {"n": 3, "hw": 9}):
        exe.update_dimensions(dims)
        x = randn(dims["n"], C, dims["hw"], scale=2.0, offset=5.0)
        np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4,
                                   err_msg=str(dims))
    assert exe.stats.recompiles == 0
