"""UpsampleConvPass: a 3x3 Conv over a nearest 2x upsampled image runs at the image's size.

Decoders upsample this way (diffusers' Upsample2D and VAE decoders: F.interpolate(scale 2,
nearest) then a 3x3 conv, pads 1). Every output pixel (2i + a, 2j + b) of that conv reads a 3x3
window of the upsampled image, which covers only 2x2 distinct pixels of the original: rows
(i - 1, i) for a = 0 (upsampled rows 2i - 1, 2i, 2i + 1 are original rows i - 1, i, i) and
(i, i + 1) for a = 1; likewise the columns. So phase (a, b) of the output is a 2x2 conv of the
original image whose weights sum the 3x3 taps that land on the same pixel:

    W_ab[m, c] = P_a @ W[m, c] @ P_b^T,   P_0 = [[1, 0, 0], [0, 1, 1]],   P_1 = [[1, 1, 0], [0, 0, 1]]

All four phases are one Conv (2x2 kernel, pads 1 on every side, 4M output channels, phase block
2a + b) over [H + 1, W + 1] positions, and onyxia::PhaseInterleave (operators/conv/phases.py) puts
them in place. 16 multiply-adds per 2x2 block of outputs instead of 36, no upsampled image in
memory, no Resize dispatch. lavapipe (Mesa 22.3, a 2-core EPYC, `onyxia bench --profile`, two
alternating pairs): 128 -> 128 channels from 64x64 to 128x128, Resize 13 ms + conv 260 / 203 ms
before, phase conv 156 / 127 ms + interleave 22 ms after; the bench models' VAE decoder at a
32x32 latent 1451 / 1504 / 1324 -> 1282 / 1189 / 1237 ms (alternating runs, medians of 6).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onyxia.compiler.pass_api import CompileContext, Pass, PassResult, Stage
from onyxia.ir.graph import IrGraph, Node, TensorDef, TensorKind
from onyxia.operators.elementwise.fused import FUSED_DOMAIN

FLOATS = ("float32", "float16")
# (coordinate_transformation_mode, nearest_mode) pairs whose 2x nearest map is floor(dst / 2):
# asymmetric reads dst / 2 (ties at odd dst round down); the half-pixel modes dst / 2 - 1/4 (no
# ties, both roundings agree; pytorch_half_pixel differs only for an output of length 1).
EXACT_MODES = {("asymmetric", "floor"), ("asymmetric", "round_prefer_floor"),
               ("half_pixel", "round_prefer_floor"), ("half_pixel", "round_prefer_ceil"),
               ("pytorch_half_pixel", "round_prefer_floor"), ("pytorch_half_pixel", "round_prefer_ceil")}
# rows of the 3x3 kernel each of phase a's two taps sums
PHASE_TAPS = (np.array([[1, 0, 0], [0, 1, 1]], np.float64), np.array([[1, 1, 0], [0, 0, 1]], np.float64))


@dataclass(frozen=True)
class UpsampleConvReport:
    """{Conv node: the Resize it absorbed}, {Conv node after a Resize: why it stays}."""

    folded: dict[str, str]
    skipped: dict[str, str]


class UpsampleConvPass(Pass):
    """Optimization stage, after ConvBatchNormPass, before the fusion passes.

    1. For each Conv (opset domain) whose input is a Resize's output, where
       - the Resize (opset 11 or later) is nearest, scales a constant [1, 1, 2, 2], no sizes,
         no axes or antialias, a coordinate / nearest mode pair of EXACT_MODES, its input 4-D;
       - the Conv is 3x3, stride 1, dilation 1, pads 1 on every side (no auto_pad), group 1,
         with a constant float32 / float16 weight (and bias, if any);
    2. a new Conv reads the Resize's input with the phase weights [4M, C, 2, 2] (module doc; in
       float64, stored in W's dtype) and the bias repeated per phase, pads 1, into a new tensor
       that onyxia::PhaseInterleave turns into the old Conv's output. The Resize stays only if
       something else reads its output.
    3. Every Conv after a Resize left alone gets its reason (ctx.reports["upsample-conv"]).
    """

    name = "upsample-conv"
    stage = Stage.OPTIMIZATION
    after = ("conv-batchnorm",)

    def run(self, graph: IrGraph, ctx: CompileContext) -> PassResult:
        folded: dict[str, str] = {}
        skipped: dict[str, str] = {}
        for nid in graph.topological_order():
            if not graph.has_node(nid):
                continue
            conv = graph.node(nid)
            if conv.domain not in ("", "ai.onnx") or conv.op_type != "Conv":
                continue
            producer = graph.producer(conv.inputs[0])
            resize = graph.node(producer) if producer is not None else None
            if resize is None or resize.domain not in ("", "ai.onnx") or resize.op_type != "Resize":
                continue
            why = _resize_reason(graph, resize) or _conv_reason(graph, conv)
            if why:
                skipped[conv.name] = why
                continue
            folded[conv.name] = resize.name
            _fold(graph, conv, resize)
        ctx.reports[self.name] = UpsampleConvReport(folded, skipped)
        return PassResult(bool(folded), f"{len(folded)} upsampled 3x3 Convs run at the image's size; "
                                        f"{len(skipped)} left alone")


def _constant(graph: IrGraph, t: str | None) -> np.ndarray | None:
    if not t or t in graph.inputs:
        return None
    value = graph.tensor(t).value
    return None if value is None or value.dtype == object else value


def _text(value: object) -> object:
    return value.decode() if isinstance(value, bytes) else value


def _resize_reason(graph: IrGraph, resize: Node) -> str | None:
    """Why the Resize is not an exact nearest 2x upsampling of the two image axes, or None."""
    a = {k: _text(v) for k, v in resize.attributes.items()}
    if graph.opset_of(resize) < 11:
        return f"the Resize is opset {graph.opset_of(resize)} (scales before roi)"
    if a.get("mode", "nearest") != "nearest":
        return f"the Resize's mode is {a.get('mode')}, not nearest"
    modes = (a.get("coordinate_transformation_mode", "half_pixel"), a.get("nearest_mode", "round_prefer_floor"))
    if modes not in EXACT_MODES:
        return f"the Resize's coordinate/nearest modes {modes} do not map output i to input i // 2"
    if a.get("axes") is not None or int(a.get("antialias", 0)):
        return "the Resize has axes or antialias"
    inputs = list(resize.inputs) + [None] * (4 - len(resize.inputs))
    scales = _constant(graph, inputs[2])
    if inputs[3] or scales is None or [float(s) for s in scales.reshape(-1)] != [1.0, 1.0, 2.0, 2.0]:
        return "the Resize's scales are not the constant [1, 1, 2, 2]"
    x = graph.tensor(resize.inputs[0]).shape
    if x is None or len(x) != 4:
        return "the Resize's input is not 4-D"
    return None


def _conv_reason(graph: IrGraph, conv: Node) -> str | None:
    """Why the Conv is not a 3x3 pads-1 stride-1 ungrouped conv with constant float weights."""
    a = conv.attributes
    w = _constant(graph, conv.inputs[1])
    if w is None or w.ndim != 4 or w.shape[2:] != (3, 3) or w.dtype.name not in FLOATS:
        return "its weights are not a constant float [M, C, 3, 3]"
    bias = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else None
    if bias is not None and (_constant(graph, bias) is None or _constant(graph, bias).dtype != w.dtype):
        return "its bias is not a constant of the weights' dtype"
    if int(a.get("group", 1)) != 1:
        return f"group {a.get('group')}"
    if _text(a.get("auto_pad", "NOTSET")) != "NOTSET":
        return f"auto_pad {a.get('auto_pad')}"
    if list(a.get("pads", [0] * 4)) != [1] * 4 or list(a.get("strides", [1, 1])) != [1, 1] \
            or list(a.get("dilations", [1, 1])) != [1, 1]:
        return "it is not pads 1, stride 1, dilation 1"
    if graph.tensor(conv.inputs[0]).dtype != graph.tensor(conv.inputs[1]).dtype:
        return "its input and weights differ in dtype"
    return None


def phase_weights(w: np.ndarray) -> np.ndarray:
    """[M, C, 3, 3] -> [4M, C, 2, 2]: block 2a + b holds phase (a, b)'s 2x2 kernels."""
    w64 = w.astype(np.float64)
    blocks = [np.einsum("uk,mckl,vl->mcuv", PHASE_TAPS[a], w64, PHASE_TAPS[b]) for a in (0, 1) for b in (0, 1)]
    return np.concatenate(blocks, axis=0).astype(w.dtype)


