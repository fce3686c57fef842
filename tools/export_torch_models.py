"""Export tiny torch models to ONNX with both torch exporters, for tests/gpu/test_exported.py.

torch is NOT a dependency of onyxia or of its tests (pip would pull the multi-GB CUDA build on a
fresh machine). This developer script runs in its own environment; its small .onnx outputs are
committed under tests/data/exported/ and tested against onnxruntime:

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install torch onnx onnxscript numpy
    /tmp/torchenv/bin/python tools/export_torch_models.py

Each model is exported with the TorchScript exporter (`dynamo=False`, `dynamic_axes`) and the
dynamo exporter (`dynamo=True`, `dynamic_shapes`), both at their default opsets, with batch and
sequence (or batch only, for the CNN) left dynamic. An exporter that fails is recorded in the README
instead of aborting the run. Weights are seeded; files stay well under 300 KB each.
"""

from __future__ import annotations

import argparse
import io
import traceback
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx.reference import ReferenceEvaluator
from torch import nn

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "exported"
SEED = 0
EXPORT_SHAPE, OTHER_SHAPE = (2, 7), (3, 9)  # (batch, seq); the CNN uses the batch only
VOCAB, D_MODEL, HEADS, MAX_POS = 64, 32, 4, 64


# ---- models ------------------------------------------------------------------------------------
class TextEncoder(nn.Module):
    """Token + learned position embeddings, 2 stock TransformerEncoderLayers, masked mean pooling."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D_MODEL)
        self.pos = nn.Embedding(MAX_POS, D_MODEL)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model=D_MODEL, nhead=HEADS, dim_feedforward=64, dropout=0.1,
                                       activation="gelu", batch_first=True) for _ in range(2))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        h = self.tok(input_ids) + self.pos(positions)[None]
        padding = attention_mask == 0  # src_key_padding_mask: True marks padding
        for layer in self.layers:
            h = layer(h, src_key_padding_mask=padding)
        keep = attention_mask.unsqueeze(-1).to(h.dtype)
        return (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)


class CausalBlock(nn.Module):
    """One GPT-2 style pre-LN block written by hand, with an untied lm head."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D_MODEL)
        self.pos = nn.Embedding(MAX_POS, D_MODEL)
        self.ln1, self.ln2, self.ln_f = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
        self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.proj = nn.Linear(D_MODEL, D_MODEL)
        self.fc = nn.Linear(D_MODEL, 4 * D_MODEL)
        self.fc_out = nn.Linear(4 * D_MODEL, D_MODEL)
        self.lm_head = nn.Linear(D_MODEL, VOCAB, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        b, s = input_ids.shape
        h = self.tok(input_ids) + self.pos(torch.arange(s, device=input_ids.device))[None]
        q, k, v = self.qkv(self.ln1(h)).split(D_MODEL, dim=-1)
        q, k, v = (t.view(b, s, HEADS, D_MODEL // HEADS).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.proj(a.transpose(1, 2).reshape(b, s, D_MODEL))
        h = h + self.fc_out(F.gelu(self.fc(self.ln2(h)), approximate="tanh"))
        return self.lm_head(self.ln_f(h))


class SmallCnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, padding=1, groups=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(8, 10))
        # Non-trivial running statistics, so BatchNorm (or its folding into the Conv) matters.
        bn = self.net[1]
        with torch.no_grad():
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.2, 0.2)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)


