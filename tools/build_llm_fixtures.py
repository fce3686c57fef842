"""Build LLM folders with the real exporters, as committed test fixtures under tests/data/llm/.

torch, transformers, onnxruntime-genai's model builder and optimum are NOT dependencies of onyxia
or of its tests. This developer script runs in its own environment (shared by the team):

    python3 -m venv /work/exporters/venv            # the builder wants transformers 5
    /work/exporters/venv/bin/pip install torch==2.13.0 transformers onnxruntime-genai onnxruntime \\
        tokenizers onnx onnxscript
    python3 -m venv /work/exporters/venv-optimum    # optimum-onnx wants transformers < 4.58
    /work/exporters/venv-optimum/bin/pip install torch==2.13.0 "transformers<4.58" optimum optimum-onnx \\
        onnx onnxruntime tokenizers onnxscript
    /work/exporters/venv/bin/python tools/build_llm_fixtures.py [--only gemma2] [--big DIR] \\
        [--optimum-python /work/exporters/venv-optimum/bin/python]

For each family it creates a tiny random-weight Hugging Face checkpoint with `transformers`
(vocabulary 512, hidden 32, MLP 64, 2 layers, 2 query heads and 1 KV head of 16; sliding window 16
for Mistral and Gemma-2/3, so the tests' prompts cross it) and a BPE tokenizer.json trained with
`tokenizers` on a fixed text, then runs:

- onnxruntime-genai's builder (`python -m onnxruntime_genai.models.builder`) for
  {cpu fp32, cpu int4, webgpu fp16, webgpu int4} → tests/data/llm/genai/<family>-<target>-<precision>/
- `optimum-cli export onnx --task text-generation-with-past` for a few families
  → tests/data/llm/optimum/<family>/
- transformers.js' layout for Llama: the Optimum folder's decoder as onnx/model.onnx beside the
  variants transformers.js' scripts/quantize.py makes with onnxruntime's quantization tools
  (onnx/model_fp16, _quantized, _int8, _uint8, _q4, _q4f16, _bnb4.onnx, its settings) →
  tests/data/llm/transformersjs/<family>/. `--transformersjs` rebuilds just these from the
  committed Optimum folders (needs onnxruntime and onnx only, no torch). transformers.js also
  runs onnxslim over its fp16 files; this script does not (onnxslim only reorders and folds).
- the older transformers.js layout for Llama: Optimum 1.x's legacy export (`legacy=True`: a
  merged decoder, decoder_model_merged.onnx, whose If picks the graph without or with a cache by
  a `use_cache_branch` input) as onnx/decoder_model_merged.onnx and its q8 copy
  onnx/decoder_model_merged_quantized.onnx → tests/data/llm/transformersjs-merged/llama/.
  `--merged --legacy-python PY` rebuilds just this (PY: an environment with optimum 1.x, e.g.
  `pip install torch transformers==4.46.3 optimum==1.23.3 onnx onnxscript onnxruntime`).

A folder is written exactly as the exporter leaves it, except that files the decoder does not
need at run time and that only repeat the checkpoint (chat templates, vocab.json/merges.txt,
special_tokens_map.json) are dropped to keep the fixtures small. An exporter that fails for a
(family, target, precision) is recorded in tests/data/llm/MANIFEST.json instead of aborting, with
every exporter's version.

`--big DIR` instead writes one ~30M-parameter Llama (cpu fp32, webgpu fp16 and cpu int4) to DIR for
benchmarks/bench_llm.py; it is not committed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "tests" / "data" / "llm"
SEED = 0
VOCAB = 512
WINDOW = 16  # sliding window of Mistral and Gemma-2/3: the tests' prompts are longer
TARGETS = [("cpu", "fp32"), ("cpu", "int4"), ("webgpu", "fp16"), ("webgpu", "int4")]
EOS_ID = 2

# A fixed English text for the tokenizer; what it says does not matter, only that it is stable.
CORPUS = """\
The river ran past the old stone mill, and the children counted the boats that came down with
the morning light. Rain fell on the roofs of the town while the baker opened his shop and the
first bread of the day went into the oven. A wind from the north carried the smell of snow over
the hills; the shepherd brought the sheep down into the valley before the storm could reach them.
In the library the clock struck nine, and the readers looked up from their books for a moment.
Numbers are written 0 1 2 3 4 5 6 7 8 9 and words are separated by spaces, commas, and stops.
Once upon a time there was a small fox who wanted to see the sea. She walked for many days and
nights, past farms and forests, until one evening she heard the sound of waves behind the dunes.
""" * 4


@dataclass
class Family:
    """One model family: its transformers config and which exporters to run."""

    name: str
    config_class: str  # transformers class name
    config: dict
    optimum: bool = False
    # Gemma multiplies embeddings by sqrt(hidden): with a tied lm_head, embeddings as large as the
    # other weights make every step predict its own input token; smaller ones keep greedy varied.
    embed_std: float | None = None
    targets: list[tuple[str, str]] = field(default_factory=lambda: list(TARGETS))


def families(hidden: int = 32, layers: int = 2, intermediate: int = 64, vocab: int = VOCAB) -> list[Family]:
    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                  num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                  bos_token_id=1, eos_token_id=EOS_ID, pad_token_id=3, rms_norm_eps=1e-6, tie_word_embeddings=False)
    head = hidden // 2  # onnxruntime's CPU GroupQueryAttention wants a multiple of 16
    sliding = ["sliding_attention", "full_attention"] * (layers // 2) + ["sliding_attention"] * (layers % 2)
    return [
        Family("llama", "LlamaConfig", {**common}, optimum=True),
        # transformers 5's MistralConfig has no layer_types, and the builder then exports every layer
        # without a window (local_window_size = -1); naming them sliding keeps Mistral's window.
        Family("mistral", "MistralConfig", {**common, "sliding_window": WINDOW, "head_dim": head,
                                            "layer_types": ["sliding_attention"] * layers}),
        Family("qwen2", "Qwen2Config", {**common, "sliding_window": None, "use_sliding_window": False,
                                        "tie_word_embeddings": True}, optimum=True),
        Family("qwen3", "Qwen3Config", {**common, "head_dim": head, "sliding_window": None,
                                        "use_sliding_window": False, "tie_word_embeddings": True}, optimum=True),
        Family("gemma", "GemmaConfig", {**common, "head_dim": head, "tie_word_embeddings": True}, embed_std=0.05),
        Family("gemma2", "Gemma2Config", {**common, "head_dim": head, "sliding_window": WINDOW,
                                          "layer_types": sliding, "query_pre_attn_scalar": head,
                                          "tie_word_embeddings": True}, embed_std=0.05),
        # onnxruntime-genai 0.18's builder fails on Gemma-3 under transformers 5, which nests
        # rope_parameters per layer type (KeyError 'rope_type'), as it does for a hub config.json.
        Family("gemma3", "Gemma3TextConfig", {**common, "head_dim": head, "sliding_window": WINDOW,
                                              "layer_types": sliding, "query_pre_attn_scalar": head,
                                              "tie_word_embeddings": True}, optimum=True, embed_std=0.05),
        Family("phi3", "Phi3Config", {**common, "num_key_value_heads": 2, "original_max_position_embeddings": 256,
                                      "pad_token_id": 3, "sliding_window": None}),
        Family("smollm3", "SmolLM3Config", {**common, "no_rope_layers": [1, 0] * (layers // 2) + [1] * (layers % 2),
                                            "use_sliding_window": False, "sliding_window": None}),
    ]


# ---- the Hugging Face checkpoint -------------------------------------------------------------
def train_tokenizer(vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([CORPUS], trainer)
    return tok


def make_checkpoint(family: Family, hf_dir: Path, weight_scale: float) -> None:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(SEED)
    config = getattr(transformers, family.config_class)(**family.config)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    with torch.no_grad():
        # Larger than HF's 0.02 init, so logits are spread and greedy choices are not near-ties.
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, weight_scale)
        if family.embed_std is not None:
            model.get_input_embeddings().weight.normal_(0.0, family.embed_std)
        # A random model must not stop early: the EOS logit is always 0 (others reach above it).
        model.get_output_embeddings().weight[EOS_ID].zero_()
    model.generation_config.eos_token_id = EOS_ID
    model.save_pretrained(hf_dir, safe_serialization=True)
    tok = PreTrainedTokenizerFast(tokenizer_object=train_tokenizer(config.vocab_size), bos_token="<s>",
                                  eos_token="</s>", unk_token="<unk>", pad_token="<pad>")
    tok.save_pretrained(hf_dir)


# ---- exporters --------------------------------------------------------------------------------
KEEP_SUFFIXES = (".onnx", ".onnx.data", ".data")
KEEP_FILES = {"genai_config.json", "tokenizer.json", "tokenizer_config.json", "config.json",
              "generation_config.json"}


def prune(folder: Path) -> None:
    for path in folder.iterdir():
        if path.is_dir():
            prune(path)
        elif path.name not in KEEP_FILES and not path.name.endswith(KEEP_SUFFIXES):
            path.unlink()


def run(cmd: list[str], log: Path) -> tuple[bool, str]:
    with log.open("a") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, text=True)
    if proc.returncode == 0:
        return True, ""
    tail = log.read_text().strip().splitlines()[-3:]
    return False, " | ".join(tail)


def genai_export(hf_dir: Path, out: Path, ep: str, precision: str, cache: Path, log: Path,
                 extra: list[str] = ()) -> tuple[bool, str]:
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_dir), "-o", str(out),
           "-p", precision, "-e", ep, "-c", str(cache)]
    if extra:
        cmd += ["--extra_options", *extra]
    return run(cmd, log)


def optimum_export(python: str, hf_dir: Path, out: Path, log: Path) -> tuple[bool, str]:
    cli = Path(python).parent / "optimum-cli"
    return run([str(cli), "export", "onnx", "--model", str(hf_dir), "--task", "text-generation-with-past",
                str(out)], log)


COMMON_PACKAGES = ["onnxruntime", "transformers", "torch", "tokenizers", "onnx"]


def versions(python: str, exporter: str) -> dict[str, str]:
    """Versions of the exporter's packages installed for `python`."""
    names = [exporter, *COMMON_PACKAGES] + (["optimum-onnx"] if exporter == "optimum" else [])
    code = ("import json; from importlib import metadata as m\n"
            "def v(n):\n    try: return m.version(n)\n    except m.PackageNotFoundError: return None\n"
            f"print(json.dumps({{n: v(n) for n in {names!r}}}))")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout
    return {k: v for k, v in json.loads(out).items() if v}


