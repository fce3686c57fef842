"""Realistic test models built in code, in the shapes real exporters produce.

Each builder returns an `onnx.ModelProto` with tiny seeded random weights and symbolic dims, and
follows its exporter node for node where it matters to a compiler:

- `bert_encoder`: torch.onnx (opset 17) export of a HF BertModel — Gather embeddings (word +
  token type + position, the ids sliced from buffers with the symbolic seq), LayerNormalization,
  attention heads via Reshape whose shape is Shape→Gather→Unsqueeze→Concat, the extended mask
  `(1 - Cast(mask)) * -10000`, Gelu in Erf form, pooler (Gather token 0, Tanh).
- `gpt2_block`: HF GPT-2 (past-free) — Range position ids, fused QKV MatMul + Split, causal
  mask in one of three exporter forms (see `GPT2_MASKS`), Softmax, Gelu in tanh form, tied lm_head.
  Opset < 17 decomposes LayerNorm (ReduceMean/Sub/Pow/Sqrt/Div) as torch did before opset 17.
- `mixer_block`: a ViT/MLP-Mixer-ish patch block at opset 13: patchify by Reshape/Transpose with
  the patch count computed as Div on a shape, ReduceMean-based LayerNorm decomposition, token
  mixing by Transpose + ReduceMean (PoolFormer style, so the token count stays symbolic).
- `small_cnn`: Conv/Relu/MaxPool/ReduceMean/Gemm (only usable once Conv and MaxPool exist).

`MODELS` maps a name to a `ModelCase` (builder, feed maker, the symbols and a run schedule).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 10  # what the onnxruntime in the test extra reads reliably
F32_MIN = float(np.finfo(np.float32).min)  # HF's masking value (torch.finfo(dtype).min)


class GraphBuilder:
    """A thin onnx.helper wrapper: auto-named nodes, seeded weights, torch-style shape helpers."""

    def __init__(self, name: str, opset: int, seed: int):
        self.name, self.opset = name, opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0
        self.scope = ""  # torch-style node name prefix ("/encoder/layer.0/attention")

    def _fresh(self, op_type: str) -> str:
        self._count += 1
        return f"{self.scope}/{op_type}_{self._count}"

    # ---- values ---------------------------------------------------------------------------
    def init(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, name: str, shape: Sequence[int], scale: float | None = None) -> str:
        """A float32 random weight; default scale keeps activations O(1) through a MatMul."""
        scale = 1.0 / math.sqrt(shape[0]) if scale is None else scale
        return self.init(name, (self.rng.standard_normal(tuple(shape)) * scale).astype(np.float32))

    def const(self, value: object, dtype: object = np.int64) -> str:
        """A Constant node (torch exports scalars and shape pieces this way, not as initializers)."""
        out = self._fresh("Constant")
        tensor = numpy_helper.from_array(np.asarray(value, dtype=dtype), out + "_value")
        self.nodes.append(helper.make_node("Constant", [], [out], name=out, value=tensor))
        return out

    # ---- nodes ----------------------------------------------------------------------------
    def op(self, op_type: str, *inputs: str | None, **attrs: object) -> str:
        """Add a single-output node; returns its output name ("" inputs for absent optionals)."""
        return self.ops(op_type, *inputs, outputs=1, **attrs)[0]

    def ops(self, op_type: str, *inputs: str | None, outputs: int, **attrs: object) -> list[str]:
        name = self._fresh(op_type)
        outs = [f"{name}_out{i}" for i in range(outputs)] if outputs > 1 else [f"{name}_out"]
        self.nodes.append(helper.make_node(op_type, ["" if i is None else i for i in inputs], outs,
                                           name=name, **attrs))
        return outs

    def linear(self, x: str, prefix: str, n_in: int, n_out: int, bias_first: bool = False) -> str:
        """torch.nn.Linear: MatMul with the transposed weight, then Add of the bias."""
        mm = self.op("MatMul", x, self.weight(f"{prefix}.weight_t", (n_in, n_out)))
        b = self.weight(f"{prefix}.bias", (n_out,), scale=0.1)
        return self.op("Add", b, mm) if bias_first else self.op("Add", mm, b)

    # ---- shape computations, as torch exports `x.size(i)` and `x.size()[:-1] + (a, b)` ---
    def dim(self, x: str, axis: int) -> str:
        """0-d int64: Shape → Gather(scalar index)."""
        return self.op("Gather", self.op("Shape", x), self.const(axis), axis=0)

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", x, self.const(list(axes)))
        return self.op("Unsqueeze", x, axes=list(axes))

    def shape_of(self, *parts: str | int) -> str:
        """A 1-D shape tensor: ints become Constant [v], 0-d tensors Unsqueeze → [v]; Concat."""
        pieces = [self.const([p]) if isinstance(p, int) else self.unsqueeze(p, [0]) for p in parts]
        return self.op("Concat", *pieces, axis=0)

    def reduce_mean(self, x: str, axes: Sequence[int], keepdims: int = 1) -> str:
        if self.opset >= 18:
            return self.op("ReduceMean", x, self.const(list(axes)), keepdims=keepdims)
        return self.op("ReduceMean", x, axes=list(axes), keepdims=keepdims)

    def layer_norm(self, x: str, prefix: str, width: int, eps: float) -> str:
        gamma = self.init(f"{prefix}.weight", (1 + 0.1 * self.rng.standard_normal(width)).astype(np.float32))
        beta = self.weight(f"{prefix}.bias", (width,), scale=0.1)
        if self.opset >= 17:
            return self.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=eps)
        # torch < opset 17: mean, centered, variance via Pow 2, Sqrt, Div, affine.
        mean = self.reduce_mean(x, [-1])
        centered = self.op("Sub", x, mean)
        var = self.reduce_mean(self.op("Pow", centered, self.const(2.0, np.float32)), [-1])
        std = self.op("Sqrt", self.op("Add", var, self.const(eps, np.float32)))
        return self.op("Add", self.op("Mul", self.op("Div", centered, std), gamma), beta)

    def gelu_erf(self, x: str) -> str:
        """torch's exact Gelu: x * 0.5 * (1 + erf(x / sqrt 2)), in torch's export order."""
        erf = self.op("Erf", self.op("Div", x, self.const(1.4142135381698608, np.float32)))
        return self.op("Mul", self.op("Mul", x, self.op("Add", erf, self.const(1.0, np.float32))),
                       self.const(0.5, np.float32))

    def gelu_tanh(self, x: str) -> str:
        """HF gelu_new: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
        cube = self.op("Mul", self.const(0.044715, np.float32), self.op("Pow", x, self.const(3.0, np.float32)))
        inner = self.op("Mul", self.const(math.sqrt(2.0 / math.pi), np.float32), self.op("Add", x, cube))
        one_plus = self.op("Add", self.const(1.0, np.float32), self.op("Tanh", inner))
        return self.op("Mul", self.op("Mul", self.const(0.5, np.float32), x), one_plus)

    def build(self, inputs: Sequence[tuple[str, int, Sequence[int | str]]],
              outputs: Sequence[tuple[str, str, int, Sequence[int | str] | None]]) -> onnx.ModelProto:
        """inputs: (name, TensorProto dtype, shape); outputs: (graph name, tensor, dtype, shape or None).

        A graph output's tensor is renamed to its output name everywhere (as torch names them).
        """
        renames = {tensor: out_name for out_name, tensor, _, _ in outputs}
        for node in self.nodes:
            for seq in (node.input, node.output):
                seq[:] = [renames.get(t, t) for t in seq]
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info(n, dt, list(s)) for n, dt, s in inputs],
            [helper.make_tensor_value_info(n, dt, None if s is None else list(s)) for n, _, dt, s in outputs],
            self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  ir_version=IR_VERSION, producer_name="onyxia-tests")
        if all(s is not None for *_, s in outputs):  # the checker insists on output shapes
            onnx.checker.check_model(model, full_check=True)
        return model


