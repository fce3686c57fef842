"""Tiny decoder-only test models in onnxruntime-genai's folder layout, built in code.

`build_decoder(spec, folder)` writes what genai's model builder exports for Llama, Mistral,
Qwen, Phi and Gemma: `genai_config.json`, `model.onnx` (weights as external data in
`model.onnx.data`) and `tokenizer.json` (a `tokenizers` WordLevel tokenizer). The graph follows
genai's builder node for node:

    input_ids ─Gather(embed)─▶ [×√hidden] ─▶ per layer:
        (Skip)SimplifiedLayerNormalization ─▶ q/k/v MatMul (+bias) [or one packed MatMul]
        [RotaryEmbedding on q and k] ─▶ GroupQueryAttention(past → present) ─▶ o MatMul
        SkipSimplifiedLayerNormalization ─▶ gate/up MatMul ─▶ Sigmoid·Mul (SiLU) ─▶ Mul ─▶ down
    SkipSimplifiedLayerNormalization (final norm) ─▶ lm_head MatMul ─▶ logits
    attention_mask ─ReduceSum─Sub 1─Cast int32─▶ seqlens_k;  Shape─Gather[1]─Cast─▶ total length

Weights are random (seeded) and small; int4 variants run onnxruntime's own MatMulNBitsQuantizer
(what genai's builder calls) to turn MatMul into MatMulNBits and Gather into
GatherBlockQuantized, asymmetric so zero points are present. The EOS column of lm_head is zero,
so greedy decoding of a random model never stops early by accident.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 21
MS_DOMAIN = "com.microsoft"
BOS, EOS, PAD, UNK = 1, 2, 3, 0
SPECIAL_TOKENS = {"<unk>": UNK, "<s>": BOS, "</s>": EOS, "<pad>": PAD}

_WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have an "
    "they you were her she there been one all we their has would when if so no will more can out up who them "
    "some into its then two time could my than first water like other see now long way made over did down only "
    "find use may day get come make sun moon star river stone tree wind fire cloud rain snow light dark"
).split()


@dataclass(frozen=True)
class DecoderSpec:
    """One test model. Defaults give a Llama-style fp32 model with grouped KV heads."""

    family: str = "llama"  # genai_config model.type
    vocab_size: int = 96
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    context_length: int = 128
    max_length: int = 96  # genai_config search.max_length
    rotary: str = "gqa"  # "gqa": do_rotary inside GroupQueryAttention; "op": RotaryEmbedding nodes
    share_buffer: bool = False  # search.past_present_share_buffer
    local_window_size: int = -1  # sliding window attention (Mistral)
    softcap: float = 0.0  # attention logit softcapping (Gemma 2)
    qkv_bias: bool = False  # Qwen
    packed_qkv: bool = False  # Phi-3: one MatMul, GQA splits the packed query
    embed_scale: bool = False  # Gemma: embeddings × √hidden
    int4: bool = False  # MatMulNBits / GatherBlockQuantized with zero points
    block_size: int = 16
    accuracy_level: int | None = None  # MatMulNBits accuracy_level (4: int8 activations, genai's builder)
    rope_theta: float = 10000.0
    epsilon: float = 1e-6
    seed: int = 0

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads

    def with_(self, **changes) -> DecoderSpec:
        return dataclasses.replace(self, **changes)


# The variants the acceptance criteria name, one row each.
VARIANTS: dict[str, DecoderSpec] = {
    "llama": DecoderSpec(),  # GQA with fewer KV heads, rotary inside GQA
    "llama_shared": DecoderSpec(share_buffer=True),  # past and present share one max_length buffer
    "llama_rope_op": DecoderSpec(rotary="op", seed=1),  # RotaryEmbedding nodes fed by position_ids
    "mistral": DecoderSpec(family="mistral", local_window_size=8, num_kv_heads=1, seed=2),  # sliding window
    "qwen": DecoderSpec(family="qwen2", qkv_bias=True, seed=3),
    "phi": DecoderSpec(family="phi3", packed_qkv=True, num_kv_heads=4, seed=4),
    "gemma": DecoderSpec(family="gemma2", softcap=2.0, embed_scale=True, seed=5),  # softcap
    "llama_int4": DecoderSpec(int4=True, seed=6),  # int4 MatMulNBits + GatherBlockQuantized, zero points
}


class _Graph:
    """Collects nodes and initializers with genai-style names."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def init(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, shape: tuple[int, ...], scale: float) -> str:
        return self.init(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def node(self, op: str, inputs: list[str], name: str, n_out: int = 1, domain: str = "",
             outputs: list[str] | None = None, **attrs) -> list[str]:
        outs = outputs or [f"{name}/output_{i}" for i in range(n_out)]
        if op == "SkipSimplifiedLayerNormalization":  # genai leaves mean and inv_std_var unnamed
            outs[1:3] = ["", ""]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, domain=domain or None, **attrs))
        return outs

    def matmul(self, x: str, name: str, k: int, n: int, scale: float | None = None) -> str:
        w = self.weight(f"{name}.weight", (k, n), scale if scale is not None else k ** -0.5)
        return self.node("MatMul", [x, w], f"/model/{name}/MatMul")[0]