class GatedMlp(nn.Module):
    """Assorted torch ops that show up around real models: arange position ids, LayerNorm, chunk,
    SiLU gating, Dropout (eval), where, masked_fill, Softmax, cumsum, topk and cat."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Embedding(MAX_POS, 16)
        self.norm = nn.LayerNorm(16)
        self.up = nn.Linear(16, 64)
        self.drop = nn.Dropout(0.2)
        self.down = nn.Linear(32, 16)
        self.head = nn.Linear(16, 12)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, s, _ = x.shape
        position_ids = torch.arange(s, device=x.device).unsqueeze(0).expand(b, s)
        h = self.norm(x) + self.pos(position_ids)
        gate, value = self.up(h).chunk(2, dim=-1)
        h = self.down(self.drop(F.silu(gate) * value))
        h = torch.where(h > 0, h, 0.1 * h)
        h = h.masked_fill(mask.unsqueeze(-1) == 0, 0.0)
        probs = self.head(h).softmax(dim=-1)
        top_values, top_indices = probs.topk(3, dim=-1)
        running = probs.cumsum(dim=-1)
        return torch.cat([top_values, running[..., -4:]], dim=-1), top_indices


# ---- export ------------------------------------------------------------------------------------
@dataclass
class Spec:
    name: str
    build: Callable[[], nn.Module]
    example: Callable[[int, int], tuple[torch.Tensor, ...]]  # (batch, seq) -> inputs
    input_names: list[str]
    output_names: list[str]
    dynamic: dict[str, dict[int, str]]  # input name -> {axis: symbol}
    notes: str = ""
    exporters: tuple[str, ...] = ("torchscript", "dynamo")


def _ids(batch: int, seq: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(1))


def _mask(batch: int, seq: int) -> torch.Tensor:
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[0, max(1, seq - 2):] = 0  # the first row is padded (never fully: softmax would be NaN)
    return mask


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1))


SPECS = [
    Spec("text_encoder", TextEncoder, lambda b, s: (_ids(b, s), _mask(b, s)), ["input_ids", "attention_mask"],
         ["pooled"], {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}},
         "nn.Embedding + positions, 2x nn.TransformerEncoderLayer(d_model=32, nhead=4, gelu, batch_first) "
         "with src_key_padding_mask, masked mean pooling"),
    Spec("causal_block", CausalBlock, lambda b, s: (_ids(b, s),), ["input_ids"], ["logits"],
         {"input_ids": {0: "batch", 1: "seq"}},
         "GPT-style block by hand: fused QKV Linear, split, view/transpose to heads, "
         "F.scaled_dot_product_attention(is_causal=True), GELU(tanh), LayerNorm, residuals, lm head"),
    Spec("small_cnn", SmallCnn, lambda b, s: (_randn(b, 3, 16, 16),),
         ["images"], ["logits"], {"images": {0: "batch"}},
         "Conv2d-BatchNorm2d-ReLU-MaxPool2d-Conv2d(groups=2)-ReLU-AdaptiveAvgPool2d(1)-Flatten-Linear",
         # Both exporters fold the eval BatchNorm into the Conv; without constant folding it stays.
         ("torchscript", "dynamo", "torchscript_nofold")),
    Spec("gated_mlp", GatedMlp,
         lambda b, s: (_randn(b, s, 16), _mask(b, s)),
         ["x", "mask"], ["scores", "top_indices"], {"x": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}},
         "arange position ids + Embedding, LayerNorm, chunk, SiLU gate, Dropout(eval), torch.where, "
         "masked_fill, Softmax, topk(3), cumsum, cat"),
]


def _export_torchscript(spec: Spec, model: nn.Module, args: tuple, path: Path) -> None:
    torch.onnx.export(model, args, str(path), dynamo=False, input_names=spec.input_names,
                      output_names=spec.output_names, dynamic_axes=spec.dynamic)


def _export_torchscript_nofold(spec: Spec, model: nn.Module, args: tuple, path: Path) -> None:
    torch.onnx.export(model, args, str(path), dynamo=False, input_names=spec.input_names,
                      output_names=spec.output_names, dynamic_axes=spec.dynamic, do_constant_folding=False)


def _export_dynamo(spec: Spec, model: nn.Module, args: tuple, path: Path) -> None:
    # The position table caps seq at MAX_POS: torch.export needs the bound to keep seq symbolic.
    dims = {sym: torch.export.Dim(sym, min=1, max=MAX_POS) for axes in spec.dynamic.values() for sym in axes.values()}
    shapes = {name: {axis: dims[sym] for axis, sym in axes.items()} for name, axes in spec.dynamic.items()}
    program = torch.onnx.export(model, args, dynamo=True, input_names=spec.input_names,
                                output_names=spec.output_names, dynamic_shapes=shapes, external_data=False)
    program.save(str(path), external_data=False)


EXPORTER_NOTES = [
    "- BatchNorm2d (eval) is folded into the preceding Conv by both exporters at their defaults;",
    "  small_cnn.torchscript_nofold.onnx keeps the BatchNormalization node (training_mode=0).",
    "- TorchScript bakes the traced sequence length into nn.MultiheadAttention's K/V reshapes to",
    "  (src_len, batch*heads, head_dim): `/layers.N/self_attn/Reshape_4` and `_5` take a Concat of",
    "  Constant [7] (batch*heads stays computed from Shape). text_encoder.torchscript.onnx thus runs",
    "  only at seq=7 (any batch), in onnxruntime and onnx.reference too, despite its dynamic axes.",
    "- The TorchScript exporter fails on nn.TransformerEncoderLayer under torch.no_grad() (fused",
    "  fast path `aten::_transformer_encoder_layer_fwd`); the script exports with grad enabled.",
]

EXPORTERS = {"torchscript": _export_torchscript, "dynamo": _export_dynamo,
             "torchscript_nofold": _export_torchscript_nofold}


def _op_summary(path: Path) -> tuple[int, str]:
    model = onnx.load(str(path))
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    ops = sorted({n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}" for n in model.graph.node})
    return opset, ", ".join(ops)


def _check_against_torch(spec: Spec, model: nn.Module, path: Path) -> str:
    """Run the file with onnx.reference at the export shape and at another (batch, seq): the ONNX
    must reproduce torch at both, else its "dynamic" axes are not really dynamic."""
    evaluator = ReferenceEvaluator(str(path))
    worst, notes = 0.0, []
    for batch, seq in (EXPORT_SHAPE, OTHER_SHAPE):
        args = spec.example(batch, seq)
        with torch.no_grad():
            want = model(*args)
        want = [w.numpy() for w in (want if isinstance(want, tuple) else (want,))]
        try:
            got = evaluator.run(None, {n: a.numpy() for n, a in zip(spec.input_names, args)})
        except Exception as e:  # noqa: BLE001 - recorded: the export only works at its traced shape
            notes.append(f"fails at batch={batch}, seq={seq} ({type(e).__name__}: {str(e).splitlines()[0][:120]})")
            continue
        worst = max([worst] + [float(np.max(np.abs(g.astype(np.float64) - w))) for g, w in zip(got, want)])
    return "; ".join([f"max abs diff {worst:.1e}"] + notes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument("--verbose", action="store_true", help="show exporter output and tracebacks")
    opts = parser.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for spec in SPECS:
        for exporter in spec.exporters:
            export = EXPORTERS[exporter]
            torch.manual_seed(SEED)
            model = spec.build().eval()
            path = opts.out / f"{spec.name}.{exporter}.onnx"
            path.unlink(missing_ok=True)
            log = io.StringIO()
            try:
                # Not under torch.no_grad(): with grad off, nn.TransformerEncoderLayer takes its fused
                # fast path (aten::_transformer_encoder_layer_fwd), which the TorchScript exporter
                # cannot export. Exporting with grad on is what users do.
                with redirect_stdout(log), redirect_stderr(log):
                    export(spec, model, spec.example(*EXPORT_SHAPE), path)
                onnx.checker.check_model(str(path), full_check=True)
            except Exception as e:  # noqa: BLE001 - an exporter gap is a result, recorded in the README
                path.unlink(missing_ok=True)
                reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
                rows.append((spec, exporter, None, None, None, "", f"export failed: {reason}"))
                print(f"{spec.name}.{exporter}: export FAILED {reason}")
                if opts.verbose:
                    print(log.getvalue())
                    traceback.print_exc()
                continue
            opset, ops = _op_summary(path)
            size = path.stat().st_size
            check = _check_against_torch(spec, model, path)
            rows.append((spec, exporter, path.name, opset, size, ops, check))
            print(f"{path.name}: opset {opset}, {size / 1024:.1f} KB, {check}")
    _write_readme(opts.out, rows)


def _write_readme(out: Path, rows: list) -> None:
    lines = [
        "# Models exported by torch",
        "",
        "Written by `tools/export_torch_models.py` (do not edit by hand; rerun the script). Tested by",
        "`tests/gpu/test_exported.py` against onnxruntime. torch is not a dependency of onyxia or its",
        "tests: these files are what torch's exporters emit, committed so the tests need no torch.",
        "",
        f"- torch {torch.__version__}, onnx {onnx.__version__}, onnxscript {_version('onnxscript')}; seed {SEED}",
        "- `*.torchscript.onnx`: `torch.onnx.export(..., dynamo=False, dynamic_axes=...)`, default opset",
        "- `*.dynamo.onnx`: `torch.onnx.export(..., dynamo=True, dynamic_shapes=...)`, default opset,",
        "  onnxscript optimizer on (the default)",
        "- `*.torchscript_nofold.onnx`: TorchScript with `do_constant_folding=False` (keeps BatchNormalization)",
        f"- exported at (batch, seq) = {EXPORT_SHAPE}; the check column runs each file with `onnx.reference`",
        f"  at {EXPORT_SHAPE} and {OTHER_SHAPE} against torch itself",
        "",
        "| file | exporter | opset | size | check vs torch | ONNX ops |",
        "|---|---|---|---|---|---|",
    ]
    for spec, exporter, name, opset, size, ops, check in rows:
        if name is None:
            lines.append(f"| {spec.name} (not written) | {exporter} | — | — | {check} | — |")
        else:
            lines.append(f"| `{name}` | {exporter} | {opset} | {size / 1024:.1f} KB | {check} | {ops} |")
    lines += ["", "## Models", ""]
    for spec in SPECS:
        dyn = "; ".join(f"{n}: " + ", ".join(f"{a}→{s}" for a, s in axes.items()) for n, axes in spec.dynamic.items())
        lines.append(f"- **{spec.name}**: {spec.notes}. Inputs {', '.join(spec.input_names)} "
                     f"(dynamic axes {dyn}); outputs {', '.join(spec.output_names)}.")
    lines += ["", "## Exporter notes", "", *EXPORTER_NOTES]
    (out / "README.md").write_text("\n".join(lines) + "\n")


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except Exception:  # noqa: BLE001 - informational only
        return "?"


if __name__ == "__main__":
    main()