# ---- BERT -----------------------------------------------------------------------------------

def bert_encoder(layers: int = 2, hidden: int = 32, heads: int = 4, ffn: int = 64, vocab: int = 64,
                 max_pos: int = 64, seed: int = 0) -> onnx.ModelProto:
    """A HF BertModel as torch.onnx (opset 17) exports it; outputs last_hidden_state, pooler_output."""
    g = GraphBuilder("bert_encoder", 17, seed)
    hd = hidden // heads
    g.scope = "/embeddings"
    seq = g.dim("input_ids", 1)
    # position_ids / token_type_ids are registered buffers [1, max_pos], sliced to [:, :seq].
    seq_end = g.unsqueeze(seq, [0])
    pos_ids = g.op("Slice", g.init("embeddings.position_ids", np.arange(max_pos, dtype=np.int64)[None]),
                   g.const([0]), seq_end, g.const([1]), g.const([1]))
    type_buf = g.op("Slice", g.init("embeddings.token_type_ids", np.zeros((1, max_pos), np.int64)),
                    g.const([0]), seq_end, g.const([1]), g.const([1]))
    type_ids = g.op("Expand", type_buf, g.shape_of(g.dim("input_ids", 0), seq))
    words = g.op("Gather", g.weight("embeddings.word_embeddings.weight", (vocab, hidden), 1.0), "input_ids")
    types = g.op("Gather", g.weight("embeddings.token_type_embeddings.weight", (2, hidden), 0.5), type_ids)
    pos = g.op("Gather", g.weight("embeddings.position_embeddings.weight", (max_pos, hidden), 0.5), pos_ids)
    x = g.op("Add", g.op("Add", words, types), pos)
    x = g.layer_norm(x, "embeddings.LayerNorm", hidden, 1e-12)

    g.scope = "/extended_attention_mask"
    mask = g.unsqueeze(g.unsqueeze("attention_mask", [1]), [2])
    mask = g.op("Cast", mask, to=TensorProto.FLOAT)
    mask = g.op("Mul", g.op("Sub", g.const(1.0, np.float32), mask), g.const(-10000.0, np.float32))

    for layer in range(layers):
        p = f"encoder.layer.{layer}"
        g.scope = f"/encoder/layer.{layer}/attention/self"

        def heads_of(t: str, perm: list[int]) -> str:
            shape = g.shape_of(g.dim(t, 0), g.dim(t, 1), heads, hd)  # x.size()[:-1] + (heads, hd)
            return g.op("Transpose", g.op("Reshape", t, shape), perm=perm)

        q = heads_of(g.linear(x, f"{p}.attention.self.query", hidden, hidden, bias_first=True), [0, 2, 1, 3])
        # key.transpose(-1, -2) after permute(0, 2, 1, 3): torch's peephole fuses the two Transposes.
        k = heads_of(g.linear(x, f"{p}.attention.self.key", hidden, hidden, bias_first=True), [0, 2, 3, 1])
        v = heads_of(g.linear(x, f"{p}.attention.self.value", hidden, hidden, bias_first=True), [0, 2, 1, 3])
        scores = g.op("Div", g.op("MatMul", q, k), g.const(math.sqrt(hd), np.float32))
        probs = g.op("Softmax", g.op("Add", scores, mask), axis=-1)
        ctx = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
        ctx = g.op("Reshape", ctx, g.shape_of(g.dim(ctx, 0), g.dim(ctx, 1), hidden))
        g.scope = f"/encoder/layer.{layer}/attention/output"
        attn = g.linear(ctx, f"{p}.attention.output.dense", hidden, hidden)
        x = g.layer_norm(g.op("Add", attn, x), f"{p}.attention.output.LayerNorm", hidden, 1e-12)
        g.scope = f"/encoder/layer.{layer}/intermediate"
        h = g.gelu_erf(g.linear(x, f"{p}.intermediate.dense", hidden, ffn))
        g.scope = f"/encoder/layer.{layer}/output"
        h = g.linear(h, f"{p}.output.dense", ffn, hidden)
        x = g.layer_norm(g.op("Add", h, x), f"{p}.output.LayerNorm", hidden, 1e-12)

    g.scope = "/pooler"
    first = g.op("Gather", x, g.const(0), axis=1)  # hidden_states[:, 0]
    pooled = g.op("Tanh", g.linear(first, "pooler.dense", hidden, hidden))
    return g.build(
        [("input_ids", TensorProto.INT64, ["batch", "seq"]), ("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [("last_hidden_state", x, TensorProto.FLOAT, ["batch", "seq", hidden]),
         ("pooler_output", pooled, TensorProto.FLOAT, ["batch", hidden])])


def bert_feeds(dims: dict[str, int], seed: int = 0, vocab: int = 64) -> dict[str, np.ndarray]:
    """Random ids and a right-padded mask (every row keeps at least one real token)."""
    rng = np.random.default_rng(seed)
    batch, seq = dims["batch"], dims["seq"]
    lengths = rng.integers(1, seq + 1, size=batch)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    return {"input_ids": rng.integers(0, vocab, size=(batch, seq), dtype=np.int64), "attention_mask": mask}


# ---- GPT-2 ----------------------------------------------------------------------------------

# Causal-mask forms exporters emit, each with the opset it is paired with in MODELS:
#   "trilu": torch.triu(torch.full((s, s), finfo.min), 1)[None, None].expand(b, 1, s, s), added;
#   "range": HF's _make_causal_mask: full(finfo.min).masked_fill(arange < (arange + 1).view(s, 1), 0);
#   "slice": GPT-2's bool `bias` buffer [1, 1, P, P] sliced to [kl - ql : kl, :kl], Where(mask, w, min).
GPT2_MASKS = ("trilu", "range", "slice")


def gpt2_block(opset: int = 18, mask: str = "range", layers: int = 1, hidden: int = 32, heads: int = 4,
               vocab: int = 64, max_pos: int = 32, seed: int = 1) -> onnx.ModelProto:
    """HF GPT-2 (no past) with a tied lm_head; outputs logits [batch, seq, vocab]."""
    if mask not in GPT2_MASKS:
        raise ValueError(f"mask must be one of {GPT2_MASKS}")
    g = GraphBuilder(f"gpt2_{mask}_opset{opset}", opset, seed)
    hd = hidden // heads
    g.scope = "/transformer"
    batch, seq = g.dim("input_ids", 0), g.dim("input_ids", 1)
    positions = g.unsqueeze(g.op("Range", g.const(0), seq, g.const(1)), [0])
    wte = g.weight("transformer.wte.weight", (vocab, hidden), 1.0)
    x = g.op("Add", g.op("Gather", wte, "input_ids"),
             g.op("Gather", g.weight("transformer.wpe.weight", (max_pos, hidden), 0.5), positions))

    g.scope = "/transformer/causal_mask"
    additive = None
    if mask == "trilu":
        full = g.op("ConstantOfShape", g.shape_of(seq, seq),
                    value=numpy_helper.from_array(np.array([F32_MIN], np.float32)))
        additive = g.op("Trilu", full, g.const(1), upper=1)
    elif mask == "range":
        full = g.op("ConstantOfShape", g.shape_of(seq, seq),
                    value=numpy_helper.from_array(np.array([F32_MIN], np.float32)))
        cond = g.op("Range", g.const(0), seq, g.const(1))
        row = g.op("Reshape", g.op("Add", cond, g.const(1)), g.shape_of(seq, 1))
        additive = g.op("Where", g.op("Less", cond, row), g.const(0.0, np.float32), full)
    if additive is not None:  # [None, None, :, :].expand(batch, 1, seq, seq)
        additive = g.op("Expand", g.unsqueeze(additive, [0, 1]), g.shape_of(batch, 1, seq, seq))

    for layer in range(layers):
        p = f"transformer.h.{layer}"
        g.scope = f"/transformer/h.{layer}/attn"
        a = g.layer_norm(x, f"{p}.ln_1", hidden, 1e-5)
        qkv = g.linear(a, f"{p}.attn.c_attn", hidden, 3 * hidden)
        if opset >= 18:
            q, k, v = g.ops("Split", qkv, axis=2, num_outputs=3, outputs=3)
        else:
            q, k, v = g.ops("Split", qkv, g.const([hidden] * 3), axis=2, outputs=3)

        def split_heads(t: str, perm: list[int]) -> str:
            shape = g.shape_of(g.dim(t, 0), g.dim(t, 1), heads, hd)
            return g.op("Transpose", g.op("Reshape", t, shape), perm=perm)

        q, k, v = split_heads(q, [0, 2, 1, 3]), split_heads(k, [0, 2, 3, 1]), split_heads(v, [0, 2, 1, 3])
        w = g.op("Div", g.op("MatMul", q, k), g.const(float(hd) ** 0.5, np.float32))
        if mask == "slice":
            bias = g.init(f"{p}.attn.bias", np.tril(np.ones((max_pos, max_pos), bool))[None, None])
            q_len, k_len = g.dim(q, 2), g.dim(k, 3)
            k_end = g.unsqueeze(k_len, [0])
            rows = g.op("Slice", bias, g.unsqueeze(g.op("Sub", k_len, q_len), [0]), k_end, g.const([2]), g.const([1]))
            causal = g.op("Slice", rows, g.const([0]), k_end, g.const([3]), g.const([1]))
            w = g.op("Where", causal, w, g.const(F32_MIN, np.float32))
        else:
            w = g.op("Add", w, additive)
        probs = g.op("Softmax", w, axis=-1)
        o = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
        o = g.op("Reshape", o, g.shape_of(g.dim(o, 0), g.dim(o, 1), hidden))
        x = g.op("Add", g.linear(o, f"{p}.attn.c_proj", hidden, hidden), x)
        g.scope = f"/transformer/h.{layer}/mlp"
        m = g.gelu_tanh(g.linear(g.layer_norm(x, f"{p}.ln_2", hidden, 1e-5), f"{p}.mlp.c_fc", hidden, 4 * hidden))
        x = g.op("Add", x, g.linear(m, f"{p}.mlp.c_proj", 4 * hidden, hidden))

    g.scope = "/lm_head"
    x = g.layer_norm(x, "transformer.ln_f", hidden, 1e-5)
    logits = g.op("MatMul", x, g.op("Transpose", wte, perm=[1, 0]))  # tied embeddings
    return g.build([("input_ids", TensorProto.INT64, ["batch", "seq"])],
                   [("logits", logits, TensorProto.FLOAT, ["batch", "seq", vocab])])


def gpt2_feeds(dims: dict[str, int], seed: int = 0, vocab: int = 64) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"input_ids": rng.integers(0, vocab, size=(dims["batch"], dims["seq"]), dtype=np.int64)}


