"""Self-attention blocks spelled out as torch's exporters write them (AttentionFusionPass tests):
x [batch, seq, H * D] -> Q, K, V projections split into heads -> softmax(scale Q K^T + mask) V
-> heads merged back, with a symbolic batch and sequence.

Spellings:
- "eager": Div(MatMul(Q, Transpose(K4, 0 2 3 1)), sqrt(D)) (transformers' eager attention);
- "sdpa": sqrt(scale) Muls on Q and K^T each, and the NaN guard Where(IsNaN(p), 0, p) after
  Softmax (torch's scaled_dot_product_attention decomposition, TorchScript exporter);
- "dynamo": K^T as Reshape(Transpose(Reshape(K, [B * H, S, D]), 0 2 1), [B, H, D, S]), the
  scale a Mul after the MatMul, a no-op Cast after Softmax (the dynamo exporter's shapes).
Masks: None; "padding": [B, 1, 1, S] from an int64 attention_mask input through Unsqueeze, Cast,
Sub and Mul ((1 - m) * -10000, BERT's); "where": the same through Equal/Where with -inf;
"full": a float [B, 1, S, S] input.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SPELLINGS = ("eager", "sdpa", "dynamo")
MASKS = (None, "padding", "where", "full")


def attention_block(spelling: str, mask: str | None, heads: int = 2, head: int = 8, seed: int = 0,
                    output_transpose: bool = True) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    hidden = heads * head
    inits = [numpy_helper.from_array((rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32),
                                     f"w{n}") for n in "qkv"]
    c = {"split": np.array([0, 0, heads, head], np.int64), "merge": np.array([0, 0, hidden], np.int64),
         "sqrt_d": np.array(np.sqrt(head), np.float32), "root": np.array(head ** -0.25, np.float32),
         "inv": np.array(1 / np.sqrt(head), np.float32), "one": np.array(1.0, np.float32),
         "big": np.array(-10000.0, np.float32), "zero": np.array(0.0, np.float32),
         "ninf": np.array(-np.inf, np.float32), "izero": np.array(0, np.int64),
         "ax12": np.array([1, 2], np.int64), "i0": np.array([0], np.int64), "i1": np.array([1], np.int64),
         "i2": np.array([2], np.int64), "i3": np.array([3], np.int64)}
    inits += [numpy_helper.from_array(v, k) for k, v in c.items()]
    n = helper.make_node
    nodes = []
    for p in "qkv":
        nodes += [n("MatMul", ["x", f"w{p}"], [f"{p}2"]), n("Reshape", [f"{p}2", "split"], [f"{p}4"])]
    nodes += [n("Transpose", ["q4"], ["q"], perm=[0, 2, 1, 3]), n("Transpose", ["v4"], ["v"], perm=[0, 2, 1, 3])]
    if spelling == "dynamo":
        nodes += [n("Transpose", ["k4"], ["k"], perm=[0, 2, 1, 3]), n("Shape", ["k"], ["ks"])]
        nodes += [n("Gather", ["ks", f"i{i}"], [f"ks{i}"]) for i in range(4)]
        nodes += [n("Mul", ["ks0", "ks1"], ["bh"]), n("Concat", ["bh", "ks2", "ks3"], ["s3"], axis=0),
                  n("Reshape", ["k", "s3"], ["k3"]), n("Transpose", ["k3"], ["kt3"], perm=[0, 2, 1]),
                  n("Concat", ["ks0", "ks1", "ks3", "ks2"], ["s4"], axis=0), n("Reshape", ["kt3", "s4"], ["kt"]),
                  n("MatMul", ["q", "kt"], ["qk"]), n("Mul", ["qk", "inv"], ["scores"])]
    else:
        nodes.append(n("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]))
        if spelling == "sdpa":
            nodes += [n("Mul", ["q", "root"], ["qs"]), n("Mul", ["kt", "root"], ["kts"]),
                      n("MatMul", ["qs", "kts"], ["scores"])]
        else:
            nodes += [n("MatMul", ["q", "kt"], ["qk"]), n("Div", ["qk", "sqrt_d"], ["scores"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hidden])]
    logits = "scores"
    if mask is not None:
        if mask == "full":
            inputs.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, ["batch", 1, "seq", "seq"]))
        else:
            inputs.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]))
            nodes.append(n("Unsqueeze", ["attention_mask", "ax12"], ["m4"]))
            if mask == "padding":
                nodes += [n("Cast", ["m4"], ["mf"], to=TensorProto.FLOAT), n("Sub", ["one", "mf"], ["inv_m"]),
                          n("Mul", ["inv_m", "big"], ["bias"])]
            else:
                nodes += [n("Equal", ["m4", "izero"], ["pad"]), n("Where", ["pad", "ninf", "zero"], ["bias"])]
        nodes.append(n("Add", ["scores", "bias"], ["masked"]))
        logits = "masked"
    nodes.append(n("Softmax", [logits], ["probs"], axis=-1))
    probs = "probs"
    if spelling == "sdpa":
        nodes += [n("IsNaN", ["probs"], ["nan"]), n("Where", ["nan", "zero", "probs"], ["guarded"])]
        probs = "guarded"
    elif spelling == "dynamo":
        nodes.append(n("Cast", ["probs"], ["probs32"], to=TensorProto.FLOAT))
        probs = "probs32"
    nodes.append(n("MatMul", [probs, "v"], ["ctx4"]))
    if output_transpose:
        nodes += [n("Transpose", ["ctx4"], ["ctx"], perm=[0, 2, 1, 3]), n("Reshape", ["ctx", "merge"], ["y"])]
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hidden])
    else:
        nodes.append(n("Identity", ["ctx4"], ["y"]))
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", heads, "seq", head])
    graph = helper.make_graph(nodes, f"attention_{spelling}_{mask}", inputs, [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def packed_qkv_block(unbind: str = "split", heads: int = 2, head: int = 8, seed: int = 0) -> onnx.ModelProto:
    """timm's Attention: one qkv projection (+ bias) [B, S, 3 * H * D] -> Reshape [B, S, 3, H, D]
    -> Transpose (2, 0, 3, 1, 4) -> q, k, v by Split(axis 0) + Squeeze (`unbind` "split", torch's
    unbind) or Gather(axis 0) ("gather") -> softmax(q * scale @ k^T) v -> heads merged back."""
    rng = np.random.default_rng(seed)
    hidden = heads * head
    n = helper.make_node
    c = {"wqkv": (rng.standard_normal((hidden, 3 * hidden)) / np.sqrt(hidden)).astype(np.float32),
         "bqkv": rng.standard_normal(3 * hidden).astype(np.float32),
         "shape5": np.array([0, 0, 3, heads, head], np.int64), "merge": np.array([0, 0, hidden], np.int64),
         "scale": np.array(head ** -0.5, np.float32), "ones": np.array([1, 1, 1], np.int64),
         "ax0": np.array([0], np.int64), **{f"p{i}": np.array(i, np.int64) for i in range(3)}}
    nodes = [n("MatMul", ["x", "wqkv"], ["qkv0"]), n("Add", ["qkv0", "bqkv"], ["qkv"]),
             n("Reshape", ["qkv", "shape5"], ["qkv5"]), n("Transpose", ["qkv5"], ["parts"], perm=[2, 0, 3, 1, 4])]
    if unbind == "split":
        nodes += [n("Split", ["parts", "ones"], ["q1", "k1", "v1"], axis=0)]
        nodes += [n("Squeeze", [f"{p}1", "ax0"], [p]) for p in "qkv"]
    else:
        nodes += [n("Gather", ["parts", f"p{i}"], [p], axis=0) for i, p in enumerate("qkv")]
    nodes += [n("Mul", ["q", "scale"], ["qs"]), n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
              n("MatMul", ["qs", "kt"], ["scores"]), n("Softmax", ["scores"], ["probs"], axis=-1),
              n("MatMul", ["probs", "v"], ["ctx4"]), n("Transpose", ["ctx4"], ["ctx"], perm=[0, 2, 1, 3]),
              n("Reshape", ["ctx", "merge"], ["y"])]
    graph = helper.make_graph(nodes, f"packed_qkv_{unbind}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hidden])],
                              [numpy_helper.from_array(v, k) for k, v in c.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def block_feeds(model: onnx.ModelProto, batch: int, seq: int, seed: int = 0) -> dict[str, np.ndarray]:
    """x, and the mask inputs with the last batch row padded after 2/3 of the keys."""
    rng = np.random.default_rng(seed)
    hidden = model.graph.input[0].type.tensor_type.shape.dim[2].dim_value
    feeds = {"x": rng.standard_normal((batch, seq, hidden)).astype(np.float32)}
    names = {i.name for i in model.graph.input}
    if "attention_mask" in names:
        m = np.ones((batch, seq), np.int64)
        m[-1, max(1, 2 * seq // 3):] = 0
        feeds["attention_mask"] = m
    if "bias" in names:
        shape = (batch, 1, seq, seq)
        feeds["bias"] = np.where(rng.random(shape) < 0.3, -1e4, rng.standard_normal(shape)).astype(np.float32)
    return feeds


def validation_models() -> list[tuple[onnx.ModelProto, dict[str, int]]]:
    """Models whose plans cover FusedAttention's kernels (tests/builders/shader_table.py): with and
    without a mask, and a head size that is no multiple of 4 (no register kernel)."""
    return [(attention_block("eager", "padding"), {"batch": 2, "seq": 5}),
            (attention_block("sdpa", None), {"batch": 2, "seq": 5}),
            (attention_block("dynamo", "full", heads=2, head=6), {"batch": 1, "seq": 3})]


def static_sequence(model: onnx.ModelProto, seq: int) -> onnx.ModelProto:
    """The block with its sequence fixed at `seq` (a static key count), the batch symbolic."""
    for value in (*model.graph.input, *model.graph.output):
        for dim in value.type.tensor_type.shape.dim[1:3]:
            if dim.dim_param == "seq":
                dim.dim_value = seq
    return model
