"""EpilogueFusionPass on convolutions: activations, SiLU, Clip, a per-channel operand and a
residual Add after a Conv or ConvTranspose run in its kernels' epilogue on every kernel path
(conv_direct, conv_gemm, split-K, the pointwise product's kernels), on both adapter kinds'
kernels, against onnxruntime; fewer dispatches; the cases the pass must leave alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onyxia.plan import AdapterFacts
from tests.builders.conv_epilogue import PATHS, PATTERNS, conv_pattern_model
from tests.gpu.test_matmul_epilogue import compile_unfused
from tests.helpers import compile_with_default_passes, live_dispatches, make_model, run_ort

pytestmark = pytest.mark.gpu

EXPORTED = Path(__file__).parent.parent / "data" / "exported"
# the kernel that stores each path's output (and runs the epilogue)
STORES = {"direct": "conv/conv_direct", "gemm": "conv/conv_gemm", "splitk": "matmul/splitk",
          "transpose": "conv/conv_gemm"}


def _feeds(model, dims: dict, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([dims[d.dim_param] if d.dim_param else d.dim_value
                                         for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


def _labels(compiled, dims, adapter: str) -> list[str]:
    return [compiled.shaders[d.shader].label for d in live_dispatches(compiled, dims, adapter)]


def _check(runtime, model, fused: dict[str, str], dims=None, store: str | None = None):
    dims = dims or {"n": 2}
    feeds = _feeds(model, dims)
    ref = run_ort(model, feeds)[0]
    pipeline, compiled = compile_with_default_passes(model, dims)
    report = pipeline.context.reports["epilogue-fusion"]
    for conv, reader in fused.items():
        assert report.fused.get(conv) == reader, report.skipped
    _, unfused = compile_with_default_passes(model, dims, without="epilogue-fusion")
    exe = runtime.load_model(compiled)
    for kind in ("gpu", "cpu"):  # both adapter kinds' kernels, whatever this adapter is
        labels = _labels(compiled, dims, kind)
        assert len(labels) == len(_labels(unfused, dims, kind)) - len(fused), labels
        if store is not None and kind == "gpu":  # a CPU-type adapter prefers conv/conv_register
            assert store in labels, labels
        exe.assume_adapter(kind)
        ours = exe.run(feeds)[model.graph.output[0].name]
        np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=2e-5 * float(np.abs(ref).max()), err_msg=kind)
    return compiled


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("path", ["direct", "gemm"])
def test_activation_in_conv_epilogue(runtime, path, pattern):
    model = conv_pattern_model(path, pattern)
    pipeline, _ = compile_with_default_passes(model, {"n": 2})
    fused = pipeline.context.reports["epilogue-fusion"].fused
    assert list(fused) == ["conv"], pipeline.context.reports["epilogue-fusion"].skipped
    _check(runtime, model, fused, store=STORES[path])


@pytest.mark.parametrize("pattern", ["hardswish", "residual", "channel_relu"])
@pytest.mark.parametrize("path", ["splitk", "pointwise", "pooled", "transpose"])
def test_every_conv_path_runs_the_epilogue(runtime, path, pattern):
    model = conv_pattern_model(path, pattern)
    pipeline, _ = compile_with_default_passes(model, {"n": 2})
    fused = pipeline.context.reports["epilogue-fusion"].fused
    assert list(fused) == ["conv"], pipeline.context.reports["epilogue-fusion"].skipped
    compiled = _check(runtime, model, fused, store=STORES.get(path))
    if path == "pointwise":  # 36 positions: on a CPU-type adapter the transposed product stores y
        select = next(s for op in compiled.operations for s in op.steps if getattr(s, "key", "").startswith("conv/"))
        assert select.labels[select.choose({"n": 2}, AdapterFacts("cpu"))] == "product", select.labels


@pytest.mark.parametrize("n", [1, 3])
def test_without_bias_and_batch(runtime, n):
    model = conv_pattern_model("gemm", "residual", bias=False)
    _check(runtime, model, {"conv": "Add_1"}, dims={"n": n}, store="conv/conv_gemm")


def test_declines_with_reasons():
    rng = np.random.default_rng(0)
    inits = {f"w{i}": rng.standard_normal((4, 4, 3, 3)).astype(np.float32) for i in range(3)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["twice"], name="twice", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["twice"], ["r1"]), helper.make_node("Sigmoid", ["twice"], ["r2"]),
             helper.make_node("Conv", ["x", "w1"], ["out"], name="out", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["out"], ["r3"]),
             helper.make_node("Conv", ["x", "w2"], ["pool"], name="pool", pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["pool"], ["r4"], kernel_shape=[2, 2])]
    model = make_model(nodes, [("x", np.float32, [1, 4, 6, 6])], ["r1", "r2", "out", "r3", "r4"], inits, opset=18)
    pipeline, compiled = compile_with_default_passes(model, {})
    report = pipeline.context.reports["epilogue-fusion"]
    assert not report.fused
    assert "read by 2 nodes" in report.skipped["twice"]
    assert "graph output" in report.skipped["out"]
    assert "not a fusible elementwise op" in report.skipped["pool"]


def test_declines_past_eight_storage_buffers():
    """x, w, bias, y and five residual operands: 9 bindings, past WebGPU's guaranteed 8."""
    rng = np.random.default_rng(1)
    inits = {"w": rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "b": np.zeros(4, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t0"], name="conv")]
    nodes += [helper.make_node("Add", [f"t{i}", f"r{i}"], [f"t{i + 1}"]) for i in range(5)]
    inputs = [("x", np.float32, [1, 4, 3, 3])] + [(f"r{i}", np.float32, [1, 4, 3, 3]) for i in range(5)]
    model = make_model(nodes, inputs, ["t5"], inits, opset=18)
    pipeline, _ = compile_with_default_passes(model, {})
    assert "9 storage buffers" in pipeline.context.reports["epilogue-fusion"].skipped["conv"]


def test_integer_convolution_keeps_its_kernel():
    """ConvInteger lowers to an int32 Conv: no f32 epilogue for it."""
    nodes = [helper.make_node("ConvInteger", ["x", "w"], ["c"], name="ci"), helper.make_node("Relu", ["c"], ["y"])]
    w = np.arange(2 * 3 * 2 * 2, dtype=np.uint8).reshape(2, 3, 2, 2)
    model = make_model(nodes, [("x", np.uint8, [1, 3, 4, 4])], ["y"], {"w": w}, opset=18)
    pipeline, _ = compile_with_default_passes(model, {})
    report = pipeline.context.reports["epilogue-fusion"]
    assert not report.fused and any("int32" in why for why in report.skipped.values()), report


def _se_block():
    """A MobileNetV3 inverted-residual block with squeeze-excite, as torchvision exports it:
    expand 1x1 + HardSwish, depthwise 3x3 + HardSwish, GlobalAveragePool, 1x1 + Relu,
    1x1 + HardSigmoid, Mul, project 1x1, residual Add."""
    rng = np.random.default_rng(5)
    c, e, s = 16, 48, 24
    shapes = {"we": (e, c, 1, 1), "wd": (e, 1, 3, 3), "w1": (s, e, 1, 1), "w2": (e, s, 1, 1), "wp": (c, e, 1, 1)}
    inits = {k: (rng.standard_normal(v) / np.sqrt(np.prod(v[1:]))).astype(np.float32) for k, v in shapes.items()}
    inits.update({f"b{k[1]}": rng.standard_normal(v[0]).astype(np.float32) * 0.1 for k, v in shapes.items()})
    n = helper.make_node
    nodes = [n("Conv", ["x", "we", "be"], ["ce"], name="expand"), n("HardSwish", ["ce"], ["he"]),
             n("Conv", ["he", "wd", "bd"], ["cd"], name="depthwise", group=e, pads=[1, 1, 1, 1]),
             n("HardSwish", ["cd"], ["hd"]), n("GlobalAveragePool", ["hd"], ["g"]),
             n("Conv", ["g", "w1", "b1"], ["c1"], name="fc1"), n("Relu", ["c1"], ["r1"]),
             n("Conv", ["r1", "w2", "b2"], ["c2"], name="fc2"),
             n("HardSigmoid", ["c2"], ["hs"], alpha=1 / 6, beta=0.5), n("Mul", ["hd", "hs"], ["se"]),
             n("Conv", ["se", "wp", "bp"], ["cp"], name="project"), n("Add", ["cp", "x"], ["y"])]
    return make_model(nodes, [("x", np.float32, ["n", c, 14, 14])], ["y"], inits, opset=17)


def test_mobilenet_v3_block(runtime):
    model = _se_block()
    pipeline, _ = compile_with_default_passes(model, {"n": 1})
    fused = pipeline.context.reports["epilogue-fusion"].fused
    # every conv, fc2 with its HardSigmoid: the gate's Mul is read by project (ChannelScalePass)
    assert sorted(fused) == ["depthwise", "expand", "fc1", "fc2", "project"], fused
    assert list(pipeline.context.reports["channel-scale"].fused) == ["project"]
    _check(runtime, model, fused, dims={"n": 1})


@pytest.mark.parametrize("name", ["small_cnn.torchscript.onnx", "small_cnn.dynamo.onnx",
                                  "small_cnn.torchscript_nofold.onnx"])
def test_exported_small_cnn(runtime, name):
    import onnx

    model = onnx.load(EXPORTED / name)
    pipeline, _ = compile_with_default_passes(model, {"batch": 2})
    fused = pipeline.context.reports["epilogue-fusion"].fused
    # both Relus (BatchNormalization folded into the first Conv's weights where the export kept it)
    assert len([r for r in fused.values() if "relu" in r.lower()]) == 2, pipeline.context.reports["epilogue-fusion"]
    assert not pipeline.context.reports["conv-batchnorm"].skipped
    _check(runtime, model, fused, dims={"batch": 2})


@pytest.mark.parametrize("pattern", ["relu", "hardsigmoid"])
def test_pooled_map_convolution_reads_transposed_weights(runtime, pattern):
    """Squeeze-excite's 1x1 convolutions over the pooled map: W^T [C, M] (PooledConvWeightsPass),
    the chunked decode kernel on a CPU-type adapter, the coalesced gemv elsewhere."""
    model = conv_pattern_model("pooled", pattern)
    pipeline, compiled = compile_with_default_passes(model, {"n": 1})
    assert list(pipeline.context.reports["pooled-conv-weights"].transposed) == ["conv"]
    assert _labels(compiled, {"n": 1}, "cpu") == ["matmul/gemv_chunked"]
    assert _labels(compiled, {"n": 1}, "gpu") == ["matmul/gemv"]
    _check(runtime, model, pipeline.context.reports["epilogue-fusion"].fused, dims={"n": 1})
    _check(runtime, model, pipeline.context.reports["epilogue-fusion"].fused, dims={"n": 3})


def test_pooled_map_convolution_without_epilogue(runtime):
    """Bias and no reader to fuse (graph output), batch symbolic: X[n, C] @ W^T + bias."""
    model = conv_pattern_model("pooled", "relu")
    model.graph.output[0].name = "c"
    del model.graph.node[1:]
    pipeline, compiled = compile_with_default_passes(model, {"n": 5})
    assert list(pipeline.context.reports["pooled-conv-weights"].transposed) == ["conv"]
    feeds = _feeds(model, {"n": 5})
    exe = runtime.load_model(compiled)
    for kind in ("gpu", "cpu"):
        exe.assume_adapter(kind)
        np.testing.assert_allclose(exe.run(feeds)["c"], run_ort(model, feeds)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", ["direct", "gemm", "splitk", "pointwise", "pooled"])
def test_float16_storage(runtime, path):
    """float16 tensors: the kernels round the convolution to f16 as stored, then the epilogue
    computes in f32 and rounds once more, as the unfused plan does (onnxruntime: within an ulp)."""
    model = conv_pattern_model(path, "residual")
    for init in model.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name))
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.elem_type = TensorProto.FLOAT16
    pipeline, compiled = compile_with_default_passes(model, {"n": 2})
    assert list(pipeline.context.reports["epilogue-fusion"].fused) == ["conv"]
    feeds = {k: v.astype(np.float16) for k, v in _feeds(model, {"n": 2}).items()}
    ref = run_ort(model, feeds)[0].astype(np.float32)
    exe = runtime.load_model(compiled)
    plain = runtime.load_model(compile_unfused(model, {"n": 2}))
    for kind in ("gpu", "cpu"):
        exe.assume_adapter(kind)
        plain.assume_adapter(kind)
        got = exe.run(feeds)["y"]
        ours = got.astype(np.float32)
        np.testing.assert_allclose(ours, ref, rtol=2e-3, atol=2e-3 * float(np.abs(ref).max()), err_msg=kind)
        # the same kernels unfused: fusing changes no bit (the epilogue reads the f16-rounded value)
        np.testing.assert_array_equal(got, plain.run(feeds)["y"], err_msg=kind)


@pytest.mark.parametrize("path", ["direct", "gemm", "pointwise"])
def test_symbolic_image_size(runtime, path):
    """Height and width symbolic: the broadcast operands' index params are immediates, patched
    by update_dimensions (a per-channel operand and a residual, two sizes, no recompile)."""
    op, channels, maps, k, _, attrs = PATHS[path]
    rng = np.random.default_rng(3)
    group = attrs.get("group", 1)
    inits = {"w": rng.standard_normal((maps, channels // group, k, k)).astype(np.float32),
             "chan": rng.standard_normal((1, maps, 1, 1)).astype(np.float32)}
    pads = [k // 2] * 4
    nodes = [helper.make_node(op, ["x", "w"], ["c"], name="conv", group=group, pads=pads),
             helper.make_node("Mul", ["c", "chan"], ["m"]), helper.make_node("Add", ["m", "r"], ["y"])]
    inputs = [("x", np.float32, ["n", channels, "h", "w"]), ("r", np.float32, ["n", maps, "h", "w"])]
    model = make_model(nodes, inputs, ["y"], inits, opset=18)
    pipeline, compiled = compile_with_default_passes(model, {"n": 1, "h": 9, "w": 7})
    assert list(pipeline.context.reports["epilogue-fusion"].fused) == ["conv"]
    exe = runtime.load_model(compiled)
    for dims in ({"n": 1, "h": 9, "w": 7}, {"n": 2, "h": 5, "w": 12}):
        exe.update_dimensions(dims)
        feeds = _feeds(model, dims)
        for kind in ("gpu", "cpu"):
            exe.assume_adapter(kind)
            np.testing.assert_allclose(exe.run(feeds)["y"], run_ort(model, feeds)[0], rtol=1e-5, atol=1e-4)
    assert exe.stats.recompiles == 0