def _fold(graph: IrGraph, conv: Node, resize: Node) -> None:
    w = graph.tensor(conv.inputs[1])
    bias = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else None
    x = resize.inputs[0]
    n, _, h, width = graph.tensor(x).shape
    inputs = [x]
    for hint, value in ((f"{conv.inputs[1]}/phases", phase_weights(w.value)),
                        (f"{bias}/phases", np.tile(_constant(graph, bias), 4) if bias else None)):
        if value is not None:
            inputs.append(graph.fresh_name(hint))
            graph.add_tensor(TensorDef(inputs[-1], w.dtype, tuple(value.shape), TensorKind.WEIGHT, value))
    out = graph.tensor(conv.outputs[0])
    z = graph.fresh_name(f"{out.name}/phases")
    graph.add_tensor(TensorDef(z, out.dtype, (n, 4 * w.value.shape[0], h + 1, width + 1)))
    name = conv.name
    graph.remove_node(conv.id)
    if out.name not in graph.tensors:
        graph.add_tensor(out)
    graph.add_node("Conv", inputs, [z], {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]}, name=name)
    graph.add_node("PhaseInterleave", [z], [out.name], domain=FUSED_DOMAIN, name=f"{name}/interleave")
    if not graph.consumers(resize.outputs[0]) and resize.outputs[0] not in graph.outputs:
        graph.remove_node(resize.id)


__all__ = ["UpsampleConvPass", "UpsampleConvReport", "phase_weights"]
