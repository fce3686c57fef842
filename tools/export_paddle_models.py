"""Export a tiny PP-OCR-style text classifier and text detector with paddle2onnx, for
tests/gpu/test_dynamic_shapes.py.

OCR packages on PyPI ship models paddle2onnx exported: the classifier declares its input as
`x: [-1, 3, "?", "?"]` (paddle2onnx 0.x), the detector as `x: ["p2o.DynamicDimension.0", 3, ...]`
(1.x) and adds an upsampled stride-32 map to a stride-16 one. This script builds small models of
those shapes in PaddlePaddle and converts them with today's paddle2onnx; `*.legacy_dims.onnx` are
the same files with the graph's input and output dims rewritten (protobuf fields only, nothing
else) the way paddle2onnx 0.x wrote them: -1 for the batch, "?" for every other unknown dim.

paddle is NOT a dependency of onyxia or of its tests. This developer script runs in its own
environment; its small .onnx outputs are committed under tests/data/paddle/:

    python3 -m venv /tmp/paddleenv
    /tmp/paddleenv/bin/pip install paddlepaddle==2.6.2 paddle2onnx==1.3.1 onnx onnxruntime "numpy<2" packaging
    /tmp/paddleenv/bin/python tools/export_paddle_models.py

Versions, as tried: paddle2onnx 2.1.0 (with paddlepaddle 3.3.1) reads paddle 3's PIR programs but
fails on nearest upsampling ("the 0th elementwise MUST be ir::FloatAttribute"); paddle2onnx 1.3.1
reads the legacy program format (.pdmodel), which paddle 3.3.1 still writes with
FLAGS_enable_pir_api=0, but then fails to trace Sigmoid ("must be Value, but got Variable"). So
paddlepaddle 2.6.2 with paddle2onnx 1.3.1, the pair of the PP-OCRv4 era.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

# paddle 3 writes PIR programs (.json) unless told otherwise; paddle2onnx 1.x reads .pdmodel only.
os.environ.setdefault("FLAGS_enable_pir_api", "0")  # before paddle is imported
import paddle  # noqa: E402
import paddle.nn.functional as F  # noqa: E402
import paddle2onnx  # noqa: E402
from paddle import nn  # noqa: E402

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "paddle"
SEED = 0


def _conv(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2D(cin, cout, 3, stride=stride, padding=1), nn.BatchNorm2D(cout), nn.Hardswish())


class TextClassifier(nn.Layer):
    """PP-OCR's direction classifier in small: strided convs with BatchNorm and Hardswish,
    MaxPool2D(2), adaptive average pooling, a reshape to [batch, channels] from the tensor's
    own shape, Linear, Softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(_conv(3, 8, 2), _conv(8, 16, 2), _conv(16, 16, 1))
        self.fc = nn.Linear(16, 2)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = F.adaptive_avg_pool2d(F.max_pool2d(self.body(x), 2), 1)
        x = paddle.reshape(x, [x.shape[0], -1])
        return F.softmax(self.fc(x), axis=1)


