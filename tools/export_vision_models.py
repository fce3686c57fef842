"""Export a tiny FPN detector and a tiny U-Net with dynamic height and width, for
tests/gpu/test_dynamic_shapes.py.

Both are the shape of real vision models: their outputs exist only for some input sizes. The FPN
adds a stride-16 map to an upsampled stride-32 map (`ceil(h/16)` against `2*ceil(h/32)`), as text
detectors (DBNet, PP-OCR) do; the U-Net concatenates a skip connection with a transposed-conv
upsampling of the pooled map (`h` against `2*(h//2)`). Neither equality holds symbolically; both
hold for the sizes the models are meant for (multiples of 32, of 4).

torch is NOT a dependency of onyxia or of its tests. This developer script runs in its own
environment; its small .onnx outputs are committed under tests/data/dynamic/:

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install torch onnx onnxscript numpy
    /tmp/torchenv/bin/python tools/export_vision_models.py

Each model is exported with the TorchScript exporter (`dynamo=False`, `dynamic_axes`) and the
dynamo exporter (`dynamo=True`, `dynamic_shapes`) with batch, height and width dynamic. An exporter
that fails is recorded in the README instead of aborting the run. Weights are seeded.
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

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "dynamic"
SEED = 0
EXPORT_SHAPE = (1, 64, 96)  # (batch, height, width)


def _conv(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1), nn.BatchNorm2d(cout), nn.ReLU())


class TinyFpn(nn.Module):
    """DBNet-like: a backbone of stride-2 convs (strides 4, 8, 16, 32), 1x1 laterals, a top-down
    path that upsamples by scale_factor=2 and adds (the sizes must agree), then every level
    resized to stride 4 by size= (from the tensor's shape), concatenated, and a head that upsamples
    with two stride-2 ConvTranspose2d back to the input size, then Sigmoid."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv(3, 8, 2), _conv(8, 8, 2))  # stride 4
        self.stages = nn.ModuleList([_conv(8, 12, 1), _conv(12, 16, 2), _conv(16, 16, 2), _conv(16, 24, 2)])
        self.lateral = nn.ModuleList([nn.Conv2d(c, 16, 1) for c in (12, 16, 16, 24)])
        self.smooth = nn.ModuleList([nn.Conv2d(16, 4, 3, padding=1) for _ in range(4)])
        self.head = nn.Sequential(_conv(16, 8), nn.ConvTranspose2d(8, 8, 2, stride=2), nn.ReLU(),
                                  nn.ConvTranspose2d(8, 1, 2, stride=2), nn.Sigmoid())

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.stem(image)
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        lat = [conv(f) for conv, f in zip(self.lateral, feats)]
        for i in range(len(lat) - 2, -1, -1):  # top-down: stride 32 -> 16 -> 8 -> 4
            lat[i] = lat[i] + F.interpolate(lat[i + 1], scale_factor=2.0, mode="nearest")
        size = lat[0].shape[-2:]
        maps = [F.interpolate(s(p), size=size, mode="nearest") if i else s(p)
                for i, (s, p) in enumerate(zip(self.smooth, lat))]
        return self.head(torch.cat(maps, dim=1))


class TinyUnet(nn.Module):
    """Two levels down (conv, MaxPool2d(2)), a bottleneck, two levels up (ConvTranspose2d(k=2,
    s=2), concatenated with the skip connection, conv), a 1x1 conv to 2 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.down1, self.down2 = _conv(3, 8), _conv(8, 16)
        self.bottom = _conv(16, 16)
        self.up2, self.up1 = nn.ConvTranspose2d(16, 16, 2, stride=2), nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.dec2, self.dec1 = _conv(32, 16), _conv(16, 8)
        self.out = nn.Conv2d(8, 2, 1)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        s1 = self.down1(image)
        s2 = self.down2(F.max_pool2d(s1, 2))
        x = self.bottom(F.max_pool2d(s2, 2))
        x = self.dec2(torch.cat([self.up2(x), s2], dim=1))
        x = self.dec1(torch.cat([self.up1(x), s1], dim=1))
        return self.out(x)


def _randomize_batchnorm(model: nn.Module) -> nn.Module:
    # Non-trivial running statistics, so BatchNorm (or its folding into the Conv) matters.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return model


@dataclass
class Spec:
    name: str
    build: Callable[[], nn.Module]
    multiple: int  # height and width must be multiples of this for the model to be valid
    notes: str


SPECS = [
    Spec("fpn", TinyFpn, 32, "TinyFpn: " + " ".join(TinyFpn.__doc__.split())),
    Spec("unet", TinyUnet, 4, "TinyUnet: " + " ".join(TinyUnet.__doc__.split())),
]
INPUT, OUTPUT = "image", "out"
DYNAMIC = {INPUT: {0: "batch", 2: "height", 3: "width"}}


def _image(batch: int, height: int, width: int) -> torch.Tensor:
    return torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(1))


def _export_torchscript(model: nn.Module, args: tuple, path: Path) -> None:
    torch.onnx.export(model, args, str(path), dynamo=False, input_names=[INPUT], output_names=[OUTPUT],
                      dynamic_axes=DYNAMIC)


def _export_dynamo(model: nn.Module, args: tuple, path: Path) -> None:
    # Dim.AUTO lets torch.export keep what it can dynamic and add the guards it needs.
    shapes = {INPUT: {axis: torch.export.Dim.AUTO for axis in DYNAMIC[INPUT]}}
    program = torch.onnx.export(model, args, dynamo=True, input_names=[INPUT], output_names=[OUTPUT],
                                dynamic_shapes=shapes, external_data=False)
    program.save(str(path), external_data=False)


EXPORTERS = {"torchscript": _export_torchscript, "dynamo": _export_dynamo}


def _input_dims(path: Path) -> str:
    vi = onnx.load(str(path)).graph.input[0]
    return "[" + ", ".join(d.dim_param or str(d.dim_value) for d in vi.type.tensor_type.shape.dim) + "]"


def _op_summary(path: Path) -> tuple[int, str]:
    model = onnx.load(str(path))
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return opset, ", ".join(sorted({n.op_type for n in model.graph.node}))


def _check_against_torch(spec: Spec, model: nn.Module, path: Path) -> str:
    """onnx.reference at the export shape and at other valid sizes must reproduce torch."""
    evaluator = ReferenceEvaluator(str(path))
    m = spec.multiple
    worst, notes = 0.0, []
    for shape in (EXPORT_SHAPE, (2, 2 * m, 5 * m), (1, 7 * m, 3 * m)):
        image = _image(*shape)
        with torch.no_grad():
            want = model(image).numpy()
        try:
            (got,) = evaluator.run(None, {INPUT: image.numpy()})
        except Exception as e:  # noqa: BLE001 - recorded: the export is not dynamic there
            notes.append(f"fails at {shape} ({type(e).__name__}: {str(e).splitlines()[0][:120]})")
            continue
        worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - want))))
    return "; ".join([f"max abs diff {worst:.1e} at {EXPORT_SHAPE}, (2, {2 * m}, {5 * m}), (1, {7 * m}, {3 * m})"]
                     + notes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument("--verbose", action="store_true", help="show exporter output and tracebacks")
    opts = parser.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for spec in SPECS:
        for exporter, export in EXPORTERS.items():
            torch.manual_seed(SEED)
            model = _randomize_batchnorm(spec.build()).eval()
            path = opts.out / f"{spec.name}.{exporter}.onnx"
            path.unlink(missing_ok=True)
            log = io.StringIO()
            try:
                with redirect_stdout(log), redirect_stderr(log):
                    export(model, (_image(*EXPORT_SHAPE),), path)
                onnx.checker.check_model(str(path), full_check=True)
            except Exception as e:  # noqa: BLE001 - an exporter gap is a result, recorded in the README
                path.unlink(missing_ok=True)
                reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
                rows.append((spec, exporter, None, None, None, "", "", f"export failed: {reason}"))
                print(f"{spec.name}.{exporter}: export FAILED {reason}")
                if opts.verbose:
                    print(log.getvalue())
                    traceback.print_exc()
                continue
            opset, ops = _op_summary(path)
            size = path.stat().st_size
            check = _check_against_torch(spec, model, path)
            rows.append((spec, exporter, path.name, opset, size, _input_dims(path), ops, check))
            print(f"{path.name}: opset {opset}, {size / 1024:.1f} KB, input {_input_dims(path)}, {check}")
    _write_readme(opts.out, rows)


def _write_readme(out: Path, rows: list) -> None:
    lines = [
        "# Vision models with dynamic height and width, exported by torch",
        "",
        "Written by `tools/export_vision_models.py` (do not edit by hand; rerun the script). Tested by",
        "`tests/gpu/test_dynamic_shapes.py` against onnxruntime at several sizes from one session.",
        "",
        f"- torch {torch.__version__}, onnx {onnx.__version__}, onnxscript {_version('onnxscript')}; seed {SEED}",
        "- `*.torchscript.onnx`: `torch.onnx.export(..., dynamo=False, dynamic_axes=...)`, default opset",
        "- `*.dynamo.onnx`: `torch.onnx.export(..., dynamo=True, dynamic_shapes=Dim.AUTO)`, default opset",
        f"- exported at (batch, height, width) = {EXPORT_SHAPE}; the check column runs each file with",
        "  `onnx.reference` against torch itself",
        "",
        "| file | exporter | opset | size | input dims | check vs torch | ONNX ops |",
        "|---|---|---|---|---|---|---|",
    ]
    for spec, exporter, name, opset, size, dims, ops, check in rows:
        if name is None:
            lines.append(f"| {spec.name} (not written) | {exporter} | — | — | — | {check} | — |")
        else:
            lines.append(f"| `{name}` | {exporter} | {opset} | {size / 1024:.1f} KB | {dims} | {check} | {ops} |")
    lines += ["", "## Models", ""]
    for spec in SPECS:
        lines.append(f"- **{spec.name}** (valid for height and width multiples of {spec.multiple}): {spec.notes}")
    (out / "README.md").write_text("\n".join(lines) + "\n")


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except Exception:  # noqa: BLE001 - informational only
        return "?"


if __name__ == "__main__":
    main()
