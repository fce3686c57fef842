"""Export small random-weight detection models with torch's TorchScript exporter into
tests/data/exported/detection/ (tests/gpu/test_detection.py runs them against onnxruntime).

Run in an environment with torch + torchvision (not an onyxia dependency). PyPI's torchvision
may fail to load its C++ ops next to a CPU torch: then put a module that defines torchvision::nms
and torchvision::roi_align with torch.library on PYTHONPATH as `tv_ops` (it is imported when
present); exporting needs only their schemas and ONNX symbolics, which torchvision provides.

Models (reduced widths, random weights re-drawn so scores differ and ties do not decide order;
each X.onnx with a twin X_empty.onnx whose score threshold no box passes):
- detr.onnx: transformers DETR (ResNet backbone, see export_detr), logits and pred_boxes.
- ssdlite.onnx: torchvision SSDlite (MobileNetV3-Large backbone, width 0.25), 5 classes, image
  [3, height, width] dynamic.
- faster_rcnn.onnx, retinanet.onnx: torchvision FasterRCNN / RetinaNet over a MobileNetV3-Large
  (width 0.25) FPN of 16 channels; RoiAlign traced with a zeros stand-in kernel (only its schema
  and ONNX symbolic matter to the graph).
- yolo.onnx: TinyYolo below, an ultralytics-style head with batched_nms in the graph.
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
from torchvision.models.detection import faster_rcnn, retinanet, ssd, ssdlite  # noqa: E402
from torchvision.models.detection.anchor_utils import AnchorGenerator, DefaultBoxGenerator  # noqa: E402
from torchvision.models.detection.backbone_utils import BackboneWithFPN  # noqa: E402
from torchvision.ops.feature_pyramid_network import LastLevelMaxPool, LastLevelP6P7  # noqa: E402


def _roi_align_for_tracing(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    """Zeros of RoiAlign's shape: tracing records the op (exported as ONNX RoiAlign); its values
    only feed the traced run, never the graph."""
    return input.new_zeros((rois.shape[0], input.shape[1], pooled_height, pooled_width))


try:  # where torchvision's own kernel is missing (a stand-in library), trace with zeros
    _LIB = torch.library.Library("torchvision", "IMPL")
    _LIB.impl("roi_align", _roi_align_for_tracing, "CPU", allow_override=True)
    _roi_align_module = sys.modules["torchvision.ops.roi_align"]
    _roi_align_module._has_ops = lambda: True
    _roi_align_module._assert_has_ops = lambda: None  # call the op (which the exporter maps), not its Python twin
except (RuntimeError, TypeError):
    pass

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "exported" / "detection"


def randomize(model: nn.Module, seed: int, std: float = 0.15) -> nn.Module:
    """Redraw every parameter and BatchNorm statistic so outputs spread and nothing ties."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 1.0 if "weight" in name and p.dim() == 1 else 0.0  # norm scales about 1
            p.copy_(torch.randn(p.shape, generator=g) * (std if p.dim() > 1 else 0.1) + scale)
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


def mobilenet_fpn(extra: nn.Module, channels: int = 16) -> nn.Module:
    """MobileNetV3-Large (width 0.25) features with an FPN of `channels` over its last two
    stages, as torchvision's fasterrcnn_mobilenet_v3_large_fpn builds it at 256 channels."""
    features = torchvision.models.mobilenet_v3_large(weights=None, width_mult=0.25).features
    stages = [0] + [i for i, b in enumerate(features) if getattr(b, "_is_cn", False)] + [len(features) - 1]
    picked = [len(stages) - 2, len(stages) - 1]
    return BackboneWithFPN(features, {f"{stages[k]}": str(v) for v, k in enumerate(picked)},
                           [features[stages[i]].out_channels for i in picked], channels, extra_blocks=extra)


def faster_rcnn_model(score_thresh: float) -> nn.Module:
    backbone = mobilenet_fpn(LastLevelMaxPool())
    sizes = ((32, 64, 128, 256, 512),) * 3
    anchors = AnchorGenerator(sizes, ((0.5, 1.0, 2.0),) * 3)
    head = faster_rcnn.TwoMLPHead(16 * 7 * 7, 32)
    model = faster_rcnn.FasterRCNN(backbone, None, rpn_anchor_generator=anchors, box_head=head,
                                   box_predictor=faster_rcnn.FastRCNNPredictor(32, 5), min_size=320, max_size=320,
                                   rpn_pre_nms_top_n_test=150, rpn_post_nms_top_n_test=150,
                                   box_score_thresh=score_thresh, box_detections_per_img=100)
    return randomize(model.eval(), 2)


def retinanet_model(score_thresh: float) -> nn.Module:
    backbone = mobilenet_fpn(LastLevelP6P7(16, 16))
    sizes = tuple((x, int(x * 2 ** (1.0 / 3)), int(x * 2 ** (2.0 / 3))) for x in [32, 64, 128, 256])
    anchors = AnchorGenerator(sizes, ((0.5, 1.0, 2.0),) * len(sizes))
    head = retinanet.RetinaNetHead(16, anchors.num_anchors_per_location()[0], 5)
    model = retinanet.RetinaNet(backbone, 5, anchor_generator=anchors, head=head, min_size=320, max_size=320,
                                score_thresh=score_thresh, topk_candidates=200, detections_per_img=100)
    randomize(model.eval(), 3)
    with torch.no_grad():  # sigmoid scores short of saturation (ties at 1.0 would let rounding pick the order)
        model.head.classification_head.cls_logits.weight.mul_(RETINANET_LOGIT_SCALE)
    return model


