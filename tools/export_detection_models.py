"""Export small random-weight detection models with torch's TorchScript exporter into
tests/data/exported/detection/ (tests/gpu/test_detection.py runs them against onnxruntime).

Run in an environment with torch + torchvision (not an onyxia dependency). PyPI's torchvision
may fail to load its C++ ops next to a CPU torch: then put a module that defines torchvision::nms
and torchvision::roi_align with torch.library on PYTHONPATH as `tv_ops` (it is imported when
present); exporting needs only their schemas and ONNX symbolics, which torchvision provides.

Models (reduced widths, random weights re-drawn so scores differ and ties do not decide order):
- ssdlite.onnx: torchvision SSDlite (MobileNetV3-Large backbone, width 0.25), 5 classes, image
  [3, height, width] dynamic; ssdlite_empty.onnx: the same with a score threshold no box passes.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import torch

try:
    import tv_ops  # noqa: F401  (stand-ins for torchvision's C++ ops, see above)
except ImportError:
    pass
import torchvision  # noqa: E402
from torch import nn  # noqa: E402
from torchvision.models.detection import ssd, ssdlite  # noqa: E402
from torchvision.models.detection.anchor_utils import DefaultBoxGenerator  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "exported" / "detection"


def randomize(model: nn.Module, seed: int, std: float = 0.15) -> nn.Module:
    """Redraw every parameter and BatchNorm statistic so outputs spread and nothing ties."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (std if p.dim() > 1 else 0.1) + (1.0 if "weight" in name and p.dim() == 1 else 0.0))
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
    return model


def ssdlite_model(score_thresh: float) -> nn.Module:
    norm = partial(nn.BatchNorm2d, eps=0.001, momentum=0.03)
    backbone = torchvision.models.mobilenet_v3_large(weights=None, width_mult=0.25, norm_layer=norm,
                                                     reduced_tail=True)
    full_block = ssdlite._extra_block
    calls: list[int] = []

    def narrow_block(cin: int, cout: int, norm_layer: object) -> nn.Sequential:  # 512/256/256/128 -> /8
        calls.append(cin)
        return full_block(cin if len(calls) == 1 else cin // 8, cout // 8, norm_layer)

    ssdlite._extra_block = narrow_block
    try:
        backbone = ssdlite._mobilenet_extractor(backbone, 6, norm)
    finally:
        ssdlite._extra_block = full_block
    size = (320, 320)
    anchors = DefaultBoxGenerator([[2, 3] for _ in range(6)], min_ratio=0.2, max_ratio=0.95)
    channels = ssdlite.det_utils.retrieve_out_channels(backbone, size)
    head = ssdlite.SSDLiteHead(channels, anchors.num_anchors_per_location(), 5, norm)
    model = ssd.SSD(backbone, anchors, size, 5, head=head, score_thresh=score_thresh, nms_thresh=0.55,
                    detections_per_img=100, topk_candidates=100, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    randomize(model.eval(), 0)
    with torch.no_grad():  # spread the class logits: near-equal scores would let rounding pick the order
        for p in model.head.classification_head.parameters():
            p.mul_(1.6)
    return model


def export(model: nn.Module, name: str, shape: tuple[int, int, int]) -> None:
    x = torch.rand(shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        found = model([x])[0]
    path = OUT / name
    torch.onnx.export(model, ([x],), str(path), dynamo=False, opset_version=17, input_names=["image"],
                      output_names=["boxes", "scores", "labels"],
                      dynamic_axes={"image": {1: "height", 2: "width"}})
    scores = found["scores"]
    top = f", scores {float(scores.min()):.3f}..{float(scores.max()):.3f}" if len(scores) else ""
    print(f"{name}: {path.stat().st_size / 1024:.1f} KB, {len(scores)} detections at {list(shape)}{top}")


def main(argv: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    wanted = set(argv) or {"ssdlite"}
    if "ssdlite" in wanted:
        export(ssdlite_model(0.5), "ssdlite.onnx", (3, 320, 320))
        export(ssdlite_model(0.999), "ssdlite_empty.onnx", (3, 320, 320))


if __name__ == "__main__":
    main(sys.argv[1:])