# ---- ViT / MLP-Mixer-ish patch block ----------------------------------------------------------

def mixer_block(channels: int = 32, classes: int = 10, patch: int = 4, seed: int = 2) -> onnx.ModelProto:
    """pixels [batch, 3, patch, width] → patches (width // patch of them) → one block → logits.

    Outputs logits [batch, classes] and the token features [batch, width // patch, channels].
    """
    g = GraphBuilder("mixer_block", 13, seed)
    g.scope = "/patchify"
    batch, n = g.dim("pixels", 0), g.op("Div", g.dim("pixels", 3), g.const(patch))
    x = g.op("Reshape", "pixels", g.shape_of(batch, 3, patch, n, patch))  # [b, 3, py, n, px]
    x = g.op("Transpose", x, perm=[0, 3, 2, 4, 1])  # [b, n, py, px, 3]
    x = g.op("Reshape", x, g.const([0, -1, 3 * patch * patch]))  # 0 copies batch, -1 infers n
    x = g.linear(x, "stem", 3 * patch * patch, channels)

    g.scope = "/block/token_mixing"
    t = g.op("Transpose", g.layer_norm(x, "block.norm1", channels, 1e-6), perm=[0, 2, 1])  # [b, C, n]
    mixed = g.op("Sub", g.reduce_mean(t, [2]), t)  # average pooling minus identity (PoolFormer)
    scale = g.init("block.layer_scale1", np.full(channels, 0.5, np.float32))
    x = g.op("Add", x, g.op("Mul", g.op("Transpose", mixed, perm=[0, 2, 1]), scale))
    g.scope = "/block/channel_mixing"
    h = g.gelu_erf(g.linear(g.layer_norm(x, "block.norm2", channels, 1e-6), "block.fc1", channels, 2 * channels))
    x = g.op("Add", x, g.linear(h, "block.fc2", 2 * channels, channels))

    g.scope = "/head"
    x = g.layer_norm(x, "norm", channels, 1e-6)
    logits = g.linear(g.reduce_mean(x, [1], keepdims=0), "head", channels, classes)
    return g.build([("pixels", TensorProto.FLOAT, ["batch", 3, patch, "width"])],
                   [("logits", logits, TensorProto.FLOAT, ["batch", classes]),
                    ("features", x, TensorProto.FLOAT, ["batch", "tokens", channels])])


