"""ConvWeightsPass: which conv weights are stored k-major, why the others are not, and the
layout itself (the kernels reading it are checked against onnxruntime in
tests/gpu/test_conv_register.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.operators import core_operator_registry
from onyxia.operators.conv.cpu import from_kmajor, kmajor_strip, to_kmajor
from tests.builders.conv import randn
from tests.helpers import make_model


def compile_with_report(model, dims):
    pipeline = CompilerPipeline(core_operator_registry())
    compiled = pipeline.compile(onyxia.load_model(model), dims)
    return compiled, pipeline.context.reports["conv-weights"]


@pytest.mark.parametrize("shape,group,strip", [((8, 3, 3, 3), 1, None), ((16, 2, 3), 4, None), ((12, 1, 1, 1), 3, None),
                                                ((8, 4, 2, 2, 2), 2, None), ((96, 3, 3, 3), 1, 32), ((48, 2, 3), 2, 8),
                                                ((80, 4, 3, 3), 1, 16)])
def test_kmajor_places_each_element(shape, group, strip):
    w = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    k = to_kmajor(w, group, strip)
    assert k.shape == w.shape
    np.testing.assert_array_equal(from_kmajor(k, group, strip), w)
    m, cg = shape[0], shape[1]
    mg, ks = m // group, int(np.prod(shape[2:]))
    sw = strip or mg
    flat = k.reshape(-1)
    for oc in range(m):  # element (g, k, m) of [group, MG / strip, CG * kernel, strip] is W[g * MG + m].flat[k]
        g, mm = divmod(oc, mg)
        for kk in range(cg * ks):
            assert flat[((g * (mg // sw) + mm // sw) * cg * ks + kk) * sw + mm % sw] == w[oc].reshape(-1)[kk]


def test_strip_widths():
    # the widest of 32, 16, 8, 4 dividing the channels per group; one strip for 1-tap kernels
    assert [kmajor_strip(mg, 9) for mg in (512, 64, 32, 48, 40, 24, 12, 8, 4)] == [32, 32, 32, 16, 8, 8, 4, 8, 4]
    assert [kmajor_strip(mg, 1) for mg in (512, 48)] == [512, 48]


def test_weights_stored_kmajor_and_reasons_for_the_others():
    model = make_model(
        [h.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),  # 8 maps: k-major
         h.make_node("Conv", ["a", "w2"], ["b"]),  # 6 maps: not a multiple of 4
         h.make_node("Conv", ["b", "w3"], ["c"], group=6),  # depthwise: MG = 1
         h.make_node("GlobalAveragePool", ["c"], ["p"]),
         h.make_node("Conv", ["p", "w4"], ["y"])],  # over a pooled 1x1 map: a matrix-vector product
        [("x", np.float32, [1, 4, "h", "w"])], ["y"],
        {"w1": randn(8, 4, 3, 3), "w2": randn(6, 8, 1, 1), "w3": randn(6, 1, 3, 3), "w4": randn(8, 6, 1, 1)})
    compiled, report = compile_with_report(model, {"h": 5, "w": 6})
    assert list(report.kmajor) == ["w1"]
    assert "multiple of 4" in report.skipped["w2"] and "multiple of 4" in report.skipped["w3"]
    # The pooled map's W is stored as W^T by passes/pooled_conv.py first: not read k-major.
    assert "w4" not in report.kmajor and "w4" not in compiled.tensors
    assert "w1" not in compiled.tensors and any(t.startswith("w1/kmajor") for t in compiled.tensors)


def test_the_stored_weight_is_the_kmajor_order_of_the_original():
    w = randn(8, 2, 3, 3)
    model = make_model([h.make_node("Conv", ["x", "w"], ["y"], group=2)], [("x", np.float32, [1, 4, "h", "w"])],
                       ["y"], {"w": w})
    compiled, report = compile_with_report(model, {"h": 5, "w": 5})
    assert list(report.kmajor) == ["w"]
    name = next(t for t in compiled.tensors if t.startswith("w/kmajor"))
    np.testing.assert_array_equal(compiled.tensors[name].data, to_kmajor(w, 2))


def test_many_channels_are_stored_in_strips():
    """64 maps of a 3x3 conv: strips of 32 channels (the kernels reading them run against
    onnxruntime in tests/gpu/test_conv_register.py, "strips" among them)."""
    w = randn(64, 4, 3, 3)
    model = make_model([h.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                       [("x", np.float32, [1, 4, "h", "w"])], ["y"], {"w": w})
    pipeline = CompilerPipeline(core_operator_registry())
    compiled = pipeline.compile(onyxia.load_model(model), {"h": 5, "w": 5})
    name = next(t for t in compiled.tensors if t.startswith("w/kmajor"))
    np.testing.assert_array_equal(compiled.tensors[name].data, to_kmajor(w, 1, 32))


@pytest.mark.parametrize("attrs,plain", [(dict(strides=[4, 4]), True), (dict(strides=[4, 4], pads=[1, 1, 1, 1]), False),
                                         (dict(strides=[2, 2]), False), (dict(strides=[4, 4], group=2), False)])
def test_patch_embedding_weights_are_one_strip(attrs, plain):
    """A conv over non-overlapping patches (kernel = strides, no pad, group 1: a ViT's patch
    embedding) is stored plainly k-major, the [C * taps, M] matrix its patches' product reads;
    overlapping, padded or grouped 4x4 kernels keep strips of 32."""
    w = randn(64, 4 // attrs.get("group", 1), 4, 4)
    model = make_model([h.make_node("Conv", ["x", "w"], ["y"], **attrs)], [("x", np.float32, [1, 4, "h", "w"])],
                       ["y"], {"w": w})
    pipeline = CompilerPipeline(core_operator_registry())
    compiled = pipeline.compile(onyxia.load_model(model), {"h": 16, "w": 12})
    name = next(t for t in compiled.tensors if t.startswith("w/kmajor"))
    strip = 64 if plain else 32
    np.testing.assert_array_equal(compiled.tensors[name].data, to_kmajor(w, attrs.get("group", 1), strip))