def build_all(only: list[str] | None, out_dir: Path, optimum_python: str) -> dict:
    manifest: dict = {"exporters": {"genai": versions(sys.executable, "onnxruntime-genai"),
                                    "optimum": versions(optimum_python, "optimum")},
                      "window": WINDOW, "folders": {}}
    with tempfile.TemporaryDirectory(prefix="onyxia-llm-fixtures-") as tmp:
        tmp_path = Path(tmp)
        log = tmp_path / "build.log"  # the exporters' output; a failure's last lines go to the manifest
        out_dir.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        for family in families():
            if only and family.name not in only:
                continue
            hf_dir = tmp_path / "hf" / family.name
            make_checkpoint(family, hf_dir, weight_scale=0.15)
            for ep, precision in family.targets:
                name = f"genai/{family.name}-{ep}-{precision}"
                dest = out_dir / name
                shutil.rmtree(dest, ignore_errors=True)
                ok, why = genai_export(hf_dir, dest, ep, precision, tmp_path / "cache", log)
                if ok:
                    prune(dest)
                else:
                    shutil.rmtree(dest, ignore_errors=True)
                manifest["folders"][name] = {"exporter": "onnxruntime-genai builder", "family": family.name,
                                             "target": ep, "precision": precision, "ok": ok, "error": why}
                print(f"{name}: {'ok' if ok else 'FAILED ' + why}", flush=True)
            if family.optimum:
                name = f"optimum/{family.name}"
                dest = out_dir / name
                shutil.rmtree(dest, ignore_errors=True)
                ok, why = optimum_export(optimum_python, hf_dir, dest, log)
                if ok:
                    prune(dest)
                    # optimum-onnx (transformers 4.x) cannot load a tokenizer saved by transformers 5
                    # and skips it silently; a downloaded folder ships the checkpoint's tokenizer.json.
                    for file in ("tokenizer.json", "tokenizer_config.json"):
                        if not (dest / file).exists():
                            shutil.copy(hf_dir / file, dest / file)
                else:
                    shutil.rmtree(dest, ignore_errors=True)
                manifest["folders"][name] = {"exporter": "optimum-cli export onnx", "family": family.name,
                                             "target": "text-generation-with-past", "precision": "fp32",
                                             "ok": ok, "error": why}
                print(f"{name}: {'ok' if ok else 'FAILED ' + why}", flush=True)
                if ok and family.name in TRANSFORMERSJS_FAMILIES:
                    name = f"transformersjs/{family.name}"
                    decoders = transformersjs_variants(dest, out_dir / name)
                    manifest["folders"][name] = transformersjs_record(family.name, decoders)
                    print(f"{name}: ok", flush=True)
    return manifest


