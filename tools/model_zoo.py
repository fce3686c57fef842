"""The model families of tools/export_bench_models.py: real architectures from torchvision, timm,
transformers and diffusers (plus a YOLO-style detector written here), each at two widths:

- `small=False`: the benchmark size (the library's own configuration, or the named small shape:
  whisper-tiny's encoder, a MiniLM-L6-shaped BERT...), random seeded weights;
- `small=True`: a reduced-width, reduced-depth member of the same family (the same module classes
  and exporter, so the same ONNX patterns), small enough to commit (< ~1 MB) as a test fixture.

A builder returns an `Export`: the module, its example inputs (in the ONNX input order), the
dynamic axes its usual exporter declares (optimum's names for transformers and diffusers models:
batch_size, sequence_length, num_channels, height, width), two sizes to run it at, and how to make
each input's values (`feeds`: "normal", "uniform", "ids:<vocab>", "mask", "zeros").

torch is NOT a dependency of onyxia or of its tests; this runs in a torch environment only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn
from torch_stubs import patch_register_fake


@dataclass
class Export:
    module: nn.Module
    inputs: dict[str, torch.Tensor]  # example inputs, in the ONNX input order
    outputs: list[str]
    axes: dict[str, dict[int, str]]  # input/output name -> {axis: symbol}
    sizes: list[dict[str, int]]  # two bindings of the symbols: the model is run at each
    feeds: dict[str, str] = field(default_factory=dict)  # input -> value kind (default "normal")
    note: str = ""


def randomize_norms(module: nn.Module) -> nn.Module:
    """Give every BatchNorm random statistics and affine parameters (seeded by the caller).

    Freshly built torchvision classifiers (mean 0 / var 1 statistics, the classifier's N(0, 0.01)
    init) output ~1e-9 logits through their Hardswish/SE stacks: a test would compare noise. With
    trained-like statistics the activations keep unit scale, as a real checkpoint's do."""
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                if m.affine:
                    m.weight.uniform_(0.8, 1.6)
                    m.bias.normal_(0.0, 0.2)
    return module


class _Outputs(nn.Module):
    """Calls `fn(module, *inputs)`: picks tensors out of a library's output object."""

    def __init__(self, module: nn.Module, fn: Callable):
        super().__init__()
        self.module, self.fn = module, fn

    def forward(self, *inputs):
        return self.fn(self.module, *inputs)


def _image(shape: tuple[int, ...], name: str = "pixel_values") -> dict[str, torch.Tensor]:
    return {name: torch.rand(*shape)}


def _vision(module: nn.Module, small: bool, hw=((224, 224), (160, 192)), hw_small=((32, 32), (48, 40)),
            example: tuple[int, int] | None = None) -> Export:
    """A classifier over pixel_values [batch, 3, height, width] (torchvision/timm convention),
    exported at the first size (or `example`)."""
    (h, w), (h2, w2) = hw_small if small else hw
    return Export(randomize_norms(module.eval()), _image((1, 3, *(example or (h, w)))), ["logits"],
                  {"pixel_values": {0: "batch", 2: "height", 3: "width"}, "logits": {0: "batch"}},
                  [{"batch": 1, "height": h, "width": w}, {"batch": 2, "height": h2, "width": w2}],
                  {"pixel_values": "uniform"})


# ---- torchvision -------------------------------------------------------------------------------
def mobilenet_v3(arch: str) -> Callable[[bool], Export]:
    def build(small: bool) -> Export:
        patch_register_fake()
        import torchvision
        from torchvision.models import mobilenetv3
        if not small:
            return _vision(getattr(torchvision.models, arch)(), small)
        setting, _ = mobilenetv3._mobilenet_v3_conf(arch, width_mult=0.25)
        return _vision(mobilenetv3.MobileNetV3(setting, last_channel=64, num_classes=10), small)
    build.__doc__ = (f"torchvision's {arch} (inverted residuals, squeeze-excitation, Hardswish); small: "
                     "width_mult 0.25, a 64-wide head.")
    return build


