"""Export tiny random-weight Whisper, T5 and BART models with optimum, for the encoder-decoder tests
(tests/gpu/test_seq2seq.py, tests/gpu/test_runtime_if.py).

Each model is built from a transformers config (d_model 32, 2 layers, a vocabulary of 96 tokens),
saved to a local folder with a tiny WordLevel tokenizer, then exported offline with
`optimum.exporters.onnx.main_export` twice: with post-processing (encoder_model.onnx +
decoder_model_merged.onnx, the layout transformers.js loads) and without it (encoder_model.onnx +
decoder_model.onnx + decoder_with_past_model.onnx). Written to
tests/data/exported/seq2seq/<model>/{merged,split}/ with config.json, generation_config.json and
tokenizer.json beside the models (Whisper: preprocessor_config.json for 1 s windows of 100 frames, and
features_ref.npz, a test signal with transformers' WhisperFeatureExtractor features), and a line
per model in tests/data/exported/seq2seq/README.md.

torch, transformers and optimum are NOT dependencies of onyxia or of its tests. optimum's ONNX
exporter lives in optimum-onnx, which needs transformers < 4.58; in /tmp/torchenv (transformers 5):

    pip install --target /tmp/tf4lib --no-deps transformers==4.57.1 huggingface_hub==0.36.0 tokenizers==0.22.1
    pip download --no-deps optimum-onnx==0.1.0 && unzip optimum_onnx-0.1.0-*.whl -d /tmp/optonnx/lib
    PYTHONPATH=/tmp/tf4lib:/tmp/optonnx/lib /tmp/torchenv/bin/python tools/export_seq2seq_models.py

Weights are seeded and drawn wider than the models' default init (std 0.02 gives near-tied
logits, so greedy tokens would hinge on rounding), so that greedy decoding is a meaningful check.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from importlib.metadata import version as _version
from pathlib import Path

import numpy as np

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "exported" / "seq2seq"
SEED = 0
VOCAB = 96
WHISPER_SPECIAL = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|translate|>",
                   "<|notimestamps|>"]


def _patch_imports() -> None:
    """torchvision's C ops fail to load in /tmp/torchenv (register_fake tolerates that) and
    diffusers there needs a newer huggingface_hub than transformers 4.57 takes: keep it out."""
    from torch_stubs import patch_register_fake

    patch_register_fake()
    import optimum.utils as ou
    import optimum.utils.import_utils as iu
    iu._diffusers_available = False
    iu.is_diffusers_version = lambda *a, **k: False
    ou.is_diffusers_available = lambda: False


def _tokenizer(folder: Path, special: list[str]) -> None:
    """A WordLevel tokenizer over `special` then word_0, word_1, ... (VOCAB entries in all)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {tok: i for i, tok in enumerate(special)}
    for i in range(len(special), VOCAB):
        vocab[f"w{i}"] = i
    tok = Tokenizer(models.WordLevel(vocab, unk_token=special[-1]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(special)
    tok.save(str(folder / "tokenizer.json"))


def _build(name: str, folder: Path):
    import torch
    import transformers as tf
    torch.manual_seed(SEED)
    if name == "whisper":
        special = WHISPER_SPECIAL
        ids = {t: i for i, t in enumerate(special)}
        cfg = tf.WhisperConfig(vocab_size=VOCAB, num_mel_bins=80, d_model=32, encoder_layers=2, decoder_layers=2,
                               encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                               decoder_ffn_dim=64, max_source_positions=50, max_target_positions=64,
                               pad_token_id=0, bos_token_id=0, eos_token_id=0,
                               decoder_start_token_id=ids["<|startoftranscript|>"], suppress_tokens=[],
                               begin_suppress_tokens=[], init_std=0.3)
        model = tf.WhisperForConditionalGeneration(cfg)
        gen = {"decoder_start_token_id": cfg.decoder_start_token_id, "eos_token_id": 0, "pad_token_id": 0,
               "lang_to_id": {"<|en|>": ids["<|en|>"]},
               "task_to_id": {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
               "no_timestamps_token_id": ids["<|notimestamps|>"], "is_multilingual": True}
        task = "automatic-speech-recognition-with-past"
        shapes = {"nb_max_frames": 2 * cfg.max_source_positions}  # Whisper's encoder takes exactly this
    elif name == "t5":
        special = ["<pad>", "</s>", "<unk>"]
        cfg = tf.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                          num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=32,
                          decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, initializer_factor=4.0)
        model = tf.T5ForConditionalGeneration(cfg)
        gen = {"decoder_start_token_id": 0, "eos_token_id": 1, "pad_token_id": 0}
        task = "text2text-generation-with-past"
        shapes = {}
    else:
        special = ["<s>", "<pad>", "</s>", "<unk>"]
        cfg = tf.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                            decoder_ffn_dim=64, max_position_embeddings=64, bos_token_id=0, pad_token_id=1,
                            eos_token_id=2, decoder_start_token_id=2, forced_bos_token_id=None, init_std=0.3)
        model = tf.BartForConditionalGeneration(cfg)
        gen = {"decoder_start_token_id": 2, "eos_token_id": 2, "pad_token_id": 1, "bos_token_id": 0}
        task = "text2text-generation-with-past"
        shapes = {}
    model.eval()
    model.save_pretrained(folder)
    if name == "whisper":  # 1 s windows (100 frames) instead of 30 s, and reference features
        fe = tf.WhisperFeatureExtractor(feature_size=80, chunk_length=1)
        fe.save_pretrained(folder)
        t = np.arange(12000) / 16000.0  # 0.75 s: padded to the window like real speech
        audio = (0.3 * np.sin(2 * np.pi * (300 + 900 * t) * t) + 0.05 * np.random.default_rng(SEED).standard_normal(
            t.size)).astype(np.float32)
        feats = fe(audio, sampling_rate=16000, return_tensors="np").input_features[0]
        np.savez(folder / "features_ref.npz", audio=audio, input_features=feats.astype(np.float32))
    (folder / "generation_config.json").write_text(json.dumps(gen, indent=1))
    _tokenizer(folder, special)
    return task, shapes


def main() -> None:
    _patch_imports()
    import onnx
    import torch
    import transformers
    from optimum.exporters.onnx import main_export
    names = sys.argv[1:] or ["whisper", "t5", "bart"]
    lines = []
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "hf"
            task, shapes = _build(name, src)
            for layout, post in (("merged", True), ("split", False)):
                dst = OUT_DIR / name / layout
                shutil.rmtree(dst, ignore_errors=True)
                out = Path(tmp) / layout
                main_export(str(src), output=str(out), task=task, no_post_process=not post, device="cpu",
                            do_validation=False, legacy=True, **shapes)
                dst.mkdir(parents=True)
                keep = ("encoder_model.onnx", "decoder_model_merged.onnx") if post else \
                    ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")
                for f in keep:
                    shutil.copy(out / f, dst / f)
                for f in ("config.json", "generation_config.json", "tokenizer.json", "preprocessor_config.json",
                          "features_ref.npz"):
                    if (src / f).exists():
                        shutil.copy(src / f, dst / f)
                files = sorted(p.name for p in dst.glob("*.onnx"))
                size = sum(p.stat().st_size for p in dst.iterdir()) / 1024
                opset = onnx.load(str(dst / files[0]), load_external_data=False).opset_import[0].version
                lines.append(f"- `{name}/{layout}/`: {', '.join(files)} (task {task}, opset {opset}, {size:.0f} KB)")
    readme = OUT_DIR / "README.md"
    readme.write_text(
        "# Encoder-decoder models exported by optimum\n\n"
        "Written by `tools/export_seq2seq_models.py` (do not edit by hand; rerun the script): tiny\n"
        "random-weight Whisper, T5 and BART (d_model 32, 2 layers, 96 tokens, seed 0), exported offline\n"
        "from a local folder with `optimum.exporters.onnx.main_export` (merged: post-processing on, the\n"
        "layout transformers.js loads; split: `no_post_process=True`). Tested by tests/gpu/test_seq2seq.py\n"
        "and tests/gpu/test_runtime_if.py against onnxruntime.\n\n"
        f"- torch {torch.__version__}, transformers {transformers.__version__}, optimum "
        f"{_version('optimum')}, optimum-onnx {_version('optimum-onnx')}, onnx {onnx.__version__}\n"
        + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