# ---- transformers.js' quantized variants ---------------------------------------------------------
TRANSFORMERSJS_FAMILIES = ("llama",)
TRANSFORMERSJS_DECODERS = ("fp32", "fp16", "q8", "int8", "uint8", "q4", "q4f16", "bnb4")


def transformersjs_q8(model, weight_type=None):
    """transformers.js' quantize_q8: dynamic quantization, uint8 activations, QInt8 weights by default."""
    from onnxruntime.quantization import QuantizationMode, QuantType
    from onnxruntime.quantization.onnx_quantizer import ONNXQuantizer
    from onnxruntime.quantization.registry import IntegerOpsRegistry

    quantizer = ONNXQuantizer(model, False, False, mode=QuantizationMode.IntegerOps, static=False,
                              weight_qType=weight_type or QuantType.QInt8, activation_qType=QuantType.QUInt8,
                              tensors_range=None, nodes_to_quantize=[], nodes_to_exclude=[],
                              op_types_to_quantize=set(IntegerOpsRegistry.keys()),
                              extra_options={"EnableSubgraph": True, "MatMulConstBOnly": True})
    quantizer.quantize_model()
    return quantizer.model.model


def transformersjs_variants(optimum_dir: Path, dest: Path) -> list[str]:
    """`optimum_dir` in transformers.js' layout at `dest`: its files at the top, the decoder as
    onnx/model.onnx and onnx/model_<suffix>.onnx per dtype, each made as transformers.js'
    scripts/quantize.py makes it (onnxruntime's quantizers, the script's default settings)."""
    import onnx
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization.matmul_bnb4_quantizer import MatMulBnb4Quantizer
    from onnxruntime.transformers import float16

    try:  # the script's MatMul4BitsQuantizer, renamed in onnxruntime 1.20
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer as MatMul4BitsQuantizer
    except ImportError:
        from onnxruntime.quantization.matmul_4bits_quantizer import MatMul4BitsQuantizer

    shutil.rmtree(dest, ignore_errors=True)
    (dest / "onnx").mkdir(parents=True)
    for path in optimum_dir.iterdir():
        if path.name != "model.onnx":
            shutil.copy(path, dest / path.name)
    source = optimum_dir / "model.onnx"

    def save(model, suffix: str) -> None:
        onnx.save(model, str(dest / "onnx" / f"model{suffix}.onnx"))

    def q8(weight_type) -> onnx.ModelProto:
        return transformersjs_q8(onnx.load(str(source)), weight_type)

    def fp16(model) -> onnx.ModelProto:  # quantize_fp16: float16 inside, float32 inputs and outputs
        return float16.convert_float_to_float16(model, keep_io_types=True)

    def q4() -> onnx.ModelProto:  # quantize_q4: block 32, symmetric, accuracy_level unset
        quantizer = MatMul4BitsQuantizer(model=onnx.load(str(source)), block_size=32, is_symmetric=True,
                                         accuracy_level=None)
        quantizer.process()
        return quantizer.model.model

    shutil.copy(source, dest / "onnx" / "model.onnx")
    save(fp16(onnx.load(str(source))), "_fp16")
    save(q8(QuantType.QInt8), "_quantized")  # "q8": QInt8 weights unless Conv / GQA / MHA are present
    save(q8(QuantType.QInt8), "_int8")
    save(q8(QuantType.QUInt8), "_uint8")
    save(q4(), "_q4")
    save(fp16(q4()), "_q4f16")
    bnb4 = MatMulBnb4Quantizer(model=onnx.load(str(source)), block_size=64, quant_type=MatMulBnb4Quantizer.NF4)
    bnb4.process()
    save(bnb4.model.model, "_bnb4")
    return list(TRANSFORMERSJS_DECODERS)