def mixer_feeds(dims: dict[str, int], seed: int = 0, patch: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"pixels": rng.standard_normal((dims["batch"], 3, patch, dims["width"])).astype(np.float32)}


# ---- small CNN ------------------------------------------------------------------------------

def small_cnn(classes: int = 10, seed: int = 3) -> onnx.ModelProto:
    """Conv3x3 → Relu → MaxPool2 → Conv3x3 (stride 2) → Relu → ReduceMean(H, W) → Gemm."""
    g = GraphBuilder("small_cnn", 13, seed)
    g.scope = "/features"
    x = g.op("Conv", "image", g.weight("conv1.weight", (8, 3, 3, 3), 0.3), g.weight("conv1.bias", (8,), 0.1),
             kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    x = g.op("MaxPool", g.op("Relu", x), kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("Conv", x, g.weight("conv2.weight", (16, 8, 3, 3), 0.2), g.weight("conv2.bias", (16,), 0.1),
             kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
    x = g.reduce_mean(g.op("Relu", x), [2, 3], keepdims=0)
    g.scope = "/classifier"
    logits = g.op("Gemm", x, g.weight("fc.weight", (classes, 16), 0.25), g.weight("fc.bias", (classes,), 0.1),
                  transB=1)
    return g.build([("image", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
                   [("logits", logits, TensorProto.FLOAT, ["batch", classes])])


def cnn_feeds(dims: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"image": rng.standard_normal((dims["batch"], 3, dims["height"], dims["width"])).astype(np.float32)}


# ---- the table tests iterate ----------------------------------------------------------------

@dataclass(frozen=True)
class ModelCase:
    """A model, its feeds, the dims it compiles for and the dims it then runs at (in order).

    The schedule includes 1-sized dims and dims beyond the compile-time ones (buffer regrowth).
    `needs` lists (domain, op_type) that must be registered for the case to apply.
    """

    build: Callable[[], onnx.ModelProto]
    feeds: Callable[[dict[str, int], int], dict[str, np.ndarray]]
    compile_dims: dict[str, int]
    schedule: tuple[dict[str, int], ...]
    needs: tuple[tuple[str, str], ...] = ()


_SEQ_SCHEDULE = ({"batch": 2, "seq": 8}, {"batch": 1, "seq": 1}, {"batch": 3, "seq": 5},
                 {"batch": 2, "seq": 19}, {"batch": 1, "seq": 3})

MODELS: dict[str, ModelCase] = {
    "bert_encoder": ModelCase(bert_encoder, bert_feeds, {"batch": 2, "seq": 8}, _SEQ_SCHEDULE),
    "gpt2_trilu_opset14": ModelCase(lambda: gpt2_block(opset=14, mask="trilu"), gpt2_feeds,
                                    {"batch": 2, "seq": 8}, _SEQ_SCHEDULE),
    "gpt2_range_opset18": ModelCase(lambda: gpt2_block(opset=18, mask="range"), gpt2_feeds,
                                    {"batch": 2, "seq": 8}, _SEQ_SCHEDULE),
    "gpt2_slice_opset17": ModelCase(lambda: gpt2_block(opset=17, mask="slice"), gpt2_feeds,
                                    {"batch": 2, "seq": 8}, _SEQ_SCHEDULE),
    "mixer_block": ModelCase(mixer_block, mixer_feeds, {"batch": 2, "width": 16},
                             ({"batch": 2, "width": 16}, {"batch": 1, "width": 4}, {"batch": 3, "width": 12},
                              {"batch": 2, "width": 40})),
    "small_cnn": ModelCase(small_cnn, cnn_feeds, {"batch": 2, "height": 8, "width": 8},
                           ({"batch": 2, "height": 8, "width": 8}, {"batch": 1, "height": 5, "width": 7},
                            {"batch": 3, "height": 12, "width": 16}),
                           needs=(("", "Conv"), ("", "MaxPool"))),
}

# Ops that compute a shape from shapes: a chain of them starting at Shape must fold completely.
SHAPE_CHAIN_OPS = frozenset({"Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast",
                             "Add", "Sub", "Mul", "Div", "Constant", "Identity"})


_DATA_FIRST = frozenset({"Gather", "Slice", "Squeeze", "Unsqueeze", "Cast", "Identity"})


def shape_chain_nodes(model: onnx.ModelProto) -> set[str]:
    """Names of nodes computing shape data only: reached from Shape through SHAPE_CHAIN_OPS nodes
    whose every input is a constant or such a node's output (Range/ConstantOfShape/Expand stop it:
    their output size depends on values, so they are real work over symbolic sizes)."""
    consts = {t.name for t in model.graph.initializer}
    shape_data: set[str] = set()
    names: set[str] = set()
    for node in model.graph.node:  # exporters emit topological order; check_model enforces it
        ins = [i for i in node.input if i]
        if node.op_type == "Constant":
            consts.update(node.output)
        elif node.op_type == "Shape" or (node.op_type in SHAPE_CHAIN_OPS and ins
                                         and all(i in consts or i in shape_data for i in ins)
                                         and (ins[0] in shape_data if node.op_type in _DATA_FIRST
                                              else any(i in shape_data for i in ins))):
            shape_data.update(node.output)
            names.add(node.name)
    return names


__all__ = ["F32_MIN", "GPT2_MASKS", "MODELS", "SHAPE_CHAIN_OPS", "GraphBuilder", "ModelCase", "bert_encoder",
           "bert_feeds", "cnn_feeds", "gpt2_block", "gpt2_feeds", "mixer_block", "mixer_feeds",
           "shape_chain_nodes", "small_cnn"]
