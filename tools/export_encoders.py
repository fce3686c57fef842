"""Export transformer encoders (BERT, ViT, Whisper's encoder) from random-weight transformers
models, for tests/gpu/test_attention_fusion.py (tiny widths, committed under
tests/data/exported/encoders/) and for benchmarks (real widths, written wherever --out says).

torch and transformers are not onyxia dependencies; run this in its own environment:

    /tmp/torchenv/bin/python tools/export_encoders.py                    # tiny fixtures
    /tmp/torchenv/bin/python tools/export_encoders.py --size heads32 --only vit whisper \
        --out tests/data/exported/encoders/heads32
    /tmp/torchenv/bin/python tools/export_encoders.py --size full --out /tmp/enc

Each model goes through the TorchScript exporter (`dynamo=False`, `dynamic_axes`) and the dynamo
exporter (`dynamo=True`, `dynamic_shapes`), and BERT also through optimum's exporter from the
locally saved model (no network). Attention is exported as transformers spells it: "eager"
(MatMul, Div by sqrt(d), Add mask, Softmax, MatMul) and "sdpa" (torch's decomposition: the scale
applied to Q and K as its square root, or a Mul after the MatMul). An exporter that fails is
reported and skipped. The versions used are written to the output folder's VERSIONS.txt.
"""

from __future__ import annotations

import argparse
import traceback
from pathlib import Path

import torch
from torch_stubs import patch_register_fake

# torchvision (which transformers imports when installed) registers fake kernels for C ops that
# fail to load in a CPU-only wheel: tools/torch_stubs.py makes that registration forgiving.
patch_register_fake()

import transformers  # noqa: E402
from transformers import BertConfig, BertModel, ViTConfig, ViTModel, WhisperConfig, WhisperModel  # noqa: E402

TINY_DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "exported" / "encoders"
SEED = 0

# (hidden, layers, heads, intermediate) per size; "heads32": tiny but with heads of 32, the size
# FusedAttention's register tiles take (tests/data/exported/encoders/heads32/, ViT and Whisper)
WIDTHS = {"tiny": (32, 2, 4, 64), "heads32": (64, 1, 2, 64), "full": (256, 4, 4, 1024)}
WHISPER = {"tiny": dict(d_model=32, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=64,
                        num_mel_bins=8, max_source_positions=16, decoder_attention_heads=4, decoder_layers=1,
                        decoder_ffn_dim=64),
           "heads32": dict(d_model=64, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=64,
                           num_mel_bins=8, max_source_positions=16, decoder_attention_heads=2, decoder_layers=1,
                           decoder_ffn_dim=64),
           # whisper-tiny's encoder: 384 wide, 4 layers, 6 heads, 80 mel bins, 1500 positions
           "full": dict(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536,
                        num_mel_bins=80, max_source_positions=1500)}


class Encoder(torch.nn.Module):
    """A model's encoder returning its last hidden state only (one output, no pooler)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args):
        return self.model(*args).last_hidden_state


def bert(size: str, attn: str):
    hidden, layers, heads, inter = WIDTHS[size]
    config = BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=inter, vocab_size=30522 if size == "full" else 1000,
                        max_position_embeddings=512 if size == "full" else 64, attn_implementation=attn)
    model = BertModel(config, add_pooling_layer=False).eval()
    ids = torch.randint(0, config.vocab_size, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.int64)
    mask[1, 9:] = 0
    return model, (ids, mask), ["input_ids", "attention_mask"], {0: "batch", 1: "sequence"}


def vit(size: str, attn: str):
    hidden, layers, heads, inter = WIDTHS[size]
    image = 64 if size == "full" else 16
    config = ViTConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                       intermediate_size=inter, image_size=image, patch_size=8, attn_implementation=attn)
    model = ViTModel(config, add_pooling_layer=False).eval()
    return model, (torch.randn(2, 3, image, image),), ["pixel_values"], {0: "batch"}


def whisper(size: str, attn: str):
    config = WhisperConfig(**WHISPER[size], attn_implementation=attn)
    model = WhisperModel(config).get_encoder().eval()
    frames = 2 * config.max_source_positions  # the encoder's two convs halve the frames
    return model, (torch.randn(2, config.num_mel_bins, frames),), ["input_features"], {0: "batch"}


MODELS = {"bert": bert, "vit": vit, "whisper": whisper}


def export(name: str, size: str, attn: str, dynamo: bool, out: Path) -> Path:
    torch.manual_seed(SEED)
    model, args, names, axes = MODELS[name](size, attn)
    wrapper = Encoder(model).eval()
    path = out / f"{name}.{attn}.{'dynamo' if dynamo else 'torchscript'}.onnx"
    if dynamo:
        dims = {i: torch.export.Dim(v, min=1 if i == 0 else 2, max=64 if i == 0 else 512) for i, v in axes.items()}
        torch.onnx.export(wrapper, args, str(path), input_names=names, output_names=["last_hidden_state"],
                          dynamic_shapes=(tuple(dims for _ in args),), dynamo=True, external_data=False)
    else:
        torch.onnx.export(wrapper, args, str(path), input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes={n: axes for n in names}, dynamo=False)
    return path


def export_optimum(size: str, out: Path) -> Path:
    """BERT through optimum's exporter, from the model saved locally (feature-extraction task)."""
    from optimum.exporters.onnx import main_export  # the optimum-onnx package
    torch.manual_seed(SEED)
    model, *_ = bert(size, "eager")
    saved = out / "bert_saved"
    model.save_pretrained(saved)
    target = out / "bert_optimum"
    main_export(str(saved), output=str(target), task="feature-extraction", no_post_process=True)
    path = out / "bert.optimum.onnx"
    (target / "model.onnx").rename(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(WIDTHS), default="tiny")
    parser.add_argument("--out", type=Path, default=TINY_DIR)
    parser.add_argument("--only", nargs="*", default=sorted(MODELS))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    made = []
    for name in args.only:
        for attn in ("eager", "sdpa"):
            for dynamo in (False, True):
                try:
                    made.append(export(name, args.size, attn, dynamo, args.out))
                except Exception:  # an exporter that fails is reported, not fatal
                    print(f"{name} {attn} dynamo={dynamo} failed:\n{traceback.format_exc(limit=3)}")
    if "bert" in args.only:
        try:
            made.append(export_optimum(args.size, args.out))
        except Exception:
            print(f"optimum failed:\n{traceback.format_exc(limit=3)}")
    import onnx
    (args.out / "VERSIONS.txt").write_text(
        f"torch {torch.__version__}\ntransformers {transformers.__version__}\nonnx {onnx.__version__}\n"
        f"seed {SEED}, size {args.size}\n")
    for p in made:
        print(p, p.stat().st_size)


if __name__ == "__main__":
    main()