def transformersjs_record(family: str, decoders: list[str], exporter: str | None = None) -> dict:
    import onnxruntime

    return {"exporter": exporter or "onnxruntime.quantization as transformers.js scripts/quantize.py runs it",
            "family": family, "target": "transformers.js", "precision": "fp32", "decoders": decoders,
            "quantizer": f"onnxruntime {onnxruntime.__version__}", "ok": True, "error": ""}


# Optimum 1.x exports with torch.onnx's TorchScript exporter; torch >= 2.9 defaults to dynamo.
LEGACY_EXPORT = """
import functools, sys, torch
export = torch.onnx.export
torch.onnx.export = functools.wraps(export)(lambda *a, **kw: export(*a, **{"dynamo": False, **kw}))
from optimum.exporters.onnx import main_export
main_export(sys.argv[1], sys.argv[2], task="text-generation-with-past", legacy=True)
"""


def build_merged(out_dir: Path, legacy_python: str) -> dict:
    """transformersjs-merged/llama: Optimum 1.x's merged decoder (and its q8 copy) of the llama
    checkpoint, in transformers.js' older layout."""
    import onnx

    family = next(f for f in families() if f.name == "llama")
    name = f"transformersjs-merged/{family.name}"
    dest = out_dir / name
    with tempfile.TemporaryDirectory(prefix="onyxia-llm-merged-") as tmp:
        hf_dir, export_dir, log = Path(tmp) / "hf", Path(tmp) / "export", Path(tmp) / "build.log"
        make_checkpoint(family, hf_dir, weight_scale=0.15)
        ok, why = run([legacy_python, "-c", LEGACY_EXPORT, str(hf_dir), str(export_dir)], log)
        if not ok:
            return {name: {"exporter": "optimum 1.x legacy export", "family": family.name, "target": "transformers.js",
                           "precision": "fp32", "ok": False, "error": why}}
        shutil.rmtree(dest, ignore_errors=True)
        (dest / "onnx").mkdir(parents=True)
        for file in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
            source = export_dir / file if (export_dir / file).exists() else hf_dir / file
            shutil.copy(source, dest / file)
        merged = export_dir / "decoder_model_merged.onnx"
        shutil.copy(merged, dest / "onnx" / "decoder_model_merged.onnx")
        quantized = transformersjs_q8(onnx.load(str(merged)))
        onnx.save(quantized, str(dest / "onnx" / "decoder_model_merged_quantized.onnx"))
    versions_used = versions(legacy_python, "optimum")
    record = transformersjs_record(family.name, ["fp32", "q8"], "optimum " + versions_used.get("optimum", "?") +
                                   " legacy export (merged decoder) + onnxruntime.quantization (q8)")
    return {name: record}


