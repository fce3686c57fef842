"""MaxPool / AveragePool / LpPool and the global poolings on the GPU against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper as h

from tests.helpers import assert_matches_ort, compile_model, make_model, run_onyxia, run_ort

RNG = np.random.default_rng(0)


def pool_model(op: str, x_shape, outputs=("y",), dtype=np.float32, opset: int = 19, **attrs):
    node = h.make_node(op, ["x"], list(outputs), **attrs)
    return make_model([node], [("x", dtype, x_shape)], list(outputs), opset=opset)


def feed(shape, dtype=np.float32):
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    # Distinct values: MaxPool's indices are well defined.
    return RNG.permutation(np.prod(shape)).reshape(shape).astype(dtype) / 7.0


X4 = [2, 3, 7, 8]
POOL_CASES = [
    ("MaxPool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, dilations=[2, 1])),
    ("MaxPool", dict(kernel_shape=[2, 3], auto_pad="SAME_UPPER", strides=[2, 2])),
    ("MaxPool", dict(kernel_shape=[2, 3], auto_pad="SAME_LOWER", strides=[1, 2])),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 0, 1, 2], strides=[2, 2], count_include_pad=1, ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], auto_pad="SAME_LOWER", strides=[2, 2], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 2], dilations=[2, 2], auto_pad="VALID")),
    ("LpPool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], p=3)),
    ("LpPool", dict(kernel_shape=[2, 2])),
]


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


def unpool_model(with_shape: bool):
    """MaxPool then MaxUnpool; output_shape = Shape(x) (symbolic) or inferred from the window."""
    nodes = [h.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
             h.make_node("Shape", ["x"], ["s"]),
             h.make_node("MaxUnpool", ["p", "i", "s"] if with_shape else ["p", "i"], ["y"], kernel_shape=[2, 2],
                         strides=[2, 2])]
    return make_model(nodes, [("x", np.float32, ["n", 3, "h", "w"])], ["y"], opset=11)


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


def validation_models() -> list[tuple[object, dict[str, int]]]:
    """Small models covering every (shader, defs) variant of the pooling operators."""
    x = ["n", 3, 8, 8]
    models = [pool_model(op, x, **attrs) for op, attrs in POOL_CASES[::2]]
    models += [pool_model("MaxPool", x, outputs=("y", "i"), kernel_shape=[2, 2], storage_order=order)
               for order in (0, 1)]
    models += [pool_model("MaxPool", x, dtype=np.int8, kernel_shape=[2, 2]),
               pool_model("AveragePool", ["n", 3, 8], kernel_shape=[3], count_include_pad=1, pads=[1, 1])]
    models += [pool_model(op, x) for op in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")]
    return [(m, {"n": 2}) for m in models] + [(unpool_model(True), {"n": 2, "h": 5, "w": 4})]
