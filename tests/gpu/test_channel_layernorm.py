"""ChannelLayerNormPass and the LayerNorm it writes: LayerNorm2d as exporters spell it
(Transpose -> LayerNormalization over the last axis -> Transpose back) runs as one strided
statistics pass over the NCHW tensor, against onnxruntime at several sizes of one plan; chains
that are not that norm stay as they are and still match."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

from tests.builders.families import models
from tests.helpers import compile_with_default_passes, make_model, run_ort

RNG = np.random.default_rng(5)


def layernorm2d_model(rank: int = 4, channels: int = 12, *, bias: bool = True, epsilon: float = 1e-6,
                      extra_reader: bool = False, perm_back: list[int] | None = None):
    """Conv 1x1 -> Transpose(0, 2, .., 1) -> LayerNormalization(-1) -> Transpose back -> Relu; the
    norm's scale and bias are random (a plain LayerNorm's are ones and zeros)."""
    spatial = ["h", "w", "d"][:rank - 2]
    to_last = [0, *range(2, rank), 1]
    back = perm_back or [0, rank - 1, *range(1, rank - 1)]
    nodes = [h.make_node("Conv", ["x", "cw"], ["c"], kernel_shape=[1] * (rank - 2)),
             h.make_node("Transpose", ["c"], ["t"], perm=to_last),
             h.make_node("LayerNormalization", ["t", "g", *(["b"] if bias else [])], ["n"], axis=-1, epsilon=epsilon),
             h.make_node("Transpose", ["n"], ["u"], perm=back),
             h.make_node("Relu", ["u"], ["y"])]
    outputs = ["y"]
    if extra_reader:  # the norm's last-axis output is read by something else too
        nodes.append(h.make_node("Sigmoid", ["n"], ["side"]))
        outputs.append("side")
    inits = {"cw": RNG.standard_normal((channels, 5, *[1] * (rank - 2))).astype(np.float32),
             "g": RNG.standard_normal(channels).astype(np.float32) + 1.0,
             **({"b": RNG.standard_normal(channels).astype(np.float32)} if bias else {})}
    return make_model(nodes, [("x", np.float32, ["n", 5, *spatial])], outputs, inits)


def _fused(model, dims):
    pipeline, compiled = compile_with_default_passes(model, dims)
    return pipeline.context.reports["channel-layernorm"].fused, compiled


def _labels(exe) -> set[str]:
    return {exe.model.shaders[d.shader].label for d in exe.dispatch_commands() if all(d.workgroups)}


@pytest.mark.parametrize("adapter", ["cpu", "gpu"])
@pytest.mark.parametrize("rank,bias", [(4, True), (4, False), (3, True), (5, True)])
def test_layernorm2d_runs_in_place_and_matches_onnxruntime(runtime, adapter, rank, bias):
    model = layernorm2d_model(rank, bias=bias)
    axes = "hwd"[:rank - 2]
    sizes = [{"n": n, **dict(zip(axes, spatial))} for n, spatial in ((2, (6, 5, 3)), (1, (9, 7, 2)), (3, (1, 4, 1)))]
    fused, compiled = _fused(model, sizes[0])
    assert len(fused) == 1, fused
    assert not [op for op in compiled.operations if op.op_type == "Transpose"]
    exe = runtime.load_model(compiled)
    exe.assume_adapter(adapter)
    for size in sizes:
        exe.update_dimensions(size)
        x = RNG.standard_normal((size["n"], 5, *[size[s] for s in axes])).astype(np.float32)
        np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-5,
                                   err_msg=str(size))
        assert "strided_copy" not in _labels(exe) and "moments_meanvar" in _labels(exe)
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("case", ["extra reader", "other perm"])
def test_other_chains_stay_and_match(runtime, case):
    """The norm's last-axis output read elsewhere too, or a second Transpose that does not undo
    the first: left as written (three ops), the same results as onnxruntime."""
    model = (layernorm2d_model(extra_reader=True) if case == "extra reader"
             else layernorm2d_model(perm_back=[0, 3, 2, 1]))
    dims = {"n": 2, "h": 6, "w": 5}
    fused, compiled = _fused(model, dims)
    assert fused == {}
    exe = runtime.load_model(compiled)
    x = RNG.standard_normal((2, 5, 6, 5)).astype(np.float32)
    got = exe.run({"x": x})
    for name, ref in zip(compiled.outputs, run_ort(model, {"x": x})):
        np.testing.assert_allclose(got[name], ref, rtol=1e-5, atol=1e-5, err_msg=name)


def test_timm_convnext_norms_all_read_in_place():
    """timm's ConvNeXt (the committed reduced-width export): every LayerNorm2d (stem, blocks,
    downsamples, and the head's over the pooled 1x1 map) is fused, no Transpose is left
    (tests/gpu/test_exported_models.py runs it against onnxruntime)."""
    import onnx

    info = {m.name: m for m in models()}["convnext_atto"]
    model = onnx.load(str(info.path))
    norms = sum(n.op_type == "LayerNormalization" for n in model.graph.node)
    transposes = sum(n.op_type == "Transpose" for n in model.graph.node)
    dims = {k: v for k, v in info.sizes[0].items() if isinstance(v, int)}
    fused, compiled = _fused(model, dims)
    assert transposes == 2 * len(fused) and len(fused) == norms, (norms, transposes, sorted(fused))
    assert not [op for op in compiled.operations if op.op_type == "Transpose"]