def _rotary_caches(spec: DecoderSpec) -> tuple[np.ndarray, np.ndarray]:
    inv_freq = 1.0 / spec.rope_theta ** (np.arange(0, spec.head_size, 2, dtype=np.float64) / spec.head_size)
    freqs = np.outer(np.arange(spec.context_length, dtype=np.float64), inv_freq)
    return np.cos(freqs).astype(np.float32), np.sin(freqs).astype(np.float32)


def build_graph(spec: DecoderSpec) -> onnx.ModelProto:
    """The decoder as an ONNX model (weights inline)."""
    rng = np.random.default_rng(spec.seed)
    g = _Graph(rng)
    h, hs, kvh = spec.hidden_size, spec.head_size, spec.num_kv_heads
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    inputs = [helper.make_tensor_value_info("input_ids", i64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", i64, ["batch_size", "total_sequence_length"])]
    if spec.rotary == "op":
        inputs.append(helper.make_tensor_value_info("position_ids", i64, ["batch_size", "sequence_length"]))
    outputs = [helper.make_tensor_value_info("logits", f32, ["batch_size", "sequence_length", spec.vocab_size])]
    kv_shape = ["batch_size", kvh, "past_sequence_length", hs]
    present_shape = ["batch_size", kvh, "total_sequence_length", hs]
    for i in range(spec.num_layers):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", f32, kv_shape))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", f32, present_shape))

    # attention_mask → seqlens_k and total_sequence_length, as genai's builder does it.
    sub = "/model/attn_mask_reformat/attn_mask_subgraph"
    g.init("/model/constants/INT64/[1]", np.array([1], np.int64))
    g.init("/model/constants/INT64/1", np.array(1, np.int64))
    rsum = g.node("ReduceSum", ["attention_mask", "/model/constants/INT64/[1]"], f"{sub}/ReduceSum", keepdims=0)[0]
    minus = g.node("Sub", [rsum, "/model/constants/INT64/1"], f"{sub}/Sub")[0]
    seqlens_k = g.node("Cast", [minus], f"{sub}/Sub/Cast", to=TensorProto.INT32)[0]
    shape = g.node("Shape", ["attention_mask"], f"{sub}/Shape")[0]
    total = g.node("Gather", [shape, "/model/constants/INT64/1"], f"{sub}/Gather", axis=0)[0]
    total_len = g.node("Cast", [total], f"{sub}/Gather/Cast", to=TensorProto.INT32)[0]

    cos, sin = _rotary_caches(spec)
    g.init("cos_cache", cos)
    g.init("sin_cache", sin)
    embed = g.weight("model.embed_tokens.weight", (spec.vocab_size, h), 1.0)
    x = g.node("Gather", [embed, "input_ids"], "/model/embed_tokens/Gather")[0]
    if spec.embed_scale:
        g.init("/model/constants/FLOAT/embed_scale", np.array(np.sqrt(h), np.float32))
        x = g.node("Mul", [x, "/model/constants/FLOAT/embed_scale"], "/model/embed_tokens/Mul")[0]

    def norm_weight(name: str) -> str:
        return g.init(name, (1.0 + 0.1 * rng.standard_normal(h)).astype(np.float32))

    residual, pending = x, None  # pending: the sub-block output not yet added to the residual
    for i in range(spec.num_layers):
        p = f"/model/layers.{i}"
        w = norm_weight(f"model.layers.{i}.input_layernorm.weight")
        if pending is None:
            ln = g.node("SimplifiedLayerNormalization", [residual, w], f"{p}/input_layernorm/LayerNorm",
                        axis=-1, epsilon=spec.epsilon, stash_type=1)[0]
        else:
            ln, _, _, residual = g.node("SkipSimplifiedLayerNormalization", [pending, residual, w],
                                        f"{p}/input_layernorm/SkipLayerNorm", n_out=4, domain=MS_DOMAIN,
                                        epsilon=spec.epsilon)
        attn_out = _attention(g, spec, ln, i, seqlens_k, total_len)
        w = norm_weight(f"model.layers.{i}.post_attention_layernorm.weight")
        ln2, _, _, residual = g.node("SkipSimplifiedLayerNormalization", [attn_out, residual, w],
                                     f"{p}/post_attention_layernorm/SkipLayerNorm", n_out=4, domain=MS_DOMAIN,
                                     epsilon=spec.epsilon)
        gate = g.matmul(ln2, f"layers.{i}.mlp.gate_proj", h, spec.intermediate_size)
        up = g.matmul(ln2, f"layers.{i}.mlp.up_proj", h, spec.intermediate_size)
        sig = g.node("Sigmoid", [gate], f"{p}/mlp/act_fn/Sigmoid")[0]
        act = g.node("Mul", [gate, sig], f"{p}/mlp/act_fn/Mul")[0]
        prod = g.node("Mul", [act, up], f"{p}/mlp/Mul")[0]
        pending = g.matmul(prod, f"layers.{i}.mlp.down_proj", spec.intermediate_size, h)
    w = norm_weight("model.norm.weight")
    final = g.node("SkipSimplifiedLayerNormalization", [pending, residual, w], "/model/norm/SkipLayerNorm",
                   n_out=4, domain=MS_DOMAIN, epsilon=spec.epsilon)[0]
    lm_head = (rng.standard_normal((h, spec.vocab_size)) * 2.0 * h ** -0.5).astype(np.float32)
    lm_head[:, EOS] = 0.0  # a random model must not stop early: EOS's logit is always 0
    g.init("lm_head.weight", lm_head)
    g.node("MatMul", [final, "lm_head.weight"], "/lm_head/MatMul", outputs=["logits"])

    graph = helper.make_graph(g.nodes, "decoder", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                    helper.make_opsetid(MS_DOMAIN, 1)], ir_version=10)
    model.producer_name = "onyxia tests/llm_models.py"
    return model