def build_big(dest: Path) -> None:
    """A ~30M-parameter Llama for the LLM benchmark (cpu fp32, webgpu fp16, cpu int4), not committed."""
    family = Family("llama", "LlamaConfig", {})
    family.config = families(hidden=512, layers=8, intermediate=1408, vocab=8000)[0].config
    family.config.update(num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024)  # head 64
    with tempfile.TemporaryDirectory(prefix="onyxia-llm-big-") as tmp:
        hf_dir = Path(tmp) / "hf"
        make_checkpoint(family, hf_dir, weight_scale=0.05)
        log = dest / "build.log"
        dest.mkdir(parents=True, exist_ok=True)
        for ep, precision in [("cpu", "fp32"), ("webgpu", "fp16"), ("cpu", "int4")]:
            out = dest / f"llama30m-{ep}-{precision}"
            shutil.rmtree(out, ignore_errors=True)
            ok, why = genai_export(hf_dir, out, ep, precision, Path(tmp) / "cache", log)
            print(f"{out}: {'ok' if ok else 'FAILED ' + why}", flush=True)


def build_long_context(dest: Path) -> None:
    """A long-context config as the builder writes it (a 32k default must load): a tiny Llama whose
    context_length and search.max_length are 4096, cpu fp32, committed as
    tests/data/llm/long/llama-long-cpu-fp32 (the chunked-prefill test runs a 3,000-token prompt
    on it)."""
    family = Family("llama", "LlamaConfig", {})
    family.config = {**families()[0].config, "max_position_embeddings": 4096}
    export_cpu_fp32(family, dest / "llama-long-cpu-fp32", weight_scale=0.15)