class TextDetector(nn.Layer):
    """DBNet in small, as PP-OCR's detector: a backbone of stride-2 convs (strides 4 to 32),
    1x1 laterals, a top-down path that upsamples by 2 (nearest) and adds, every level upsampled to
    stride 4 and concatenated, and a head of two stride-2 Conv2DTranspose layers and a Sigmoid."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv(3, 8, 2), _conv(8, 8, 2))
        self.stages = nn.LayerList([_conv(8, 12), _conv(12, 16, 2), _conv(16, 16, 2), _conv(16, 24, 2)])
        self.lateral = nn.LayerList([nn.Conv2D(c, 16, 1) for c in (12, 16, 16, 24)])
        self.smooth = nn.LayerList([nn.Conv2D(16, 4, 3, padding=1) for _ in range(4)])
        self.head = nn.Sequential(nn.Conv2D(16, 8, 3, padding=1), nn.ReLU(), nn.Conv2DTranspose(8, 8, 2, stride=2),
                                  nn.ReLU(), nn.Conv2DTranspose(8, 1, 2, stride=2), nn.Sigmoid())

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.stem(x)
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        lat = [conv(f) for conv, f in zip(self.lateral, feats)]
        for i in range(len(lat) - 2, -1, -1):  # stride 32 -> 16 -> 8 -> 4
            lat[i] = lat[i] + F.upsample(lat[i + 1], scale_factor=2.0, mode="nearest")
        maps = [s(p) for s, p in zip(self.smooth, lat)]
        maps = [maps[0]] + [F.upsample(m, scale_factor=float(2 ** i), mode="nearest") for i, m in enumerate(maps) if i]
        return self.head(paddle.concat(maps, axis=1))


MODELS = {"text_cls": (TextClassifier, [(1, 48, 192), (3, 48, 100), (2, 64, 64)]),
          "text_det": (TextDetector, [(1, 64, 96), (2, 96, 64), (1, 160, 128)])}


def _export(name: str, layer: nn.Layer, out: Path) -> Path:
    spec = [paddle.static.InputSpec([None, 3, None, None], "float32", "x")]
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp) / "inference"
        paddle.jit.save(layer, str(prefix), input_spec=spec)
        program = next(p for p in (prefix.with_suffix(".json"), prefix.with_suffix(".pdmodel")) if p.exists())
        path = out / f"{name}.onnx"
        paddle2onnx.export(str(program), str(prefix.with_suffix(".pdiparams")), str(path), opset_version=11)
    return path


def _legacy_dims(path: Path) -> Path:
    """paddle2onnx 0.x's dims: -1 for axis 0, "?" for the other unknown axes."""
    model = onnx.load(str(path))
    for vi in (*model.graph.input, *model.graph.output):
        for axis, dim in enumerate(vi.type.tensor_type.shape.dim):
            if dim.HasField("dim_param") or dim.dim_value <= 0:
                if axis == 0:
                    dim.dim_value = -1
                else:
                    dim.dim_param = "?"
    legacy = path.with_name(path.stem + ".legacy_dims.onnx")
    onnx.save(model, str(legacy))
    return legacy


def _check(layer: nn.Layer, path: Path, sizes) -> str:
    # onnxruntime, not onnx.reference: onnx 1.17's reference evaluator differs from paddle and
    # onnxruntime on the classifier at some sizes (7e-2 at batch 3, 48x100).
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = 0.0
    for batch, height, width in sizes:
        x = np.random.default_rng(1).standard_normal((batch, 3, height, width)).astype(np.float32)
        want = layer(paddle.to_tensor(x)).numpy()
        (got,) = session.run(None, {"x": x})
        worst = max(worst, float(np.max(np.abs(got - want))))
    return f"max abs diff {worst:.1e} vs paddle at (batch, height, width) in {sizes}"


def _dims(path: Path) -> str:
    model = onnx.load(str(path))
    return "; ".join(f"{vi.name}: [" + ", ".join(d.dim_param if d.HasField("dim_param") else str(d.dim_value)
                                                  for d in vi.type.tensor_type.shape.dim) + "]"
                     for vi in (*model.graph.input, *model.graph.output))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    opts = parser.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, (build, sizes) in MODELS.items():
        paddle.seed(SEED)
        layer = build()
        layer.eval()
        path = _export(name, layer, opts.out)
        check = _check(layer, path, sizes)
        for written in (path, _legacy_dims(path)):
            ops = ", ".join(sorted({n.op_type for n in onnx.load(str(written)).graph.node}))
            rows.append((written.name, written.stat().st_size, _dims(written), check, ops))
            print(f"{written.name}: {written.stat().st_size / 1024:.1f} KB, {_dims(written)}, {check}")
    lines = [
        "# PP-OCR-style models exported by paddle2onnx",
        "",
        "Written by `tools/export_paddle_models.py` (do not edit by hand; rerun the script). Tested by",
        "`tests/gpu/test_dynamic_shapes.py` against onnxruntime at several sizes from one session.",
        "",
        f"- paddlepaddle {paddle.__version__}, paddle2onnx {paddle2onnx.__version__}, onnx {onnx.__version__}; "
        f"seed {SEED}; `paddle.jit.save` with InputSpec [None, 3, None, None], `paddle2onnx.export(opset 11)`",
        "- `*.legacy_dims.onnx`: the same graph with its input/output dims rewritten as paddle2onnx 0.x wrote",
        "  them (-1 for the batch, \"?\" for height and width), as in the classifier OCR packages ship",
        "",
        "| file | size | dims | check | ops |",
        "|---|---|---|---|---|",
        *(f"| `{n}` | {s / 1024:.1f} KB | {d} | {c} | {o} |" for n, s, d, c, o in rows),
        "",
        "## Models",
        "",
        f"- **text_cls**: {' '.join(TextClassifier.__doc__.split())}",
        f"- **text_det** (valid for height and width multiples of 32): {' '.join(TextDetector.__doc__.split())}",
    ]
    (opts.out / "README.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