def _attention(g: _Graph, spec: DecoderSpec, x: str, i: int, seqlens_k: str, total_len: str) -> str:
    h, hs, nh, kvh = spec.hidden_size, spec.head_size, spec.num_heads, spec.num_kv_heads
    p = f"/model/layers.{i}/attn"
    if spec.packed_qkv:
        q = g.matmul(x, f"layers.{i}.attn.qkv_proj", h, (nh + 2 * kvh) * hs)
        k = v = ""
    else:
        q = g.matmul(x, f"layers.{i}.attn.q_proj", h, nh * hs)
        k = g.matmul(x, f"layers.{i}.attn.k_proj", h, kvh * hs)
        v = g.matmul(x, f"layers.{i}.attn.v_proj", h, kvh * hs)
        if spec.qkv_bias:
            q, k, v = (g.node("Add", [t, g.weight(f"model.layers.{i}.attn.{n}_proj.bias", (width,), 0.1)],
                              f"{p}/{n}_proj/Add")[0]
                       for t, n, width in ((q, "q", nh * hs), (k, "k", kvh * hs), (v, "v", kvh * hs)))
    if spec.rotary == "op":
        q, k = (g.node("RotaryEmbedding", [t, "position_ids", "cos_cache", "sin_cache"],
                       f"{p}/{n}_rotary/RotaryEmbedding", domain=MS_DOMAIN, interleaved=0, num_heads=heads)[0]
                for t, n, heads in ((q, "q", nh), (k, "k", kvh)))
    attrs: dict = {"num_heads": nh, "kv_num_heads": kvh, "scale": hs ** -0.5,
                   "local_window_size": spec.local_window_size, "do_rotary": int(spec.rotary == "gqa"),
                   "rotary_interleaved": 0}
    if spec.softcap:
        attrs["softcap"] = spec.softcap
    gqa_inputs = [q, k, v, f"past_key_values.{i}.key", f"past_key_values.{i}.value", seqlens_k, total_len]
    if spec.rotary == "gqa":
        gqa_inputs += ["cos_cache", "sin_cache"]
    out = g.node("GroupQueryAttention", gqa_inputs, f"{p}/GroupQueryAttention", domain=MS_DOMAIN,
                 outputs=[f"{p}/GroupQueryAttention/output_0", f"present.{i}.key", f"present.{i}.value"], **attrs)[0]
    return g.matmul(out, f"layers.{i}.attn.o_proj", nh * hs, h)