def resnet18(small: bool) -> Export:
    """torchvision's resnet18; small: one BasicBlock a stage, 8-64 channels."""
    patch_register_fake()
    import torchvision
    from torchvision.models.resnet import BasicBlock, ResNet
    if not small:
        return _vision(torchvision.models.resnet18(), small)

    class NarrowResNet(ResNet):
        """torchvision's ResNet with one BasicBlock a stage and 8/16/32/64 channels (its
        __init__ fixes 64..512, so the stages are rebuilt with its own _make_layer)."""

        def __init__(self):
            super().__init__(BasicBlock, [1, 1, 1, 1], num_classes=10)
            self.inplanes = 8
            self.conv1 = nn.Conv2d(3, 8, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(8)
            self.layer1 = self._make_layer(BasicBlock, 8, 1)
            self.layer2 = self._make_layer(BasicBlock, 16, 1, stride=2)
            self.layer3 = self._make_layer(BasicBlock, 32, 1, stride=2)
            self.layer4 = self._make_layer(BasicBlock, 64, 1, stride=2)
            self.fc = nn.Linear(64, 10)
    return _vision(NarrowResNet(), small)


def efficientnet_b0(small: bool) -> Export:
    """torchvision's efficientnet_b0 (MBConv, SiLU, squeeze-excitation); small: width 0.25, depth 0.34."""
    patch_register_fake()
    import torchvision
    from torchvision.models import efficientnet
    if not small:
        return _vision(torchvision.models.efficientnet_b0(), small)
    setting, last = efficientnet._efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.34)
    return _vision(efficientnet.EfficientNet(setting, 0.2, num_classes=10, last_channel=last), small)


def regnet_y_400mf(small: bool) -> Export:
    """torchvision's regnet_y_400mf (grouped convs, squeeze-excitation); small: depth 4, 8-wide groups."""
    patch_register_fake()
    import torchvision
    from torchvision.models import regnet
    if not small:
        return _vision(torchvision.models.regnet_y_400mf(), small)
    params = regnet.BlockParams.from_init_params(depth=4, w_0=8, w_a=8.0, w_m=2.0, group_width=8, se_ratio=0.25)
    return _vision(regnet.RegNet(params, num_classes=10, stem_width=8), small)


# ---- timm --------------------------------------------------------------------------------------
def convnext_atto(small: bool) -> Export:
    """timm's convnext_atto (7x7 depthwise convs, LayerNorm, GELU); small: one block a stage, 8-64 wide."""
    patch_register_fake()
    import timm
    kw = dict(depths=(1, 1, 1, 1), dims=(8, 16, 32, 64), num_classes=10) if small else {}
    return _vision(timm.create_model("convnext_atto", pretrained=False, **kw), small)


def timm_vit(small: bool) -> Export:
    """timm's vit_tiny_patch16_224 at its fixed image size (the two sizes differ in batch):
    dynamic_img_size=True resamples the position embedding with antialiased bicubic
    interpolation, which the TorchScript exporter cannot export (aten::_upsample_bicubic2d_aa)."""
    patch_register_fake()
    import timm
    kw = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=10) if small else {}
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, **kw)
    size = 32 if small else 224
    spec = _vision(model, small, hw=((size, size),) * 2, hw_small=((size, size),) * 2)
    spec.sizes[1]["height"] = spec.sizes[1]["width"] = size
    return spec


# ---- transformers (exported as optimum does: torch.onnx TorchScript, optimum's axis names) ------
def _text(model: nn.Module, vocab: int, small: bool, token_types: bool) -> Export:
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if token_types else [])
    seq = 8 if small else 128
    inputs = {"input_ids": torch.randint(0, vocab, (1, seq)), "attention_mask": torch.ones(1, seq, dtype=torch.int64)}
    if token_types:
        inputs["token_type_ids"] = torch.zeros(1, seq, dtype=torch.int64)
    axes = {n: {0: "batch_size", 1: "sequence_length"} for n in names}
    axes["last_hidden_state"] = {0: "batch_size", 1: "sequence_length"}
    sizes = [{"batch_size": 1, "sequence_length": seq},
             {"batch_size": 2, "sequence_length": 13 if small else 64}]
    feeds = {"input_ids": f"ids:{vocab}", "attention_mask": "mask", "token_type_ids": "zeros"}
    wrapped = _Outputs(model.eval(), lambda m, *a: m(**dict(zip(names, a))).last_hidden_state)
    return Export(wrapped, inputs, ["last_hidden_state"], axes, sizes, feeds)


def bert(small: bool) -> Export:
    """MiniLM-L6-H384-shaped BERT (all-MiniLM-L6-v2's configuration, random weights)."""
    from transformers import BertConfig, BertModel
    if small:
        cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=64)
    else:
        cfg = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                         intermediate_size=1536)
    return _text(BertModel(cfg, add_pooling_layer=False), cfg.vocab_size, small, token_types=True)


