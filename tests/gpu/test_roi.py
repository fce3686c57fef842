"""RoiAlign and MaxRoiPool on the GPU against onnx.reference and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx.reference import ReferenceEvaluator

from onyxia.errors import ShapeInferenceError
from tests.builders.roi import max_roi_pool_model, roi_align_model
from tests.helpers import compile_model, make_model, run_onyxia, run_ort

RNG = np.random.default_rng(0)


def random_rois(rng, n: int, h: int, w: int, spread: float = 1.5) -> np.ndarray:
    """Boxes (x1, y1, x2, y2) around the image, some reaching outside it, some degenerate."""
    a = rng.uniform(-0.3, spread, (n, 2)) * [w, h]
    size = rng.uniform(0, spread, (n, 2)) * [w, h]
    size[rng.random(n) < 0.2] = 0.0
    return np.concatenate([a, a + size], axis=1).astype(np.float32)


@st.composite
def roi_align_cases(draw):
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    hw = (draw(st.integers(1, 12)), draw(st.integers(1, 12)))
    rois = draw(st.integers(1, 4))
    attrs = dict(mode=draw(st.sampled_from(["avg", "max"])),
                 coordinate_transformation_mode=draw(st.sampled_from(["half_pixel", "output_half_pixel"])),
                 sampling_ratio=draw(st.sampled_from([0, 0, 1, 2, 3])), output_height=draw(st.integers(1, 4)),
                 output_width=draw(st.integers(1, 4)), spatial_scale=draw(st.sampled_from([1.0, 0.5, 0.25, 2.0])))
    return (n, c, *hw), rois, attrs, draw(st.integers(0, 2**31))


@settings(max_examples=30, deadline=None)
@given(case=roi_align_cases())
def test_random_roi_aligns_match_the_reference(runtime, case):
    shape, num_rois, attrs, seed = case
    rng = np.random.default_rng(seed)
    model = roi_align_model(shape, num_rois, **attrs)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32),
             "rois": random_rois(rng, num_rois, shape[2], shape[3]) / np.float32(attrs["spatial_scale"]),
             "idx": rng.integers(0, shape[0], num_rois).astype(np.int64)}
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(run_onyxia(runtime, model, feeds)[0], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_an_adaptive_grid_too_large_for_one_lane_is_chunked(runtime, mode):
    """A 140 x 150 image and rois up to 40x its size: adaptive grids of up to ~6000 x 6000
    samples per bin. Only those near the image count (at most 285 x 305), split over LANES
    threads and two chunks per bin, combined by a second dispatch. onnxruntime is the oracle
    (onnx.reference would loop in Python over 36M samples)."""
    shape = [1, 2, 140, 150]
    rois = np.array([[0, 0, 149, 139], [-3000, -2000, 3000, 4000], [10.5, 20.25, 60, 61], [-10, 5, 150, 6]],
                    np.float32)
    model = roi_align_model(shape, 4, mode=mode, output_height=1, output_width=2)
    compiled = compile_model(model)
    assert [s.label for s in compiled.shaders] == [f"roi_align_{mode}", f"roi_align_{mode}_finish"]
    feeds = {"x": RNG.standard_normal(shape).astype(np.float32), "rois": rois, "idx": np.zeros(4, np.int64)}
    np.testing.assert_allclose(run_onyxia(runtime, model, feeds)[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-5)


def test_roi_align_with_symbolic_rois_and_image(runtime):
    model = roi_align_model(["n", 3, "h", "w"], "r", output_height=2, output_width=3, sampling_ratio=2)
    exe = runtime.load_model(compile_model(model, {"n": 2, "h": 8, "w": 9, "r": 3}))
    for dims in ({"n": 2, "h": 8, "w": 9, "r": 3}, {"n": 1, "h": 20, "w": 5, "r": 7}):
        exe.update_dimensions(dims)
        feeds = {"x": RNG.standard_normal((dims["n"], 3, dims["h"], dims["w"])).astype(np.float32),
                 "rois": random_rois(RNG, dims["r"], dims["h"], dims["w"]),
                 "idx": RNG.integers(0, dims["n"], dims["r"]).astype(np.int64)}
        np.testing.assert_allclose(exe.run(feeds)["y"], ReferenceEvaluator(model).run(None, feeds)[0], rtol=1e-4,
                                   atol=1e-5)
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("shape,pooled,scale", [([2, 3, 12, 14], [3, 4], 0.9), ([1, 2, 30, 7], [2, 2], 1.0),
                                                ([1, 1, 5, 5], [7, 6], 0.5)])
def test_max_roi_pool_matches_ort(runtime, shape, pooled, scale):
    rois = random_rois(RNG, 5, shape[2], shape[3]) / np.float32(scale)
    rois = np.concatenate([RNG.integers(0, shape[0], (5, 1)).astype(np.float32), rois], axis=1)
    model = max_roi_pool_model(shape, 5, pooled_shape=pooled, spatial_scale=scale)
    feeds = {"x": RNG.standard_normal(shape).astype(np.float32), "rois": rois}
    np.testing.assert_array_equal(run_onyxia(runtime, model, feeds)[0], run_ort(model, feeds)[0])


@pytest.mark.parametrize("build,feeds", [
    (lambda: roi_align_model([1, 2, 6, 7], 3, mode="max", sampling_ratio=0, output_height=2, output_width=2),
     ["x", "rois", "idx"]),
    (lambda: roi_align_model([2, 2, 6, 7], 3, opset=10, output_height=3, output_width=1, spatial_scale=0.5),
     ["x", "rois", "idx"]),
    (lambda: max_roi_pool_model([2, 2, 9, 8], 3, pooled_shape=[2, 3]), ["x", "rois"]),
])
def test_constant_roi_pools_fold_to_the_gpus_result(runtime, build, feeds):
    model = build()
    x_shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    boxes = random_rois(RNG, 3, x_shape[2], x_shape[3])
    batch = np.arange(3) % x_shape[0]
    values = {"x": RNG.standard_normal(x_shape).astype(np.float32), "idx": batch.astype(np.int64),
              "rois": boxes if "idx" in feeds else np.concatenate([batch[:, None].astype(np.float32), boxes], 1)}
    values = {k: values[k] for k in feeds}
    on_gpu = run_onyxia(runtime, model, values)[0]
    folded = make_model(model.graph.node, [], ["y"], values, opset=model.opset_import[0].version)
    assert not compile_model(folded).shaders
    on_host = run_onyxia(runtime, folded, {})[0]
    np.testing.assert_allclose(on_host, run_ort(model, values)[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(on_host, on_gpu, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model,match", [
    (roi_align_model([1, 2, 6, 7], 3, mode="sum"), r"node 'roi0' \(RoiAlign\): attribute 'mode' 'sum'"),
    (roi_align_model([1, 2, 6, 7], 3, sampling_ratio=-1), r"node 'roi0' \(RoiAlign\): attribute 'sampling_ratio'"),
    (roi_align_model([1, 2, 6, 7], 3, output_height=0), r"node 'roi0' \(RoiAlign\): attribute 'output_height'"),
    (roi_align_model([1, 2, 6, 7], 3, coordinate_transformation_mode="asymmetric"),
     r"node 'roi0' \(RoiAlign\): attribute 'coordinate_transformation_mode' 'asymmetric'"),
    (max_roi_pool_model([1, 2, 6, 7], 3, pooled_shape=[2]), r"node 'pool0' \(MaxRoiPool\): attribute 'pooled_shape'"),
])
def test_bad_roi_pools_are_errors_naming_node_and_attribute(model, match):
    with pytest.raises(ShapeInferenceError, match=match):
        compile_model(model)