def quantize_int4(model: onnx.ModelProto, block_size: int, accuracy_level: int | None = None) -> onnx.ModelProto:
    """MatMul → MatMulNBits and Gather(embedding) → GatherBlockQuantized, with zero points."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=False, accuracy_level=accuracy_level,
                                          op_types_to_quantize=("MatMul", "Gather"),
                                          quant_axes=(("MatMul", 0), ("Gather", 1)))
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    quantizer = MatMulNBitsQuantizer(model, algo_config=config)
    quantizer.process()
    return _pack_gather_uint4(quantizer.model.model)


def _pack_nibbles(values: np.ndarray) -> np.ndarray:
    """uint4 values along the last axis → uint8 bytes, low nibble first (odd lengths padded)."""
    v = values.astype(np.uint8)
    if v.shape[-1] % 2:
        v = np.concatenate([v, np.zeros((*v.shape[:-1], 1), np.uint8)], axis=-1)
    return (v[..., 0::2] | (v[..., 1::2] << 4)).astype(np.uint8)


def _pack_gather_uint4(model: onnx.ModelProto) -> onnx.ModelProto:
    """GatherBlockQuantized over uint8-packed data with bits=4, the form genai's builder exports
    (onnxruntime's quantizer writes UINT4 tensors instead)."""
    inits = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type != "GatherBlockQuantized":
            continue
        for name in (node.input[0], *(node.input[3:4])):
            t = inits[name]
            if t.data_type in (TensorProto.UINT4, TensorProto.INT4):
                t.CopyFrom(numpy_helper.from_array(_pack_nibbles(numpy_helper.to_array(t)), name))
        node.attribute.append(helper.make_attribute("bits", 4))
    return model


def genai_config(spec: DecoderSpec) -> dict:
    """genai_config.json as onnxruntime-genai's builder writes it."""
    inputs = {"input_ids": "input_ids", "attention_mask": "attention_mask",
              "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"}
    if spec.rotary == "op":
        inputs["position_ids"] = "position_ids"
    return {
        "model": {
            "bos_token_id": BOS,
            "context_length": spec.context_length,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": "model.onnx",
                "head_size": spec.head_size,
                "hidden_size": spec.hidden_size,
                "inputs": inputs,
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
                "num_attention_heads": spec.num_heads,
                "num_hidden_layers": spec.num_layers,
                "num_key_value_heads": spec.num_kv_heads,
            },
            "eos_token_id": [EOS],
            "pad_token_id": PAD,
            "type": spec.family,
            "vocab_size": spec.vocab_size,
        },
        "search": {
            "diversity_penalty": 0.0, "do_sample": False, "early_stopping": True, "length_penalty": 1.0,
            "max_length": spec.max_length, "min_length": 0, "no_repeat_ngram_size": 0, "num_beams": 1,
            "num_return_sequences": 1, "past_present_share_buffer": spec.share_buffer,
            "repetition_penalty": 1.0, "temperature": 1.0, "top_k": 50, "top_p": 1.0,
        },
    }


