"""DeformConv on the GPU against onnxruntime (and onnx.reference for the folded values)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onyxia.errors import ShapeInferenceError
from tests.builders.deform_conv import deform_model
from tests.helpers import compile_model, make_model, run_onyxia, run_ort

RNG = np.random.default_rng(0)


def feeds_for(model, rng, offset_scale: float = 2.0) -> dict[str, np.ndarray]:
    feeds = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        scale = offset_scale if i.name == "off" else 1.0
        feeds[i.name] = (rng.standard_normal(shape) * scale).astype(np.float32)
    return feeds


@st.composite
def deform_cases(draw):
    group, offset_group = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    c = group * offset_group * draw(st.integers(1, 2))
    m = group * draw(st.integers(1, 3))
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride, pad, dilation = draw(st.integers(1, 2)), draw(st.integers(0, 2)), draw(st.integers(1, 2))
    x_shape = [draw(st.integers(1, 2)), c, *(draw(st.integers(max(4, (kk - 1) * dilation + 1), 9)) for kk in k)]
    return (x_shape, [m, c // group, *k], dict(group=group, offset_group=offset_group, stride=stride, pad=pad,
                                               dilation=dilation, bias=draw(st.booleans()), mask=draw(st.booleans())),
            draw(st.integers(0, 2**31)))


@settings(max_examples=30, deadline=None)
@given(case=deform_cases())
def test_random_deform_convs_match_ort(runtime, case):
    x_shape, w_shape, attrs, seed = case
    model = deform_model(x_shape, w_shape, **attrs)
    feeds = feeds_for(model, np.random.default_rng(seed))
    np.testing.assert_allclose(run_onyxia(runtime, model, feeds)[0], run_ort(model, feeds)[0], rtol=1e-4,
                               atol=1e-4)


def test_a_large_deform_conv_runs_the_tiled_product(runtime):
    model = deform_model([2, 16, 20, 24], [32, 16, 3, 3], pad=1, bias=True, mask=True)
    feeds = feeds_for(model, RNG)
    assert any(s.label.startswith("matmul/gemm") for s in compile_model(model).shaders)
    np.testing.assert_allclose(run_onyxia(runtime, model, feeds)[0], run_ort(model, feeds)[0], rtol=1e-4, atol=2e-4)


def test_symbolic_batch_and_image(runtime):
    model = deform_model(["n", 2, "h", "w"], [4, 2, 3, 3], pad=1, out=["h", "w"], bias=True)
    exe = runtime.load_model(compile_model(model, {"n": 1, "h": 5, "w": 6}))
    for dims in ({"n": 1, "h": 5, "w": 6}, {"n": 3, "h": 9, "w": 4}):
        exe.update_dimensions(dims)
        feeds = {"x": RNG.standard_normal((dims["n"], 2, dims["h"], dims["w"])).astype(np.float32),
                 "w": RNG.standard_normal((4, 2, 3, 3)).astype(np.float32),
                 "off": RNG.standard_normal((dims["n"], 18, dims["h"], dims["w"])).astype(np.float32),
                 "b": RNG.standard_normal(4).astype(np.float32)}
        np.testing.assert_allclose(exe.run(feeds)["y"], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("attrs", [dict(group=2, offset_group=2, bias=True, mask=True), dict(stride=2, dilation=2)])
def test_constant_deform_conv_folds_to_the_gpus_result(runtime, attrs):
    model = deform_model([1, 4, 7, 8], [4, 4 // attrs.get("group", 1), 3, 3], **attrs)
    feeds = feeds_for(model, RNG)
    on_gpu = run_onyxia(runtime, model, feeds)[0]
    folded = make_model(model.graph.node, [], ["y"], feeds, opset=19)
    assert not compile_model(folded).shaders
    on_host = run_onyxia(runtime, folded, {})[0]
    np.testing.assert_allclose(on_host, run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(on_host, on_gpu, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model,match", [
    (deform_model([1, 4, 7, 8], [4, 4, 3, 3], group=3), r"node 'deform0' \(DeformConv\): attribute 'group' 3"),
    (deform_model([1, 4, 7, 8], [4, 4, 3, 3], offset_group=3),
     r"node 'deform0' \(DeformConv\): attribute 'offset_group' 3"),
    (deform_model([1, 4, 7, 8], [4, 4, 3, 3], out=[5, 5]), r"node 'deform0' \(DeformConv\) input 2: offset must be"),
])
def test_bad_deform_convs_are_errors_naming_node_and_attribute(model, match):
    with pytest.raises(ShapeInferenceError, match=match):
        compile_model(model)


