"""Conv and ConvTranspose on the GPU against onnxruntime; a small CNN end to end."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper as h

from tests.builders.conv import causal_model, conv_model, randn
from tests.helpers import assert_matches_ort, compile_model, make_model, run_onyxia, run_ort


def check(runtime, model, x_shape, dims=None, tol=1e-4):
    x = randn(*[d if isinstance(d, int) else dims[d] for d in x_shape])
    assert_matches_ort(runtime, model, {"x": x}, dims, rtol=tol, atol=tol)


# (x shape, w shape, attributes, bias): kernels chosen by shape, see operators/conv/conv.py
CONV_CASES = [
    ([2, 3, 7, 8], [16, 3, 3, 3], dict(pads=[1, 1, 1, 1]), True),  # implicit GEMM, small tile
    ([2, 16, 9, 8], [32, 16, 3, 3], dict(pads=[1, 0, 2, 1], strides=[2, 2]), False),
    ([1, 8, 12, 10], [64, 8, 1, 1], {}, True),  # pointwise: a matrix product
    ([3, 24, 1, 1], [8, 24, 1, 1], {}, True),  # squeeze-excite over a pooled map: matrix-vector
    ([2, 8, 5, 7], [4, 8, 1, 1], {}, False),
    ([1, 8, 9, 8], [16, 4, 3, 3], dict(group=2, dilations=[2, 1], pads=[2, 1, 2, 1]), True),
    ([2, 8, 9, 8], [8, 1, 3, 3], dict(group=8, pads=[1, 1, 1, 1]), True),  # depthwise: direct kernel
    ([1, 4, 9, 8], [8, 1, 3, 3], dict(group=4, strides=[2, 1]), False),  # depthwise, multiplier 2
    ([1, 4, 9, 8], [16, 4, 3, 3], dict(auto_pad="SAME_UPPER", strides=[2, 2]), True),
    ([1, 4, 9, 8], [16, 4, 2, 4], dict(auto_pad="SAME_LOWER"), True),
    ([1, 4, 9, 8], [16, 4, 3, 3], dict(auto_pad="VALID", strides=[1, 3]), True),
    ([1, 4, 9], [16, 4, 4], dict(strides=[2], pads=[2, 1]), True),  # 1-D
    ([1, 4, 5, 6, 7], [16, 4, 3, 2, 3], dict(strides=[1, 2, 1], pads=[0, 1, 1, 1, 0, 1]), True),  # 3-D
]


@pytest.mark.parametrize("x_shape,w_shape,attrs,bias", CONV_CASES)
def test_conv_matches_ort(runtime, x_shape, w_shape, attrs, bias):
    check(runtime, conv_model("Conv", x_shape, w_shape, bias=bias, **attrs), x_shape)


def test_conv_large_tiles_match_ort(runtime):
    # 64 maps x 256 columns: the 64x128 tile of the implicit GEMM, K = 144 over nine slices.
    check(runtime, conv_model("Conv", [2, 16, 16, 16], [64, 16, 3, 3], pads=[1, 1, 1, 1]), [2, 16, 16, 16], tol=2e-4)


CONV_T_CASES = [
    ([2, 16, 5, 6], [16, 8, 3, 3], dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), True),
    ([1, 4, 5, 6], [4, 3, 3, 3], dict(strides=[2, 2], group=2), True),  # direct kernel
    ([1, 4, 5], [4, 16, 3], dict(strides=[3], dilations=[2]), False),  # 1-D
    ([1, 8, 5, 6], [8, 16, 3, 3], dict(strides=[2, 2], output_shape=[10, 12]), True),
    ([1, 8, 5, 6], [8, 16, 4, 4], dict(strides=[2, 2], auto_pad="SAME_UPPER"), True),
    ([1, 2, 4, 5], [2, 3, 3, 3], dict(strides=[2, 2], auto_pad="SAME_LOWER"), True),  # odd total: extra pad first
    ([1, 2, 4, 5], [2, 3, 3, 3], dict(strides=[2, 2], auto_pad="SAME_UPPER", output_shape=[9, 11]), False),
    ([1, 8, 3, 4, 3], [8, 8, 2, 3, 2], dict(strides=[2, 1, 2], pads=[0, 1, 0, 1, 1, 0]), True),  # 3-D
]


@pytest.mark.parametrize("x_shape,w_shape,attrs,bias", CONV_T_CASES)
def test_conv_transpose_matches_ort(runtime, x_shape, w_shape, attrs, bias):
    check(runtime, conv_model("ConvTranspose", x_shape, w_shape, bias=bias, **attrs), x_shape)


@st.composite
def conv_cases(draw):
    """A random Conv: rank, kernel, strides, dilations, pads, group (depthwise included)."""
    rank = draw(st.integers(1, 2))
    group = draw(st.sampled_from([1, 2, 4]))
    cg, mg = draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 8, 12]))
    kernel = [draw(st.integers(1, 3)) for _ in range(rank)]
    dil = [draw(st.integers(1, 2)) for _ in range(rank)]
    pads = [draw(st.integers(0, 2)) for _ in range(2 * rank)]
    spatial = [draw(st.integers((k - 1) * d + 1, 9)) for k, d in zip(kernel, dil)]
    attrs = dict(strides=[draw(st.integers(1, 3)) for _ in range(rank)], dilations=dil, pads=pads, group=group)
    return [draw(st.integers(1, 2)), cg * group, *spatial], [mg * group, cg, *kernel], attrs, draw(st.booleans())


@settings(max_examples=25, deadline=None)
@given(case=conv_cases(), transposed=st.booleans())
def test_random_convolutions_match_ort(runtime, case, transposed):
    x_shape, w_shape, attrs, bias = case
    if transposed:  # W is [C, M/group, *kernel]; pads must leave a positive output
        w_shape = [x_shape[1], w_shape[0] // attrs["group"], *w_shape[2:]]
        attrs["pads"] = [min(p, (k - 1) * d) for p, k, d in zip(attrs["pads"], w_shape[2:] * 2, attrs["dilations"] * 2)]
    check(runtime, conv_model("ConvTranspose" if transposed else "Conv", x_shape, w_shape, bias=bias, **attrs), x_shape)


@pytest.mark.parametrize("op,w_shape,attrs", [
    ("Conv", [16, 3, 3, 3], dict(pads=[1, 1, 1, 1], strides=[2, 2])),  # implicit GEMM
    ("Conv", [3, 1, 3, 3], dict(group=3, auto_pad="SAME_UPPER", strides=[2, 2])),  # direct, symbolic pads
    ("Conv", [16, 3, 1, 1], {}),  # matrix product over a symbolic batch and spatial size
    ("ConvTranspose", [3, 8, 3, 3], dict(strides=[2, 2], pads=[1, 1, 1, 1])),
])
def test_symbolic_batch_and_spatial_dims(runtime, op, w_shape, attrs):
    model = conv_model(op, ["n", 3, "h", "w"], w_shape, **attrs)
    exe = runtime.load_model(compile_model(model, {"n": 1, "h": 8, "w": 8}))
    for dims in ({"n": 1, "h": 8, "w": 8}, {"n": 3, "h": 5, "w": 11}, {"n": 2, "h": 17, "w": 4}):
        exe.update_dimensions(dims)
        x = randn(dims["n"], 3, dims["h"], dims["w"])
        np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert exe.stats.recompiles == 0


def test_folded_grid_of_many_column_blocks(runtime):
    # More column blocks than a grid dimension holds are folded into y by the runtime; the
    # implicit GEMM must read its column block from the flat (x, y) index. Shrink the limit.
    model = conv_model("Conv", ["n", 4, 20, 20], [16, 4, 3, 3], pads=[1, 1, 1, 1])
    exe = runtime.load_model(compile_model(model, {"n": 2}))
    exe.limits = dataclasses.replace(exe.limits, max_workgroups=3)  # pretend the device allows 3 per dimension
    exe.update_dimensions({"n": 3})
    assert any(d.workgroups[1] > 1 for d in exe.dispatch_commands())
    x = randn(3, 4, 20, 20)
    np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_constant_conv_folds(runtime):
    # Every input a constant: folded on the host, no dispatch left.
    x = randn(1, 2, 5, 5)
    for op, w_shape, attrs in (("Conv", [4, 1, 3, 3], dict(group=2, pads=[1, 1, 1, 1], strides=[2, 1])),
                               ("ConvTranspose", [2, 3, 3, 3], dict(strides=[2, 2], output_padding=[1, 0]))):
        node = h.make_node(op, ["c", "w"], ["y"], **attrs)
        model = make_model([node, h.make_node("Neg", ["x"], ["z"])], [("x", np.float32, [1])], ["y", "z"],
                           {"c": x, "w": randn(*w_shape)})
        compiled = compile_model(model)
        assert not any(s.label.startswith("conv") for s in compiled.shaders)
        ours = run_onyxia(runtime, model, {"x": np.ones(1, np.float32)})
        np.testing.assert_allclose(ours[0], run_ort(model, {"x": np.ones(1, np.float32)})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k,bias,past,activation,outputs", [
    (4, True, True, "silu", ("y", "state")),
    (3, False, False, "none", ("y", "state")),
    (4, True, True, "swish", ("", "state")),
    (2, False, True, "none", ("y",)),
])
def test_causal_conv_with_state_prefill_then_decode(runtime, k, bias, past, activation, outputs):
    # onnxruntime has no opset 27 yet: the oracle is onnx's reference implementation.
    from onnx.reference import ReferenceEvaluator

    model = causal_model(k, bias=bias, past=past, activation=activation, outputs=outputs)
    ref = ReferenceEvaluator(model)
    exe = runtime.load_model(compile_model(model, {"n": 2, "L": 6}))
    for length in (6, 1, 2):  # prefill, then one-token decode steps: one plan
        exe.update_dimensions({"n": 2, "L": length})
        feeds = {"x": randn(2, 4, length)}
        if past:
            feeds["past"] = randn(2, 4, k - 1)
        ours = exe.run(feeds)
        for name, expected in zip([o for o in outputs if o], ref.run(None, feeds)):
            np.testing.assert_allclose(ours[name], expected, rtol=1e-5, atol=1e-5)
    assert exe.stats.recompiles == 0


def small_cnn(batch="n"):
    """Conv-BN-Relu-MaxPool-Conv-GlobalAveragePool-Flatten-Gemm, as a torch export looks."""
    inits = {"w1": randn(8, 3, 3, 3), "b1": randn(8), "s": randn(8), "bb": randn(8), "m": randn(8),
             "v": np.abs(randn(8)) + 0.5, "w2": randn(16, 8, 3, 3), "b2": randn(16), "fw": randn(10, 16),
             "fb": randn(10)}
    nodes = [
        h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        h.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["bn"], epsilon=1e-5),
        h.make_node("Relu", ["bn"], ["r"]),
        h.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        h.make_node("Conv", ["p", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        h.make_node("GlobalAveragePool", ["c2"], ["g"]),
        h.make_node("Flatten", ["g"], ["f"], axis=1),
        h.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1),
    ]
    return make_model(nodes, [("x", np.float32, [batch, 3, 16, 16])], ["y"], inits, opset=17)


def test_small_cnn_matches_ort(runtime):
    model = small_cnn()
    exe = runtime.load_model(compile_model(model, {"n": 2}))
    for n in (2, 5, 1):
        exe.update_dimensions({"n": n})
        x = randn(n, 3, 16, 16)
        np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert exe.stats.recompiles == 0