YOLO_LOGIT_SCALE = 30.0


class TinyYolo(nn.Module):
    """An ultralytics-style anchor-free detector with NMS in the graph: a stride-8 conv body, a
    1x1 head of 4 box distances (l, t, r, b, in strides) + class logits per cell, sigmoid scores,
    the best class per cell above `conf`, torchvision's batched_nms, at most 100 detections."""

    def __init__(self, classes: int = 3, conf: float = 0.5) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for cin, cout in ((3, 8), (8, 16), (16, 16)):
            layers += [nn.Conv2d(cin, cout, 3, 2, 1), nn.BatchNorm2d(cout), nn.SiLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Conv2d(16, 4 + classes, 1)
        self.conf = conf

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        p = self.head(self.body(image))  # [1, 4 + classes, h, w]
        h, w = p.shape[-2:]
        ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32),
                                indexing="ij")
        cx, cy = (xs.reshape(-1) + 0.5) * 8, (ys.reshape(-1) + 0.5) * 8
        d = p[0, :4].reshape(4, -1).exp() * 8
        boxes = torch.stack([cx - d[0], cy - d[1], cx + d[2], cy + d[3]], 1)
        best, label = p[0, 4:].reshape(p.shape[1] - 4, -1).sigmoid().max(0)
        keep = best > self.conf
        boxes, best, label = boxes[keep], best[keep], label[keep]
        order = torchvision.ops.batched_nms(boxes, best, label, 0.45)[:100]
        return boxes[order], best[order], label[order]


def yolo_model(conf: float) -> nn.Module:
    model = TinyYolo(conf=conf).eval()
    randomize(model, 4, std=0.1)
    with torch.no_grad():  # spread the class logits: near-equal scores would let rounding pick the order
        model.head.weight[4:] *= YOLO_LOGIT_SCALE
    return model


def export(model: nn.Module, name: str, shape: tuple[int, ...]) -> None:
    """torchvision models take a list of [3, height, width] images; the others one batch."""
    x = torch.rand(shape, generator=torch.Generator().manual_seed(1))
    listed = len(shape) == 3
    with torch.no_grad():
        found = model([x])[0] if listed else dict(zip(("boxes", "scores", "labels"), model(x)))
    path = OUT / name
    torch.onnx.export(model, ([x],) if listed else (x,), str(path), dynamo=False, opset_version=17,
                      input_names=["image"], output_names=list(found),  # the model's own order
                      dynamic_axes={"image": {1: "height", 2: "width"} if listed else {2: "height", 3: "width"}})
    scores = found["scores"]
    top = f", scores {float(scores.min()):.3f}..{float(scores.max()):.3f}" if len(scores) else ""
    print(f"{name}: {path.stat().st_size / 1024:.1f} KB, {len(scores)} detections at {list(shape)}{top}")


class DetrOutputs(nn.Module):
    """DetrForObjectDetection's logits and pred_boxes as plain outputs."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(pixel_values=pixel_values)
        return out.logits, out.pred_boxes


def export_detr() -> None:
    """transformers DETR (a 4-stage basic ResNet backbone of 8..32 channels, d_model 16, one
    encoder and one decoder layer, 10 queries, 4 labels): no NMS in the graph, logits and boxes
    per query; pixel_values [batch, 3, height, width] dynamic."""
    from transformers import DetrConfig, DetrForObjectDetection, ResNetConfig

    backbone = ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1],
                            layer_type="basic", out_features=["stage4"])
    config = DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=backbone,
                        backbone=None, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, num_queries=10,
                        num_labels=4)
    torch.manual_seed(5)
    model = DetrOutputs(DetrForObjectDetection(config).eval())
    x = torch.rand(1, 3, 64, 96, generator=torch.Generator().manual_seed(1))
    path = OUT / "detr.onnx"
    torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17, input_names=["pixel_values"],
                      output_names=["logits", "pred_boxes"],
                      dynamic_axes={"pixel_values": {0: "batch", 2: "height", 3: "width"}})
    print(f"detr.onnx: {path.stat().st_size / 1024:.1f} KB")


THRESH = {"faster_rcnn": 0.55, "retinanet": 0.69}
RETINANET_LOGIT_SCALE = 0.1


def main(argv: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    wanted = set(argv) or {"ssdlite", "faster_rcnn", "retinanet", "yolo", "detr"}
    if "detr" in wanted:
        export_detr()
    if "ssdlite" in wanted:
        export(ssdlite_model(0.5), "ssdlite.onnx", (3, 320, 320))
        export(ssdlite_model(0.999), "ssdlite_empty.onnx", (3, 320, 320))
    if "yolo" in wanted:
        export(yolo_model(0.88), "yolo.onnx", (1, 3, 320, 320))
        export(yolo_model(1.0), "yolo_empty.onnx", (1, 3, 320, 320))
    for family, build in (("faster_rcnn", faster_rcnn_model), ("retinanet", retinanet_model)):
        if family in wanted:
            export(build(float(THRESH.get(family, 0.05))), f"{family}.onnx", (3, 320, 320))
            export(build(0.999), f"{family}_empty.onnx", (3, 320, 320))


if __name__ == "__main__":
    main(sys.argv[1:])
