"""ChannelScalePass and the convolutions that read a squeeze-excite gate: the block's
Mul(x, gate) goes, the projection conv scales each input channel as it loads it (the register
tiles and the chunked product) or runs the multiply first (every other kernel), and every
alternative matches onnxruntime at several sizes of one plan; Muls that are not such a gate stay."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as h

import onyxia
from onyxia.compiler.pipeline import CompilerPipeline
from onyxia.errors import OnyxiaError
from onyxia.operators import core_operator_registry
from onyxia.operators.conv.scale import CHANNEL_SCALE_ATTR
from onyxia.runtime.select import SelectCommand
from tests.builders.families import models
from tests.helpers import compile_with_default_passes, make_model, run_ort

RNG = np.random.default_rng(11)


def se_block(channels: int = 12, maps: int = 8, kernel: int = 1, gate: str = "HardSigmoid", *,
             residual: bool = False, gate_first: bool = False, extra_reader: bool = False, bias: bool = True):
    """x -> Relu -> squeeze-excite (GlobalAveragePool, 1x1 conv, Relu, 1x1 conv, `gate`) -> Mul ->
    `kernel` x `kernel` conv to `maps` channels (+ residual Add where maps == channels)."""
    pad = kernel // 2
    mul_inputs = ["gate", "a"] if gate_first else ["a", "gate"]
    nodes = [h.make_node("Relu", ["x"], ["a"]),
             h.make_node("GlobalAveragePool", ["a"], ["p"]),
             h.make_node("Conv", ["p", "w1", "b1"], ["f1"]),
             h.make_node("Relu", ["f1"], ["r1"]),
             h.make_node("Conv", ["r1", "w2", "b2"], ["f2"]),
             h.make_node(gate, ["f2"], ["gate"]),
             h.make_node("Mul", mul_inputs, ["s"]),
             h.make_node("Conv", ["s", "w3", *(["b3"] if bias else [])], ["c"], kernel_shape=[kernel, kernel],
                         pads=[pad] * 4)]
    out = "c"
    if residual:
        nodes.append(h.make_node("Add", ["c", "x"], ["y"]))
        out = "y"
    outputs = [out]
    if extra_reader:  # the gated activation is read by something else too
        nodes.append(h.make_node("Sigmoid", ["s"], ["side"]))
        outputs.append("side")
    inits = {"w1": RNG.standard_normal((4, channels, 1, 1)).astype(np.float32) * 0.5,
             "b1": RNG.standard_normal(4).astype(np.float32),
             "w2": RNG.standard_normal((channels, 4, 1, 1)).astype(np.float32) * 0.5,
             "b2": RNG.standard_normal(channels).astype(np.float32),
             "w3": RNG.standard_normal((maps, channels, kernel, kernel)).astype(np.float32) * 0.3,
             **({"b3": RNG.standard_normal(maps).astype(np.float32)} if bias else {})}
    return make_model(nodes, [("x", np.float32, ["n", channels, "h", "w"])], outputs, inits)


def _labels(exe) -> set[str]:
    return {exe.model.shaders[d.shader].label for d in exe.dispatch_commands() if all(d.workgroups)}


@pytest.mark.parametrize("kernel,gate,residual,gate_first", [
    (1, "HardSigmoid", False, False), (1, "Sigmoid", True, True), (3, "Sigmoid", False, False),
    (3, "HardSigmoid", True, True)])
def test_the_gate_is_read_by_every_conv_alternative_and_matches_onnxruntime(runtime, kernel, gate, residual,
                                                                         gate_first):
    maps = 12 if residual else 8
    model = se_block(12, maps, kernel, gate, residual=residual, gate_first=gate_first)
    sizes = [{"n": 2, "h": 9, "w": 7}, {"n": 1, "h": 16, "w": 20}, {"n": 3, "h": 5, "w": 4}]
    pipeline, compiled = compile_with_default_passes(model, sizes[0])
    assert list(pipeline.context.reports["channel-scale"].fused.values()) == ["gate"]
    assert not [op for op in compiled.operations if op.op_type == "Mul"], [op.op_type for op in compiled.operations]
    exe = runtime.load_model(compiled)
    select = next(c for c in exe.commands if isinstance(c, SelectCommand) and c.tuned
                  and c.step.key.startswith("conv/") and f"x{kernel}x{kernel}/" in c.step.key
                  and c.step.key.split("/")[2].startswith("12x"))
    seen: dict[str, set[str]] = {}
    for size in sizes:
        exe.update_dimensions(size)
        x = RNG.standard_normal((size["n"], 12, size["h"], size["w"])).astype(np.float32)
        want = run_ort(model, {"x": x})[0]
        for i, label in enumerate(select.step.labels):
            if not select.eligible[i]:
                continue
            exe.choose(select, i)
            got = exe.run({"x": x})[model.graph.output[0].name]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{label} at {size}")
            seen[label] = _labels(exe)
    natives = [label for label in seen if label.startswith(("register", "product"))]
    assert natives, seen
    for label in natives:  # these read the gate themselves: no multiply of their own
        assert "conv_channel_scale" not in seen[label], (label, seen[label])
    assert "conv_channel_scale" in seen["workgroup"], seen["workgroup"]


@pytest.mark.parametrize("adapter", ["cpu", "gpu"])
def test_one_gate_for_every_image_and_a_conv_without_bias(runtime, adapter):
    """A constant gate [1, C, 1, 1] scales every image of a batch (stride 0 between images)."""
    scale = RNG.uniform(0.2, 1.5, (1, 16, 1, 1)).astype(np.float32)
    nodes = [h.make_node("Relu", ["x"], ["a"]), h.make_node("Mul", ["a", "g"], ["s"]),
             h.make_node("Conv", ["s", "w"], ["y"], kernel_shape=[1, 1])]
    model = make_model(nodes, [("x", np.float32, ["n", 16, "h", "w"])], ["y"],
                       {"g": scale, "w": RNG.standard_normal((8, 16, 1, 1)).astype(np.float32)})
    pipeline, compiled = compile_with_default_passes(model, {"n": 3, "h": 6, "w": 10})
    assert list(pipeline.context.reports["channel-scale"].fused.values()) == ["g"]
    exe = runtime.load_model(compiled)
    exe.assume_adapter(adapter)
    for size in ({"n": 3, "h": 6, "w": 10}, {"n": 2, "h": 13, "w": 3}):
        exe.update_dimensions(size)
        x = RNG.standard_normal((size["n"], 16, size["h"], size["w"])).astype(np.float32)
        np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["extra_reader", "pooled_map"])
def test_muls_that_are_not_a_gate_over_a_conv_input_stay(runtime, case):
    if case == "extra_reader":  # the gated activation is read elsewhere: the Mul must run anyway
        model = se_block(extra_reader=True)
        dims = {"n": 2, "h": 5, "w": 6}
    else:  # EfficientNet's SiLU inside the block: fc1 * Sigmoid(fc1) over the pooled 1x1 map
        nodes = [h.make_node("GlobalAveragePool", ["x"], ["p"]), h.make_node("Sigmoid", ["p"], ["sg"]),
                 h.make_node("Mul", ["p", "sg"], ["s"]), h.make_node("Conv", ["s", "w"], ["y"])]
        model = make_model(nodes, [("x", np.float32, ["n", 8, "h", "w"])], ["y"],
                           {"w": RNG.standard_normal((4, 8, 1, 1)).astype(np.float32)})
        dims = {"n": 2, "h": 3, "w": 3}
    pipeline, compiled = compile_with_default_passes(model, dims)
    assert pipeline.context.reports["channel-scale"].fused == {}
    exe = runtime.load_model(compiled)
    x = RNG.standard_normal((dims["n"], 12 if case == "extra_reader" else 8, dims["h"], dims["w"])).astype(np.float32)
    got = exe.run({"x": x})
    for name, want in zip([o.name for o in model.graph.output], run_ort(model, {"x": x})):
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5)


def test_a_malformed_channel_scale_is_a_clear_error():
    """A plan's Conv whose gate input does not match its channels fails naming the node and
    the input (ONNX's own Conv takes no such input: a pass writes it)."""
    nodes = [h.make_node("Conv", ["x", "w"], ["y"], name="proj")]
    model = make_model(nodes, [("x", np.float32, [1, 8, 4, 4]), ("g", np.float32, [1, 4, 1, 1])], ["y"],
                       {"w": RNG.standard_normal((4, 8, 1, 1)).astype(np.float32)})
    graph = onyxia.load_model(model)
    conv = next(n for n in graph.nodes if n.op_type == "Conv")
    graph.replace_node(conv.id, "Conv", ["x", conv.inputs[1], None, "g"], {CHANNEL_SCALE_ATTR: 3})
    expected = r"'proj'.*input 3: the channel scale must have shape \[1, 8, 1, 1\], got \[1, 4, 1, 1\]"
    with pytest.raises(OnyxiaError, match=expected):
        CompilerPipeline(core_operator_registry()).compile(graph, {})


@pytest.mark.parametrize("name", ["mobilenet_v3_small", "efficientnet_b0", "regnet_y_400mf"])
def test_exported_squeeze_excite_blocks_read_their_gate_in_the_projection(name):
    """torchvision's exports as their exporter writes them (the committed reduced-width fixtures):
    each squeeze-excite block's Mul is gone into the conv reading it, one per block
    (tests/gpu/test_exported_models.py runs them against onnxruntime)."""
    info = {m.name: m for m in models()}[name]
    model = onnx.load(str(info.path))
    producer = {o: n for n in model.graph.node for o in n.output}

    def gate_mul(t: str) -> bool:  # Mul(x, gate(y)) with y not x (SiLU is x * Sigmoid(x))
        mul = producer.get(t)
        if mul is None or mul.op_type != "Mul":
            return False
        acts = [(i, producer.get(i)) for i in mul.input]
        return any(a is not None and a.op_type in ("Sigmoid", "HardSigmoid") and a.input[0] not in mul.input
                   for _, a in acts)

    gated = {n.name for n in model.graph.node if n.op_type == "Conv" and gate_mul(n.input[0])}
    blocks = sum(n.op_type == "GlobalAveragePool" for n in model.graph.node) - 1  # less the head's pool
    assert len(gated) == blocks > 0, (gated, blocks)
    pipeline, compiled = compile_with_default_passes(model, info.sizes[0])
    assert set(pipeline.context.reports["channel-scale"].fused) == gated
    muls = {producer[n.input[0]].name for n in model.graph.node if n.name in gated}
    assert not muls & {op.name for op in compiled.operations if op.steps}
