"""Export a tiny ViT patch embedding with torch.onnx, its input axes named as optimum names them,
for tests/gpu/test_literal_dims.py.

optimum declares `pixel_values: [batch_size, num_channels, height, width]`: the channel axis is a
dim_param although the patch Conv's weights fix it, so onyxia must take num_channels from the dims
or the feed as a literal (InferenceCtx.literal). This writes
tests/data/exported/optimum/vit_patch_embedding.torchscript.onnx and its note (torch version, check).

torch is NOT a dependency of onyxia or of its tests. Run it in an environment with torch:

    python3 -m pip install --target /tmp/torchlib --no-deps torch   # or a venv with torch
    PYTHONPATH=/tmp/torchlib:. python3 tools/export_vit_patch_embedding.py

The TorchScript exporter (`dynamo=False`, `dynamic_axes`) keeps every named axis symbolic; the
dynamo exporter specializes num_channels to 3 (the weights decide it), so it would not reproduce
optimum's layout. Weights are seeded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import torch
from onnx.reference import ReferenceEvaluator
from torch import nn

# A folder of its own: tests/builders/exported.py runs every *.onnx of exported/ with (batch, seq) dims.
OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "exported" / "optimum"
NAME = "vit_patch_embedding.torchscript.onnx"
OPSET = 17
SEED = 0


class PatchEmbedding(nn.Module):
    """ViTEmbeddings without position embeddings (so any image size works): patch Conv,
    flatten(2).transpose(1, 2), a [CLS] token, LayerNorm, a Linear."""

    def __init__(self, channels: int = 3, patch: int = 4, hidden: int = 16):
        super().__init__()
        self.projection = nn.Conv2d(channels, hidden, kernel_size=patch, stride=patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, hidden) * 0.2)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dense = nn.Linear(hidden, 24)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        tokens = self.projection(pixel_values).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(pixel_values.shape[0], -1, -1)
        return self.dense(self.norm(torch.cat([cls, tokens], dim=1)))


def main() -> None:
    torch.manual_seed(SEED)
    model = PatchEmbedding().eval()
    example = torch.randn(2, 3, 16, 12)
    path = OUT_DIR / NAME
    torch.onnx.export(model, (example,), str(path), dynamo=False, opset_version=OPSET,
                      input_names=["pixel_values"], output_names=["last_hidden_state"],
                      dynamic_axes={"pixel_values": {0: "batch_size", 1: "num_channels", 2: "height", 3: "width"},
                                    "last_hidden_state": {0: "batch_size", 1: "sequence_length"}})
    proto = onnx.load(str(path))
    checks = []
    for shape in ((2, 3, 16, 12), (1, 3, 8, 20)):
        x = torch.randn(*shape)
        with torch.no_grad():
            ref = model(x).numpy()
        ours = ReferenceEvaluator(proto).run(None, {"pixel_values": x.numpy()})[0]
        checks.append(f"{shape}: max abs diff {float(np.abs(ours - ref).max()):.1e}")
    dims = [d.dim_param or d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    ops = sorted({n.op_type for n in proto.graph.node})
    note = (f"# {NAME}\n\nWritten by `tools/export_vit_patch_embedding.py` (do not edit by hand; rerun the script).\n"
            f"Tested by `tests/gpu/test_literal_dims.py` against onnxruntime.\n\n"
            f"- torch {torch.__version__}, onnx {onnx.__version__}; TorchScript exporter, opset {OPSET}, seed {SEED}\n"
            f"- pixel_values dims: {dims} (optimum's names)\n"
            f"- onnx.reference vs torch: {'; '.join(checks)}\n"
            f"- ONNX ops: {', '.join(ops)}\n"
            f"- size: {path.stat().st_size / 1024:.1f} KB\n")
    (OUT_DIR / NAME.replace(".onnx", ".md")).write_text(note)
    print(note)


if __name__ == "__main__":
    main()