def build_tokenizer(vocab_size: int):
    """A WordLevel tokenizer over a fixed word list (ids 0-3 are <unk> <s> </s> <pad>)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    words = list(_WORDS)
    while len(SPECIAL_TOKENS) + len(words) < vocab_size:  # pad with synthetic words for big vocabs
        words.append(f"w{len(words)}")
    vocab = dict(SPECIAL_TOKENS)
    for word in words[:vocab_size - len(SPECIAL_TOKENS)]:
        vocab[word] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", BOS)])
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return tok


def build_decoder(spec: DecoderSpec, folder: str | Path, *, model: onnx.ModelProto | None = None) -> Path:
    """Write genai_config.json, model.onnx (+ model.onnx.data) and tokenizer.json into `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if model is None:
        model = build_graph(spec)
        if spec.int4:
            model = quantize_int4(model, spec.block_size, spec.accuracy_level)
    onnx.save_model(model, str(folder / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=1024)
    (folder / "genai_config.json").write_text(json.dumps(genai_config(spec), indent=4))
    build_tokenizer(spec.vocab_size).save(str(folder / "tokenizer.json"))
    return folder


def num_parameters(model_dir: str | Path) -> int:
    """Weights of the model, counting each quantized weight as its unquantized element count
    (scales and zero points left out)."""
    model = onnx.load(str(Path(model_dir) / "model.onnx"), load_external_data=False)
    sizes = {t.name: int(np.prod(t.dims)) for t in model.graph.initializer}
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "MatMulNBits":
            sizes[node.input[1]] = attrs["K"] * attrs["N"]
        elif node.op_type == "GatherBlockQuantized":
            sizes[node.input[0]] *= 8 // attrs.get("bits", 4)
        else:
            continue
        for extra in node.input[2:]:
            sizes.pop(extra, None)
    return sum(sizes.values())


# ---- the reference: onnxruntime, a plain session loop feeding present → past --------------

class OrtDecoder:
    """Greedy decoding with onnxruntime's CPU session, as onnxruntime-genai drives a model."""

    def __init__(self, model_dir: str | Path):
        import onnxruntime as ort

        self.dir = Path(model_dir)
        self.config = json.loads((self.dir / "genai_config.json").read_text())
        decoder = self.config["model"]["decoder"]
        self.session = ort.InferenceSession(str(self.dir / decoder["filename"]), providers=["CPUExecutionProvider"])
        self.input_names = {i.name for i in self.session.get_inputs()}
        self.layers = decoder["num_hidden_layers"]
        self.kv_heads, self.head_size = decoder["num_key_value_heads"], decoder["head_size"]
        self.share = self.config["search"]["past_present_share_buffer"]
        self.max_length = self.config["search"]["max_length"]

    def greedy(self, prompt: list[int], steps: int) -> tuple[list[int], list[np.ndarray]]:
        """`steps` new tokens (no EOS stop) and the last-position logits before each one."""
        return self.run(prompt, steps, lambda logits: int(np.argmax(logits)))

    def run(self, prompt: list[int], steps: int, choose) -> tuple[list[int], list[np.ndarray]]:
        """Like `greedy`, with `choose(last_logits) -> token` picking each token."""
        cache_len = self.max_length if self.share else 0
        past = {f"past_key_values.{i}.{kind}": np.zeros((1, self.kv_heads, cache_len, self.head_size), np.float32)
                for i in range(self.layers) for kind in ("key", "value")}
        ids, total, tokens, logits = list(prompt), 0, [], []
        outputs = ["logits"] + [f"present.{i}.{kind}" for i in range(self.layers) for kind in ("key", "value")]
        for _ in range(steps):
            new = len(ids)
            feeds = {"input_ids": np.array([ids], np.int64),
                     "attention_mask": np.ones((1, total + new), np.int64), **past}
            if "position_ids" in self.input_names:
                feeds["position_ids"] = np.arange(total, total + new, dtype=np.int64)[None]
            result = self.session.run(outputs, feeds)
            logits.append(result[0][0, -1])
            past = {name.replace("present.", "past_key_values."): value
                    for name, value in zip(outputs[1:], result[1:])}
            total += new
            ids = [choose(result[0][0, -1])]
            tokens.append(ids[0])
        return tokens, logits