def xlm_roberta(small: bool) -> Export:
    """XLM-R architecture (position ids from a cumsum over non-padding tokens), small width; the
    vocabulary cut from 250002 to 32000 at the benchmark size (its 384 MB embedding table would
    dominate the load and is one Gather per token)."""
    from transformers import XLMRobertaConfig, XLMRobertaModel
    if small:
        cfg = XLMRobertaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=64, max_position_embeddings=66)
    else:
        cfg = XLMRobertaConfig(vocab_size=32000, hidden_size=384, num_hidden_layers=6, num_attention_heads=6,
                               intermediate_size=1536, max_position_embeddings=514)
    return _text(XLMRobertaModel(cfg, add_pooling_layer=False), cfg.vocab_size, small, token_types=False)


def _pixels_fixed(model: nn.Module, image: int, small: bool, channels: int = 3) -> Export:
    """A transformers vision encoder over pixel_values with optimum's axes (batch_size,
    num_channels, height, width); its position embeddings fix the image size, so the two sizes
    differ in batch only."""
    axes = {"pixel_values": {0: "batch_size", 1: "num_channels", 2: "height", 3: "width"},
            "last_hidden_state": {0: "batch_size"}}
    wrapped = _Outputs(model.eval(), lambda m, x: m(pixel_values=x).last_hidden_state)
    sizes = [{"batch_size": b, "num_channels": channels, "height": image, "width": image} for b in (1, 2)]
    return Export(wrapped, _image((1, channels, image, image)), ["last_hidden_state"], axes, sizes,
                  {"pixel_values": "uniform"})


def hf_vit(small: bool) -> Export:
    """ViT-Tiny/16 shape at 224 (google/vit-base's family, 192 wide, 12 layers)."""
    from transformers import ViTConfig, ViTModel
    if small:
        cfg = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                        image_size=32, patch_size=8)
    else:
        cfg = ViTConfig(hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768,
                        image_size=224, patch_size=16)
    return _pixels_fixed(ViTModel(cfg, add_pooling_layer=False), cfg.image_size, small)


def clip_vision(small: bool) -> Export:
    """CLIP's vision tower (quick_gelu, pre-LayerNorm), ViT-B/32 patching at 6 x 384 width."""
    from transformers import CLIPVisionConfig, CLIPVisionModel
    if small:
        cfg = CLIPVisionConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                               image_size=32, patch_size=8, projection_dim=16)
    else:
        cfg = CLIPVisionConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=6, intermediate_size=1536,
                               image_size=224, patch_size=32)
    return _pixels_fixed(CLIPVisionModel(cfg), cfg.image_size, small)


def whisper_encoder(small: bool) -> Export:
    """whisper-tiny's encoder shape (d_model 384, 4 layers, 80 mel bins, 3000 frames): two
    stride-1/2 Conv1d + GELU, fixed sinusoid positions (so the frame count is fixed)."""
    from transformers import WhisperConfig, WhisperModel
    if small:
        cfg = WhisperConfig(d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
                            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8,
                            max_source_positions=16, max_target_positions=16, vocab_size=100, pad_token_id=1,
                            bos_token_id=2, eos_token_id=2, decoder_start_token_id=3)
    else:
        cfg = WhisperConfig(d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
                            decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536, num_mel_bins=80)
    encoder = WhisperModel(cfg).get_encoder()
    frames = 2 * cfg.max_source_positions
    axes = {"input_features": {0: "batch_size"}, "last_hidden_state": {0: "batch_size"}}
    wrapped = _Outputs(encoder.eval(), lambda m, x: m(input_features=x).last_hidden_state)
    return Export(wrapped, {"input_features": torch.randn(1, cfg.num_mel_bins, frames)}, ["last_hidden_state"],
                  axes, [{"batch_size": 1}, {"batch_size": 2}])


