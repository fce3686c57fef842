"""Resize, Upsample, DepthToSpace and SpaceToDepth on the GPU against onnxruntime."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import helper as h

from tests.builders.image import COORDS, EMPTY, X, grid_model, resize_model, scales, sizes, space_model, stn_model
from tests.helpers import assert_matches_ort, compile_model, make_model, run_onyxia, run_ort

RNG = np.random.default_rng(0)


def feed(shape, dtype=np.float32):
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(0, 100, shape).astype(dtype)
    return (RNG.standard_normal(shape) * 10).astype(dtype)


@pytest.mark.parametrize("mode,coord", list(itertools.product(["nearest", "linear", "cubic"], COORDS)))
def test_resize_modes_and_coordinates_match_ort(runtime, mode, coord):
    # One upscale and one downscale per (mode, transformation), non-integer scales included.
    for s in (scales(1, 1, 2.0, 1.5), scales(1, 1, 0.6, 0.5)):
        model = resize_model(X, scales=s, roi=EMPTY, mode=mode, coordinate_transformation_mode=coord)
        assert_matches_ort(runtime, model, {"x": feed(X)}, rtol=1e-4, atol=1e-4)


def test_resize_ignores_a_runtime_roi_it_does_not_read(runtime):
    # roi as a graph input (not a constant) is fine unless tf_crop_and_resize reads it.
    node = h.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="linear")
    model = make_model([node], [("x", np.float32, X), ("roi", np.float32, [8])], ["y"], {"scales": scales(1, 1, 2, 2)},
                       opset=13)
    feeds = {"x": feed(X), "roi": np.zeros(8, np.float32)}
    np.testing.assert_allclose(run_onyxia(runtime, model, feeds)[0], run_ort(model, feeds)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest_modes_with_sizes(runtime, nearest_mode):
    model = resize_model(X, sizes=sizes(1, 2, 9, 13), opset=13, mode="nearest", nearest_mode=nearest_mode)
    assert_matches_ort(runtime, model, {"x": feed(X)})


@pytest.mark.parametrize("model", [
    resize_model(X, sizes=sizes(1, 2, 9, 4), opset=13, mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5),
    resize_model(X, sizes=sizes(1, 2, 9, 4), roi=scales(0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7), opset=13, mode="linear",
                 coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=10.0),
    resize_model(X, sizes=sizes(7, 3), opset=18, mode="linear", axes=[2, 3], keep_aspect_ratio_policy="not_larger"),
    resize_model(X, sizes=sizes(7, 3), opset=18, mode="nearest", axes=[2, 3], keep_aspect_ratio_policy="not_smaller"),
    resize_model(X, scales=scales(3.0, 0.5), opset=18, mode="cubic", axes=[3, -2]),
    resize_model([1, 2, 5, 6, 3], scales=scales(1, 1, 2, 0.5, 2), opset=18, mode="linear"),  # trilinear
    resize_model([3, 10], scales=scales(0.5, 1.3), opset=18, mode="linear"),  # a batch axis resized too
    resize_model(X, scales=scales(1, 1, 2, 3), opset=18, mode="nearest", dtype=np.uint8),
    resize_model(X, scales=scales(1, 1, 2, 0.6), opset=10, mode="nearest"),  # opset 10: asymmetric, truncate
    resize_model(X, scales=scales(1, 1, 2, 0.6), opset=10, mode="linear"),
    resize_model(X, scales=scales(1, 1, 1, 1), opset=13, mode="linear"),  # identity: a copy
], ids=lambda m: "-".join(f"{a.name}={h.get_attribute_value(a)}" for a in m.graph.node[0].attribute))
def test_resize_variants_match_ort(runtime, model):
    x_shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    dtype = np.uint8 if model.graph.input[0].type.tensor_type.elem_type == 2 else np.float32
    assert_matches_ort(runtime, model, {"x": feed(x_shape, dtype)}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["linear", "cubic", "nearest"])
@pytest.mark.parametrize("coord,roi", [("align_corners", None), ("pytorch_half_pixel", None),
                                       ("tf_crop_and_resize", scales(0, 0, 0.2, 0.1, 1, 1, 0.9, 0.8))])
def test_resize_divides_by_the_integer_size_where_a_scale_gives_a_fraction(runtime, mode, coord, roi):
    """0.6 x 7 = 4.2 output pixels, 4 of them: align_corners, pytorch_half_pixel and
    tf_crop_and_resize divide by the integer size (the spec's length_resized), as onnxruntime
    and PyTorch do. onnx.reference divides by the fraction, and so do its two
    *_downsample_scales_*_align_corners conformance cases (in the ledger for that reason)."""
    x_shape = [1, 2, 4, 7]
    model = resize_model(x_shape, scales=scales(1, 1, 0.3, 0.6), roi=roi if roi is not None else EMPTY, opset=19,
                         mode=mode, coordinate_transformation_mode=coord)
    assert_matches_ort(runtime, model, {"x": feed(x_shape)}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("kw", [dict(scales=scales(1, 1, 0.5, 0.6)), dict(scales=scales(1, 1, 0.3, 1.7)),
                                dict(sizes=sizes(1, 2, 3, 2), exclude_outside=1),
                                dict(sizes=sizes(1, 2, 2, 5), coordinate_transformation_mode="asymmetric")])
def test_resize_antialias_matches_ort(runtime, mode, kw):
    x_shape = [1, 2, 8, 9]
    model = resize_model(x_shape, opset=18, mode=mode, antialias=1, **kw)
    assert_matches_ort(runtime, model, {"x": feed(x_shape)}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("opset,attrs,inits", [
    (9, dict(mode="nearest"), {"s": scales(1, 1, 2, 3)}),
    (9, dict(mode="linear"), {"s": scales(1, 1, 1.5, 2)}),
    (7, dict(mode="linear", scales=[1.0, 1.0, 2.0, 1.5]), {}),
])
def test_upsample_matches_ort(runtime, opset, attrs, inits):
    node = h.make_node("Upsample", ["x", *inits], ["y"], **attrs)
    model = make_model([node], [("x", np.float32, X)], ["y"], inits, opset=opset)
    assert_matches_ort(runtime, model, {"x": feed(X)}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model", [
    resize_model(["n", 3, "h", "w"], scales=scales(1, 1, 2, 2), mode="nearest"),
    resize_model(["n", 3, "h", "w"], scales=scales(1, 1, 0.5, 1.5), mode="linear"),
    resize_model(["n", 3, "h", "w"], sizes=sizes(2, 3, 9, 4), mode="cubic", opset=13),  # scale from dims
])
def test_resize_symbolic_dims(runtime, model):
    exe = runtime.load_model(compile_model(model, {"n": 2, "h": 5, "w": 7}))
    for dims in ({"n": 2, "h": 5, "w": 7}, {"n": 2, "h": 8, "w": 3}, {"n": 2, "h": 11, "w": 12}):
        exe.update_dimensions(dims)
        x = feed((dims["n"], 3, dims["h"], dims["w"]))
        np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert exe.stats.recompiles == 0


def test_constant_resize_folds(runtime):
    x = feed(X)
    cases = [({"scales": scales(1, 1, 2, 1.5)}, dict(mode="linear")),
             ({"sizes": sizes(1, 2, 3, 8)}, dict(mode="cubic")),
             ({"scales": scales(1, 1, 0.6, 2)}, dict(mode="nearest", coordinate_transformation_mode="asymmetric"))]
    for inits, attrs in cases:
        inputs = ["c", "", "scales"] if "scales" in inits else ["c", "", "", "sizes"]
        nodes = [h.make_node("Resize", inputs, ["y"], **attrs), h.make_node("Neg", ["x"], ["z"])]
        model = make_model(nodes, [("x", np.float32, [1])], ["y", "z"], {"c": x, **inits}, opset=13)
        assert not any(s.label.startswith("image") for s in compile_model(model).shaders)
        one = {"x": np.ones(1, np.float32)}
        np.testing.assert_allclose(run_onyxia(runtime, model, one)[0], run_ort(model, one)[0], rtol=1e-4, atol=1e-4)


def grid_feed(x_shape, grid_shape):
    grid = (RNG.random(grid_shape) * 2.6 - 1.3).astype(np.float32)  # some points outside [-1, 1]
    grid.reshape(-1)[:4] = [-1.0, 1.0, 0.0, 0.5]  # the corners and a halfway case
    return {"x": feed(x_shape), "grid": grid}


@pytest.mark.parametrize("mode,rank", [("linear", 2), ("nearest", 2), ("cubic", 2), ("linear", 3), ("nearest", 3)])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_matches_ort(runtime, mode, rank, padding, align):
    x_shape, grid_shape = [2, 3, 5, 6, 4][:2 + rank], [2, 4, 3, 5][:1 + rank] + [rank]
    model = grid_model(x_shape, grid_shape, mode=mode, padding_mode=padding, align_corners=align)
    assert_matches_ort(runtime, model, grid_feed(x_shape, grid_shape), rtol=1e-4, atol=1e-4)


def test_grid_sample_opset16_names_and_symbolic_dims(runtime):
    model = grid_model(["n", 3, "h", "w"], ["n", "oh", "ow", 2], opset=16, mode="bicubic", padding_mode="border")
    exe = runtime.load_model(compile_model(model, {"n": 1, "h": 5, "w": 6, "oh": 3, "ow": 4}))
    for dims in ({"n": 1, "h": 5, "w": 6, "oh": 3, "ow": 4}, {"n": 2, "h": 9, "w": 3, "oh": 7, "ow": 2}):
        exe.update_dimensions(dims)
        feeds = grid_feed([dims["n"], 3, dims["h"], dims["w"]], [dims["n"], dims["oh"], dims["ow"], 2])
        np.testing.assert_allclose(exe.run(feeds)["y"], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)
    assert exe.stats.recompiles == 0


def test_grid_sample_1d_matches_reference(runtime):
    # onnxruntime samples 2-D and 3-D only: the oracle for 1-D is onnx's reference.
    from onnx.reference import ReferenceEvaluator

    for mode in ("linear", "cubic"):
        model = grid_model([2, 3, 7], [2, 5, 1], mode=mode, padding_mode="reflection")
        feeds = grid_feed([2, 3, 7], [2, 5, 1])
        np.testing.assert_allclose(run_onyxia(runtime, model, feeds)[0], ReferenceEvaluator(model).run(None, feeds)[0],
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rank", [2, 3])
@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_and_grid_sample_match_ort(runtime, rank, align):
    model = stn_model(rank, align)
    theta = (np.eye(rank, rank + 1) + RNG.standard_normal((2, rank, rank + 1)) * 0.3).astype(np.float32)
    feeds = {"x": feed([2, 3, 4, 5, 6][:2 + rank]), "theta": theta}
    assert_matches_ort(runtime, model, feeds, {"n": 2}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model,dims", [
    (space_model("DepthToSpace", ["n", 8, 3, "w"], blocksize=2, mode="DCR"), {"n": 2, "w": 5}),
    (space_model("DepthToSpace", ["n", 18, 2, 3], blocksize=3, mode="CRD"), {"n": 2}),
    (space_model("SpaceToDepth", ["n", 3, 4, "w"], blocksize=2), {"n": 2, "w": 6}),
])
def test_depth_space_match_ort(runtime, model, dims):
    shape = [d.dim_value or dims[d.dim_param] for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert_matches_ort(runtime, model, {"x": feed(shape)}, dims)


