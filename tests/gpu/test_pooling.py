"""MaxPool / AveragePool / LpPool and the global poolings on the GPU against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper as h

from onyxia.operators.reduction import reduction
from tests.builders.pooling import POOL_CASES, X4, pool_model, unpool_model
from tests.helpers import assert_matches_ort, compile_model, make_model, run_onyxia, run_ort

RNG = np.random.default_rng(0)


def feed(shape, dtype=np.float32):
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    # Distinct values: MaxPool's indices are well defined.
    return RNG.permutation(np.prod(shape)).reshape(shape).astype(dtype) / 7.0


@pytest.mark.parametrize("op,attrs", POOL_CASES)
def test_pool_matches_ort(runtime, op, attrs):
    assert_matches_ort(runtime, pool_model(op, X4, **attrs), {"x": feed(X4)}, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(data=st.data(), op=st.sampled_from(["MaxPool", "AveragePool", "LpPool"]), rank=st.integers(1, 3))
def test_random_pools_match_ort(runtime, data, op, rank):
    kernel = [data.draw(st.integers(1, 3)) for _ in range(rank)]
    pads = [data.draw(st.integers(0, k - 1)) for k in kernel * 2]  # onnxruntime wants pads < kernel
    attrs = dict(kernel_shape=kernel, pads=pads, strides=[data.draw(st.integers(1, 3)) for _ in range(rank)])
    if op != "LpPool":
        attrs["ceil_mode"] = data.draw(st.integers(0, 1))
    if op == "AveragePool":
        attrs["count_include_pad"] = data.draw(st.integers(0, 1))
    if op == "MaxPool":
        attrs["dilations"] = [data.draw(st.integers(1, 2)) for _ in range(rank)]
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, attrs.get("dilations", [1] * rank))]
    shape = [2, 3] + [data.draw(st.integers(e, 7)) for e in extent]
    assert_matches_ort(runtime, pool_model(op, shape, **attrs), {"x": feed(shape)}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("x_shape,attrs", [
    ([2, 3, 7, 8], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])),
    ([2, 3, 7, 8], dict(kernel_shape=[3, 2], storage_order=1)),
    ([1, 2, 4, 5, 6], dict(kernel_shape=[2, 2, 2], storage_order=1)),
    ([1, 2, 4, 5, 6], dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2])),
    ([2, 3, 9], dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
])
def test_maxpool_indices_match_ort(runtime, x_shape, attrs):
    model = pool_model("MaxPool", x_shape, outputs=("y", "i"), opset=12, **attrs)
    assert_matches_ort(runtime, model, {"x": feed(x_shape)})


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_maxpool_integers(runtime, dtype):
    model = pool_model("MaxPool", X4, dtype=dtype, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    assert_matches_ort(runtime, model, {"x": feed(X4, dtype)})


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER", count_include_pad=1)),
    ("GlobalAveragePool", {}),
])
def test_symbolic_batch_and_spatial_dims(runtime, op, attrs):
    model = pool_model(op, ["n", 3, "h", "w"], **attrs)
    exe = runtime.load_model(compile_model(model, {"n": 1, "h": 8, "w": 8}))
    for dims in ({"n": 1, "h": 8, "w": 8}, {"n": 3, "h": 9, "w": 10}, {"n": 2, "h": 4, "w": 15}):
        exe.update_dimensions(dims)
        x = feed((dims["n"], 3, dims["h"], dims["w"]))
        np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("with_shape", [True, False])
def test_maxunpool_inverts_maxpool(runtime, with_shape):
    # Indices address the output (onnxruntime's reading, and MaxPool's: they index its input).
    model = unpool_model(with_shape)
    exe = runtime.load_model(compile_model(model, {"n": 1, "h": 6, "w": 8}))
    for dims in ({"n": 1, "h": 6, "w": 8}, {"n": 2, "h": 4 if not with_shape else 5, "w": 6}):
        exe.update_dimensions(dims)
        x = feed((dims["n"], 3, dims["h"], dims["w"]))
        np.testing.assert_array_equal(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0])
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("op,attrs,shape", [
    ("GlobalAveragePool", {}, [2, 3, 5, 6]),
    ("GlobalMaxPool", {}, [2, 3, 5, 6]),
    ("GlobalMaxPool", {}, [2, 3, 4, 3, 2]),
    ("GlobalLpPool", dict(p=3), [2, 3, 5, 6]),
    ("GlobalLpPool", {}, [2, 3, 17]),
])
def test_global_pool_matches_ort(runtime, op, attrs, shape):
    assert_matches_ort(runtime, pool_model(op, shape, **attrs), {"x": feed(shape)}, rtol=1e-5, atol=1e-5)


def test_constant_pools_fold(runtime):
    x = feed([1, 2, 5, 6])
    cases = [("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
             ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)),
             ("AveragePool", dict(kernel_shape=[2, 3], auto_pad="SAME_UPPER")),
             ("LpPool", dict(kernel_shape=[2, 2], p=3, pads=[0, 1, 0, 1]))]
    for op, attrs in cases:
        model = make_model([h.make_node(op, ["c"], ["y"], **attrs), h.make_node("Neg", ["x"], ["z"])],
                           [("x", np.float32, [1])], ["y", "z"], {"c": x}, opset=19)
        assert not any(s.label.startswith("pool") for s in compile_model(model).shaders)
        one = {"x": np.ones(1, np.float32)}
        np.testing.assert_allclose(run_onyxia(runtime, model, one)[0], run_ort(model, one)[0], rtol=1e-5, atol=1e-6)




# ---- CNN shapes and the global pools' walks ------------------------------------------------

CNN_SHAPES = [[2, 16, 48, 48], [2, 96, 12, 12], [2, 576, 3, 3], [1, 64, 112, 112], [1, 512, 7, 7]]


@pytest.mark.parametrize("shape", CNN_SHAPES, ids=str)
@pytest.mark.parametrize("op,attrs", [
    ("GlobalAveragePool", {}), ("GlobalMaxPool", {}), ("GlobalLpPool", {}),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
])
def test_cnn_shapes_match_ort(runtime, op, attrs, shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    assert_matches_ort(runtime, pool_model(op, shape, **attrs), {"x": x}, rtol=1e-5, atol=1e-5)


# Planes a thread walks alone, planes of 8 lanes, and one past lavapipe's loop cap (~65,535
# iterations per invocation): 300 x 300 is 3 parts of 8 lanes, 22 of one thread.
GLOBAL_DIMS = [(2, 576, 3, 3), (2, 96, 12, 12), (1, 64, 112, 112), (1, 2, 300, 300), (1, 512, 7, 7), (2, 3, 1, 1)]


@pytest.mark.parametrize("walk", ["cpu", "cpu rows only", "gpu"])
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
def test_global_pool_walks_follow_symbolic_dims(runtime, monkeypatch, op, walk):
    """Each alternative of the walk Select, run here whatever this adapter's kind, as N, C, H and
    W change: the same shaders (no recompile), the part count following the plane."""
    if walk == "cpu rows only":  # a thread per row for every plane: its parts too
        monkeypatch.setattr(reduction, "CPU_ROW_WALK", 1 << 40)
    model = pool_model(op, ["n", "c", "h", "w"])
    exe = runtime.load_model(compile_model(model, dict(zip("nchw", GLOBAL_DIMS[0]))))
    exe.assume_adapter(walk[:3])
    for dims in GLOBAL_DIMS:
        exe.update_dimensions(dict(zip("nchw", dims)))
        x = RNG.standard_normal(dims).astype(np.float32)
        np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "AveragePool", "MaxPool"])
def test_fp16_pools_match_float32(runtime, op):
    attrs = {} if op.startswith("Global") else dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    x = RNG.standard_normal([2, 96, 12, 12]).astype(np.float16)
    ours = run_onyxia(runtime, pool_model(op, x.shape, dtype=np.float16, **attrs), {"x": x})[0]
    assert ours.dtype == np.float16
    ref = run_ort(pool_model(op, x.shape, **attrs), {"x": x.astype(np.float32)})[0]
    np.testing.assert_allclose(ours.astype(np.float32), ref, rtol=2e-3, atol=2e-3)
