"""Vision stems in the layouts optimum exports: `pixel_values: [batch_size, num_channels, height,
width]`, every axis a dim_param, so the channel count the convolutions need is a symbol that only
the dims (or the feed) give a value (tests/unit/test_literal_dims.py, tests/gpu/test_literal_dims.py)."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model

PIXELS = ("pixel_values", np.float32, ["batch_size", "num_channels", "height", "width"])
CONV = "/embeddings/patch_embeddings/projection/Conv"
PATCH, HIDDEN = 4, 16


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _f32(rng: np.random.Generator, *shape: int, scale: float = 0.2) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _patches(rng: np.random.Generator, bias: bool) -> tuple[list, dict]:
    """Conv(kernel = stride = patch) to [batch, hidden, h/p, w/p], then to [batch, patches, hidden]
    through a Reshape whose target is computed from Shape (symbol-valued), as torch exports
    `x.flatten(2).transpose(1, 2)` with dynamic axes."""
    nodes = [h.make_node("Conv", ["pixel_values", "patch_w", *(["patch_b"] if bias else [])], ["conv"],
                         kernel_shape=[PATCH, PATCH], strides=[PATCH, PATCH], name=CONV),
             h.make_node("Shape", ["conv"], ["conv_shape"], end=2),
             h.make_node("Concat", ["conv_shape", "minus_one"], ["flat_shape"], axis=0),
             h.make_node("Reshape", ["conv", "flat_shape"], ["flat"], name="/embeddings/patch_embeddings/Reshape"),
             h.make_node("Transpose", ["flat"], ["tokens"], perm=[0, 2, 1])]
    inits = {"patch_w": _f32(rng, HIDDEN, 3, PATCH, PATCH), "minus_one": np.array([-1], np.int64)}
    if bias:
        inits["patch_b"] = _f32(rng, HIDDEN)
    return nodes, inits


def vit_patch_embedding():
    """ViT: patch Conv with bias, flatten, transpose, LayerNorm, a MatMul (+ bias)."""
    rng = _rng(0)
    nodes, inits = _patches(rng, bias=True)
    nodes += [h.make_node("LayerNormalization", ["tokens", "ln_g", "ln_b"], ["normed"], axis=-1, epsilon=1e-12),
              h.make_node("MatMul", ["normed", "proj_w"], ["proj"]),
              h.make_node("Add", ["proj", "proj_b"], ["last_hidden_state"])]
    inits |= {"ln_g": 1 + _f32(rng, HIDDEN), "ln_b": _f32(rng, HIDDEN), "proj_w": _f32(rng, HIDDEN, 24),
              "proj_b": _f32(rng, 24)}
    return make_model(nodes, [PIXELS], ["last_hidden_state"], inits, opset=17)


def clip_vision_stem():
    """CLIP: patch Conv without bias, a class token expanded to the batch and prepended, position
    embeddings sliced to the token count, pre_layrnorm."""
    rng = _rng(1)
    nodes, inits = _patches(rng, bias=False)
    nodes += [h.make_node("Shape", ["pixel_values"], ["batch"], end=1),
              h.make_node("Concat", ["batch", "one", "hidden"], ["cls_shape"], axis=0),
              h.make_node("Expand", ["class_embedding", "cls_shape"], ["cls"]),
              h.make_node("Concat", ["cls", "tokens"], ["embeddings"], axis=1),
              h.make_node("Shape", ["embeddings"], ["count"], start=1, end=2),
              h.make_node("Slice", ["position_embedding", "zero", "count", "one"], ["positions"]),
              h.make_node("Add", ["embeddings", "positions"], ["with_positions"]),
              h.make_node("LayerNormalization", ["with_positions", "ln_g", "ln_b"], ["pre_layrnorm"], axis=-1,
                          epsilon=1e-5)]
    inits |= {"class_embedding": _f32(rng, 1, 1, HIDDEN), "position_embedding": _f32(rng, 1, 64, HIDDEN),
              "one": np.array([1], np.int64), "zero": np.array([0], np.int64),
              "hidden": np.array([HIDDEN], np.int64), "ln_g": 1 + _f32(rng, HIDDEN), "ln_b": _f32(rng, HIDDEN)}
    return make_model(nodes, [PIXELS], ["pre_layrnorm"], inits, opset=17)


def detr_backbone_stem():
    """DETR's ResNet stem: Conv 7x7 stride 2 (no bias), frozen BatchNorm, Relu, MaxPool 3x3 stride
    2, then a 1x1 input projection; pixel_mask [batch_size, height, width] beside it, downsampled."""
    rng = _rng(2)
    c = 8
    nodes = [h.make_node("Conv", ["pixel_values", "stem_w"], ["stem"], kernel_shape=[7, 7], strides=[2, 2],
                         pads=[3, 3, 3, 3], name="/backbone/conv_encoder/model/conv1/Conv"),
             h.make_node("BatchNormalization", ["stem", "bn_g", "bn_b", "bn_m", "bn_v"], ["bn"], epsilon=1e-5),
             h.make_node("Relu", ["bn"], ["relu"]),
             h.make_node("MaxPool", ["relu"], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             h.make_node("Conv", ["pool", "proj_w", "proj_b"], ["features"], kernel_shape=[1, 1],
                         name="/input_projection/Conv"),
             h.make_node("Unsqueeze", ["pixel_mask", "one"], ["mask4"]),
             h.make_node("Cast", ["mask4"], ["maskf"], to=1),
             h.make_node("MaxPool", ["maskf"], ["mask_pooled"], kernel_shape=[4, 4], strides=[4, 4])]
    inits = {"stem_w": _f32(rng, c, 3, 7, 7), "bn_g": 1 + _f32(rng, c), "bn_b": _f32(rng, c),
             "bn_m": _f32(rng, c), "bn_v": 1 + np.abs(_f32(rng, c)), "proj_w": _f32(rng, 12, c, 1, 1),
             "proj_b": _f32(rng, 12), "one": np.array([1], np.int64)}
    mask = ("pixel_mask", np.int64, ["batch_size", "height", "width"])
    return make_model(nodes, [PIXELS, mask], ["features", "mask_pooled"], inits, opset=17)


def grouped_conv():
    """A depthwise Conv over the symbolic channel axis (group = 3 = num_channels: C / group = 1),
    then a grouped Conv whose groups split the channels in two."""
    rng = _rng(3)
    nodes = [h.make_node("Conv", ["pixel_values", "dw_w", "dw_b"], ["dw"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         group=3, name="depthwise"),
             h.make_node("Concat", ["dw", "pixel_values"], ["both"], axis=1),
             h.make_node("Conv", ["both", "g_w"], ["y"], kernel_shape=[1, 1], group=2, name="grouped")]
    inits = {"dw_w": _f32(rng, 3, 1, 3, 3), "dw_b": _f32(rng, 3), "g_w": _f32(rng, 4, 3, 1, 1)}
    return make_model(nodes, [PIXELS], ["y"], inits, opset=17)


def channel_split_reshape():
    """Split sizes and a Reshape target computed from the symbolic channel count: the first channel
    apart, the other num_channels - 1 into a Conv taking 2 channels; the image regrouped to
    [batch, num_channels, height * width] by a target built from Shape."""
    rng = _rng(4)
    nodes = [h.make_node("Shape", ["pixel_values"], ["shape"]),
             h.make_node("Slice", ["shape", "one", "two"], ["channels"]),
             h.make_node("Sub", ["channels", "one"], ["rest"]),
             h.make_node("Concat", ["one", "rest"], ["sizes"], axis=0),
             h.make_node("Split", ["pixel_values", "sizes"], ["first", "others"], axis=1, name="split"),
             h.make_node("Conv", ["others", "w"], ["conv"], kernel_shape=[2, 2], strides=[2, 2], name="others_conv"),
             h.make_node("Slice", ["shape", "zero", "two"], ["nc"]),
             h.make_node("Concat", ["nc", "minus_one"], ["target"], axis=0),
             h.make_node("Reshape", ["pixel_values", "target"], ["flat"], name="regroup"),
             h.make_node("ReduceMean", ["flat", "two"], ["mean"], keepdims=0),
             h.make_node("Relu", ["first"], ["first_relu"])]
    inits = {"w": _f32(rng, 5, 2, 2, 2), "one": np.array([1], np.int64), "two": np.array([2], np.int64),
             "zero": np.array([0], np.int64), "minus_one": np.array([-1], np.int64)}
    return make_model(nodes, [PIXELS], ["conv", "mean", "first_relu"], inits, opset=18)


def channel_lrn():
    """LRN over the channel axis: any channel count is valid, but the window's Reshape bakes it."""
    return make_model([h.make_node("LRN", ["pixel_values"], ["y"], size=3, alpha=1e-3, beta=0.75, bias=1.0,
                                   name="lrn")], [PIXELS], ["y"], opset=17)


def pixels(batch: int, height: int, width: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, channels, height, width)).astype(np.float32)