def build_gemma270m_shape(dest: Path, context: int = 512) -> None:
    """Gemma-3-270m's tied 262144 x 640 embedding (671 MB in fp32, over WebGPU's 128 MiB binding
    limit) on one layer, exported for cpu fp32; not committed. Gemma-1's builder path stands in
    for Gemma-3's, which onnxruntime-genai 0.18 cannot export under transformers 5."""
    family = Family("gemma270m", "GemmaConfig", {})
    gemma = next(f for f in families(hidden=640, layers=1, intermediate=2048, vocab=262144) if f.name == "gemma")
    family.config = {**gemma.config,
                     "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
                     "max_position_embeddings": context}
    family.embed_std = 0.05
    export_cpu_fp32(family, dest / "gemma270m-shape-cpu-fp32", weight_scale=0.05)


def export_cpu_fp32(family: Family, out: Path, weight_scale: float) -> None:
    """`family`'s random checkpoint through the builder for cpu fp32 into `out` (replaced), its log
    beside it in build.log."""
    with tempfile.TemporaryDirectory(prefix=f"onyxia-llm-{family.name}-") as tmp:
        hf_dir = Path(tmp) / "hf"
        make_checkpoint(family, hf_dir, weight_scale=weight_scale)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(out, ignore_errors=True)
        ok, why = genai_export(hf_dir, out, "cpu", "fp32", Path(tmp) / "cache", out.parent / "build.log")
        print(f"{out}: {'ok' if ok else 'FAILED ' + why}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", help="build only this family (repeatable)")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help=f"output folder ({OUT_DIR})")
    parser.add_argument("--big", type=Path, help="write the ~30M-parameter benchmark folders here instead")
    parser.add_argument("--gemma270m", type=Path, help="write a Gemma-3-270m-shaped (tied 262144 x 640) folder here")
    parser.add_argument("--context", type=int, default=512,
                        help="with --gemma270m: its context length (Gemma-3-270m's published one is 32768)")
    parser.add_argument("--long-context", type=Path,
                        help="write the long-context (4096) Llama folder here (tests/data/llm/long)")
    parser.add_argument("--optimum-python", default="/work/exporters/venv-optimum/bin/python",
                        help="python of an environment with optimum-cli (transformers < 4.58)")
    parser.add_argument("--transformersjs", action="store_true",
                        help="only rebuild the transformers.js folders from the committed Optimum ones")
    parser.add_argument("--merged", action="store_true", help="only rebuild the merged-decoder folder")
    parser.add_argument("--legacy-python", default="/work/exporters/venv-optimum1/bin/python",
                        help="python of an environment with optimum 1.x (its legacy merged export)")
    args = parser.parse_args()
    if args.merged:
        path = args.out / "MANIFEST.json"
        manifest = json.loads(path.read_text())
        records = build_merged(args.out, args.legacy_python)
        manifest["folders"].update(records)
        manifest["exporters"]["optimum-legacy"] = versions(args.legacy_python, "optimum")
        path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        print(records)
        return
    if args.transformersjs:
        path = args.out / "MANIFEST.json"
        manifest = json.loads(path.read_text())
        for family in TRANSFORMERSJS_FAMILIES:
            name = f"transformersjs/{family}"
            decoders = transformersjs_variants(args.out / "optimum" / family, args.out / name)
            manifest["folders"][name] = transformersjs_record(family, decoders)
            print(f"{name}: ok", flush=True)
        path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        return
    if args.big:
        build_big(args.big)
        return
    if args.gemma270m:
        build_gemma270m_shape(args.gemma270m, args.context)
        return
    if args.long_context:
        build_long_context(args.long_context)
        return
    manifest = build_all(args.only, args.out, args.optimum_python)
    path = args.out / "MANIFEST.json"
    if args.only and path.is_file():  # a partial rebuild keeps the other folders' records
        old = json.loads(path.read_text())
        old["folders"].update(manifest["folders"])
        old["exporters"] = manifest["exporters"]
        manifest = old
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
