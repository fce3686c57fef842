"""Builders shared by tests/gpu/test_functions.py and tests/gpu/test_shader_validation.py's table."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper as h

from tests.helpers import make_model

PREVIEW = "ai.onnx.preview"


def loss_model(op: str, x_shape, *, weight: bool, log_prob: bool = False, opset: int = 22, **attrs):
    n, c, rest = x_shape[0], x_shape[1], list(x_shape[2:])
    ins = ["x", "t"] + (["w"] if weight else [])
    outs = ["loss"] + (["log_prob"] if log_prob else [])
    inputs = [("x", np.float32, x_shape), ("t", np.int64, [n, *rest])] + ([("w", np.float32, [c])] if weight else [])
    return make_model([h.make_node(op, ins, outs, name="loss", **attrs)], inputs, outs, opset=opset)


def rotary_model(x_shape, *, opset=23, positions=True, **attrs):
    ins = ["x", "cos", "sin"] + (["pos"] if positions else [])
    half = attrs.get("rotary_embedding_dim", x_shape[-1] if len(x_shape) == 4 else 8) // 2
    cache = [8, half] if positions else [x_shape[0], x_shape[-2] if len(x_shape) == 4 else x_shape[1], half]
    inputs = [("x", np.float32, x_shape), ("cos", np.float32, cache), ("sin", np.float32, cache)]
    if positions:
        seq = x_shape[2] if len(x_shape) == 4 else x_shape[1]
        inputs.append(("pos", np.int64, [x_shape[0], seq]))
    return make_model([h.make_node("RotaryEmbedding", ins, ["y"], **attrs)], inputs, ["y"], opset=opset)


def flex_model(q_heads=4, kv_heads=2, *, score_mod: bool):
    attrs = {}
    if score_mod:  # a tanh soft cap, given as a subgraph the expansion inlines
        cap = h.make_tensor("cap", onnx.TensorProto.FLOAT, [], [2.0])
        body = h.make_graph([h.make_node("Div", ["s", "cap"], ["d"]), h.make_node("Tanh", ["d"], ["t"]),
                             h.make_node("Mul", ["t", "cap"], ["out"])], "soft_cap",
                            [h.make_tensor_value_info("s", onnx.TensorProto.FLOAT, None)],
                            [h.make_tensor_value_info("out", onnx.TensorProto.FLOAT, None)], [cap])
        attrs["score_mod"] = body
    shapes = {"q": [2, q_heads, 5, 8], "k": [2, kv_heads, 6, 8], "v": [2, kv_heads, 6, 8]}
    return make_model([h.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain=PREVIEW, **attrs)],
                      [(n, np.float32, s) for n, s in shapes.items()], ["y"], opset=26, extra_opsets={PREVIEW: 1})


def validation_models() -> list[tuple[onnx.ModelProto, dict[str, int]]]:
    """Models covering every function-expanded op, for tests/gpu/test_shader_validation.py."""
    n = {"n": 3}
    windows = [make_model([h.make_node(op, ["size"], ["y"])], [], ["y"], {"size": np.array(6, np.int64)}, opset=17)
               for op in ("HannWindow", "HammingWindow", "BlackmanWindow")]
    return [
        (loss_model("NegativeLogLikelihoodLoss", ["n", 4, 2], weight=True, reduction="mean"), n),
        (loss_model("SoftmaxCrossEntropyLoss", ["n", 4], weight=False, log_prob=True, opset=13), n),
        *[(m, {}) for m in windows],
        (make_model([h.make_node("CenterCropPad", ["x", "s"], ["y"], axes=[1])], [("x", np.float32, ["n", 6])],
                    ["y"], {"s": np.array([4], np.int64)}, opset=18), n),
        (rotary_model([1, 2, 3, 8]), {}),
        (make_model([h.make_node("SwiGLU", ["a", "b"], ["y"])], [("a", np.float32, ["n", 8]),
                     ("b", np.float32, ["n", 8])], ["y"], opset=28), n),
        (flex_model(score_mod=True), {}),
    ]