def wav2vec2(small: bool) -> Export:
    """wav2vec2-base's feature encoder (7 strided Conv1d, GroupNorm) and a 4-layer transformer with
    the grouped, weight-normed positional Conv1d, 256 wide."""
    from transformers import Wav2Vec2Config, Wav2Vec2Model
    if small:
        cfg = Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                             conv_dim=(16, 16, 16), conv_kernel=(10, 3, 3), conv_stride=(5, 2, 2),
                             num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4, vocab_size=32)
        lengths = (400, 640)
    else:
        cfg = Wav2Vec2Config(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
        lengths = (16000, 8000)
    axes = {"input_values": {0: "batch_size", 1: "sequence_length"}, "last_hidden_state": {0: "batch_size"}}
    wrapped = _Outputs(Wav2Vec2Model(cfg).eval(), lambda m, x: m(input_values=x).last_hidden_state)
    return Export(wrapped, {"input_values": torch.randn(1, lengths[0])}, ["last_hidden_state"], axes,
                  [{"batch_size": 1, "sequence_length": lengths[0]}, {"batch_size": 2, "sequence_length": lengths[1]}])


# ---- diffusers ---------------------------------------------------------------------------------
def unet(small: bool) -> Export:
    """UNet2DConditionModel: a cross-attention down block, a plain one, and back up; timestep
    embedding, GroupNorm, SiLU, transformer blocks with GEGLU, nearest upsampling."""
    from diffusers import UNet2DConditionModel
    width, ctx, groups = ((8, 16), 16, 4) if small else ((64, 128), 128, 32)
    model = UNet2DConditionModel(sample_size=8 if small else 32, in_channels=4, out_channels=4, layers_per_block=1,
                                 block_out_channels=width, norm_num_groups=groups, cross_attention_dim=ctx,
                                 attention_head_dim=8, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                 up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))
    seqs, hw = ((7, 5), ((8, 8), (12, 16))) if small else ((77, 64), ((32, 32), (24, 40)))
    seq = seqs[0]
    inputs = {"sample": torch.randn(1, 4, *hw[0]), "timestep": torch.tensor([10.0]),
              "encoder_hidden_states": torch.randn(1, seq, ctx)}
    axes = {"sample": {0: "batch_size", 2: "height", 3: "width"},
            "encoder_hidden_states": {0: "batch_size", 1: "sequence_length"},
            "out_sample": {0: "batch_size", 2: "height", 3: "width"}}
    wrapped = _Outputs(model.eval(), lambda m, s, t, e: m(s, t, encoder_hidden_states=e, return_dict=False)[0])
    sizes = [{"batch_size": b, "height": h, "width": w, "sequence_length": n} for b, (h, w), n in zip((1, 2), hw, seqs)]
    return Export(wrapped, inputs, ["out_sample"], axes, sizes, {"timestep": "time"})


def vae_decoder(small: bool) -> Export:
    """AutoencoderKL's decoder: post-quant conv, a mid block with spatial self-attention, up blocks
    of ResNet + nearest-upsample + conv, GroupNorm + SiLU."""
    from diffusers import AutoencoderKL
    width, groups = ((8, 16), 8) if small else ((64, 128, 128), 32)
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=width,
                        norm_num_groups=groups, layers_per_block=1,
                        down_block_types=("DownEncoderBlock2D",) * len(width),
                        up_block_types=("UpDecoderBlock2D",) * len(width))
    hw = ((4, 4), (6, 8)) if small else ((32, 32), (24, 40))
    axes = {"latent_sample": {0: "batch_size", 2: "height", 3: "width"},
            "sample": {0: "batch_size", 2: "height", 3: "width"}}
    wrapped = _Outputs(vae.eval(), lambda m, z: m.decode(z, return_dict=False)[0])
    return Export(wrapped, {"latent_sample": torch.randn(1, 4, *hw[0])}, ["sample"], axes,
                  [{"batch_size": 1, "height": hw[0][0], "width": hw[0][1]},
                   {"batch_size": 1, "height": hw[1][0], "width": hw[1][1]}])


# ---- a YOLO-style detector (v8's layout, written here) --------------------------------------------
class ConvBnSiLU(nn.Sequential):
    def __init__(self, cin: int, cout: int, k: int = 3, s: int = 1):
        super().__init__(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU())


class Bottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool):
        super().__init__()
        self.cv1, self.cv2, self.add = ConvBnSiLU(c, c), ConvBnSiLU(c, c), shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    """1x1 conv, split in two (chunk), n bottlenecks on the second half, concat every stage, 1x1."""

    def __init__(self, cin: int, cout: int, n: int = 1, shortcut: bool = True):
        super().__init__()
        self.c = cout // 2
        self.cv1 = ConvBnSiLU(cin, 2 * self.c, 1)
        self.cv2 = ConvBnSiLU((2 + n) * self.c, cout, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    """Three chained 5x5 stride-1 max pools, concatenated with their input."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.cv1, self.cv2 = ConvBnSiLU(cin, cin // 2, 1), ConvBnSiLU(cin * 2, cout, 1)
        self.pool = nn.MaxPool2d(5, 1, 2)

    def forward(self, x):
        y = [self.cv1(x)]
        y.extend(self.pool(y[-1]) for _ in range(3))
        return self.cv2(torch.cat(y, 1))


class TinyYolo(nn.Module):
    """Backbone (strides 2..32, C2f), SPPF, a PAN neck (nearest upsample x2 + concat, strided conv
    + concat) and a head per level (box + class convs), flattened and concatenated over levels
    into [batch, 4 + classes, anchors] with sigmoid class scores, as YOLOv8's export does."""

    def __init__(self, w: tuple[int, int, int, int, int], classes: int = 80, n: int = 1):
        super().__init__()
        c1, c2, c3, c4, c5 = w
        self.stem = nn.Sequential(ConvBnSiLU(3, c1, 3, 2), ConvBnSiLU(c1, c2, 3, 2), C2f(c2, c2, n))
        self.p3 = nn.Sequential(ConvBnSiLU(c2, c3, 3, 2), C2f(c3, c3, n))
        self.p4 = nn.Sequential(ConvBnSiLU(c3, c4, 3, 2), C2f(c4, c4, n))
        self.p5 = nn.Sequential(ConvBnSiLU(c4, c5, 3, 2), C2f(c5, c5, n), SPPF(c5, c5))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.top4, self.top3 = C2f(c5 + c4, c4, n, False), C2f(c4 + c3, c3, n, False)
        self.down3, self.bot4 = ConvBnSiLU(c3, c3, 3, 2), C2f(c3 + c4, c4, n, False)
        self.down4, self.bot5 = ConvBnSiLU(c4, c4, 3, 2), C2f(c4 + c5, c5, n, False)
        self.box = nn.ModuleList(nn.Sequential(ConvBnSiLU(c, c3), nn.Conv2d(c3, 4, 1)) for c in (c3, c4, c5))
        self.cls = nn.ModuleList(nn.Sequential(ConvBnSiLU(c, c3), nn.Conv2d(c3, classes, 1)) for c in (c3, c4, c5))

    def forward(self, x):
        p3 = self.p3(self.stem(x))
        p4 = self.p4(p3)
        p5 = self.p5(p4)
        t4 = self.top4(torch.cat([self.up(p5), p4], 1))
        t3 = self.top3(torch.cat([self.up(t4), p3], 1))
        b4 = self.bot4(torch.cat([self.down3(t3), t4], 1))
        b5 = self.bot5(torch.cat([self.down4(b4), p5], 1))
        outs = [torch.cat([box(f), cls(f).sigmoid()], 1).flatten(2)
                for f, box, cls in zip((t3, b4, b5), self.box, self.cls)]
        return torch.cat(outs, 2)


def yolo(small: bool) -> Export:
    """TinyYolo (YOLOv8's layout, written here): C2f, SPPF, upsample + concat neck, sigmoid head."""
    model = TinyYolo((4, 8, 8, 16, 16), classes=4) if small else TinyYolo((16, 32, 64, 128, 256), classes=80)
    (h, w), (h2, w2) = ((32, 32), (64, 96)) if small else ((320, 320), (256, 416))
    return Export(randomize_norms(model.eval()), _image((1, 3, h, w), "images"), ["output0"],
                  {"images": {0: "batch", 2: "height", 3: "width"}, "output0": {0: "batch", 2: "anchors"}},
                  [{"batch": 1, "height": h, "width": w}, {"batch": 1, "height": h2, "width": w2}],
                  {"images": "uniform"})


# name -> builder; the order is the benchmark's.
MODELS: dict[str, Callable[[bool], Export]] = {
    "mobilenet_v3_small": mobilenet_v3("mobilenet_v3_small"),
    "mobilenet_v3_large": mobilenet_v3("mobilenet_v3_large"),
    "resnet18": resnet18,
    "efficientnet_b0": efficientnet_b0,
    "regnet_y_400mf": regnet_y_400mf,
    "convnext_atto": convnext_atto,
    "timm_vit_tiny": timm_vit,
    "bert_minilm": bert,
    "xlm_roberta_small": xlm_roberta,
    "vit_tiny": hf_vit,
    "clip_vision": clip_vision,
    "whisper_tiny_encoder": whisper_encoder,
    "wav2vec2_small": wav2vec2,
    "unet2d_small": unet,
    "vae_decoder_small": vae_decoder,
    "yolo_style": yolo,
}
