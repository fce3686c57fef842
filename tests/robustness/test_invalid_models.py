"""Issue 12 root cause 5: models onnxruntime refuses are refused at load, naming the element.

And the other side of it: what real exporters write (torch.onnx, onnxruntime-genai's builder with
com.microsoft and onnxruntime's default-domain contrib ops, int4 quantization) keeps loading.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from onyxia.errors import ModelLoadError
from tests.builders.hostile import TensorProto, h, make_model, onyxia_vs_reference
from tests.builders.isolate import expect_error, expect_value

F = np.float32


def _x(shape=(2, 3)):
    return [("x", F, list(shape))]


def build(kind: str) -> onnx.ModelProto:
    w = {"w": np.ones((2, 3), F)}
    if kind == "writes_initializer":
        return make_model([h.make_node("Relu", ["x"], ["w"], name="clobber"),
                           h.make_node("Add", ["x", "w"], ["y"])], _x(), ["y"], w)
    if kind == "duplicate_input":
        m = make_model([h.make_node("Relu", ["x"], ["y"])], _x(), ["y"])
        m.graph.input.append(m.graph.input[0])
        return m
    if kind == "duplicate_initializer":
        m = make_model([h.make_node("Add", ["x", "w"], ["y"])], _x(), ["y"], w)
        m.graph.initializer.append(m.graph.initializer[0])
        return m
    if kind == "writes_graph_input":
        return make_model([h.make_node("Relu", ["x"], ["x"], name="loop")], _x(), ["x"])
    if kind == "opset_too_new":
        return make_model([h.make_node("Relu", ["x"], ["y"])], _x(), ["y"], opset=onnx.defs.onnx_opset_version() + 1)
    if kind == "opset_zero":
        return make_model([h.make_node("Relu", ["x"], ["y"])], _x(), ["y"], opset=0)
    if kind == "ir_too_new":
        m = make_model([h.make_node("Relu", ["x"], ["y"])], _x(), ["y"])
        m.ir_version = onnx.IR_VERSION + 1
        return m
    if kind == "unknown_attribute":
        return make_model([h.make_node("Relu", ["x"], ["y"], name="r", slope=2.0)], _x(), ["y"])
    if kind == "float_perm":
        return make_model([h.make_node("Transpose", ["x"], ["y"], name="t", perm=[1.0, 0.0])], _x(), ["y"])
    if kind == "string_axis":
        return make_model([h.make_node("Softmax", ["x"], ["y"], name="s", axis="1")], _x(), ["y"])
    if kind == "conv_negative_pads":
        return make_model([h.make_node("Conv", ["x", "k"], ["y"], name="conv", pads=[-1, -1, -1, -1])],
                          [("x", F, [1, 1, 5, 5])], ["y"], {"k": np.ones((1, 1, 3, 3), F)})
    if kind == "maxpool_negative_pads":
        return make_model([h.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2],
                                       pads=[0, -1, 0, -1])], [("x", F, [1, 1, 5, 5])], ["y"])
    if kind == "maxpool_zero_stride":
        return make_model([h.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2],
                                       strides=[0, 1])], [("x", F, [1, 1, 5, 5])], ["y"])
    if kind == "negative_initializer_dims":
        m = make_model([h.make_node("Add", ["x", "w"], ["y"])], _x(), ["y"])
        t = m.graph.initializer.add()
        t.name, t.data_type = "w", TensorProto.FLOAT
        t.dims.extend([-2, 3])
        return m
    if kind == "too_few_inputs":
        return make_model([h.make_node("Add", ["x"], ["y"], name="half_add")], _x(), ["y"])
    if kind == "missing_required_attribute":
        return make_model([h.make_node("Cast", ["x"], ["y"], name="cast")], _x(), ["y"])
    if kind == "domain_without_opset":
        return make_model([h.make_node("FastGelu", ["x"], ["y"], name="fg", domain="com.microsoft")], _x(), ["y"])
    if kind == "contrib_float_num_heads":
        q = [(n, F, [1, 2, 8 if n == "q" else 4]) for n in ("q", "k", "v")]
        return make_model([h.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "sl", "tl"], ["o", "pk", "pv"],
                                       name="gqa", domain="com.microsoft", num_heads=2.5, kv_num_heads=1)],
                          q + [("sl", np.int32, [1]), ("tl", np.int32, [])], ["o"], extra_opsets={"com.microsoft": 1})
    if kind == "contrib_string_epsilon":
        return make_model([h.make_node("SkipSimplifiedLayerNormalization", ["x", "x", "g"], ["y"], name="norm",
                                       domain="com.microsoft", epsilon="tiny")], _x(), ["y"],
                          {"g": np.ones(3, F)}, extra_opsets={"com.microsoft": 1})
    if kind == "empty_op_type":
        m = make_model([h.make_node("Relu", ["x"], ["y"], name="nameless")], _x(), ["y"])
        m.graph.node[0].op_type = ""
        return m
    if kind.startswith("subgraph_"):
        return _in_branch(kind)
    if kind == "initializer_data_size":
        m = make_model([h.make_node("Add", ["x", "w"], ["y"])], _x(), ["y"], w)
        m.graph.initializer[0].raw_data = b"\0" * 5
        return m
    raise AssertionError(kind)


def _in_branch(kind: str) -> onnx.ModelProto:
    """An If whose then-branch holds the invalid element: subgraphs are checked like the graph."""
    nodes, inits = [h.make_node("Relu", ["x"], ["t"], name="r")], []
    if kind == "subgraph_unknown_attribute":
        nodes[0].attribute.append(h.make_attribute("slope", 2.0))
    elif kind == "subgraph_negative_pads":
        nodes = [h.make_node("MaxPool", ["x"], ["t"], name="pool", kernel_shape=[1, 1], pads=[0, -1, 0, -1])]
    elif kind == "subgraph_writes_initializer":
        inits = [onnx.numpy_helper.from_array(np.ones((2, 3), F), "w")]
        nodes = [h.make_node("Relu", ["x"], ["w"], name="clobber"), h.make_node("Add", ["x", "w"], ["t"])]
    elif kind == "subgraph_negative_initializer_dims":
        w = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[-2, 3])
        inits, nodes = [w], [h.make_node("Add", ["x", "w"], ["t"], name="add")]
    else:
        raise AssertionError(kind)
    then = h.make_graph(nodes, "then", [], [h.make_tensor_value_info("t", TensorProto.FLOAT, None)], inits)
    orelse = h.make_graph([h.make_node("Neg", ["x"], ["e"])], "else", [],
                          [h.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    return make_model([h.make_node("If", ["c"], ["y"], name="choose", then_branch=then, else_branch=orelse)],
                      [("x", F, [1, 1, 2, 3]), ("c", np.bool_, [])], ["y"])


def load(kind: str) -> None:
    import onyxia

    onyxia.load_model(build(kind))


@pytest.mark.parametrize("kind,match", [
    ("writes_initializer", "node 'clobber'.*writes tensor 'w', which is an initializer"),
    ("duplicate_input", "graph input 'x' is declared twice"),
    ("duplicate_initializer", "initializer 'w' is declared twice"),
    ("writes_graph_input", "'x' is produced twice.*graph input 'x'.*node 'loop'"),
    ("opset_too_new", "domain 'ai.onnx' version .* is newer than the installed onnx"),
    ("opset_zero", "domain 'ai.onnx' has version 0"),
    ("ir_too_new", "ir_version .* is newer than the installed onnx"),
    ("unknown_attribute", "node 'r' \\(Relu\\): Unrecognized attribute: slope"),
    ("float_perm", "node 't' \\(Transpose\\): Mismatched attribute type.*perm"),
    ("string_axis", "node 's' \\(Softmax\\): Mismatched attribute type.*axis"),
    ("conv_negative_pads", "node 'conv' \\(Conv\\): attribute 'pads' must be non-negative"),
    ("maxpool_negative_pads", "node 'pool' \\(MaxPool\\): attribute 'pads' must be non-negative"),
    ("maxpool_zero_stride", "node 'pool' \\(MaxPool\\): attribute 'strides' must be positive"),
    ("negative_initializer_dims", "initializer 'w' has a negative dimension"),
    ("too_few_inputs", "node 'half_add' \\(Add\\):.*input"),
    ("missing_required_attribute", "node 'cast' \\(Cast\\):.*'to'"),
    ("domain_without_opset", "node 'fg' \\(FastGelu\\): No opset import for domain 'com.microsoft'"),
    ("initializer_data_size", "initializer 'w'"),
    ("contrib_float_num_heads", "node 'gqa' \\(GroupQueryAttention\\): attribute 'num_heads' must be INT, got FLOAT"),
    ("contrib_string_epsilon", "node 'norm' .*attribute 'epsilon' must be FLOAT, got STRING"),
    ("empty_op_type", "node 0 \\('nameless'\\) has no op_type"),
    ("subgraph_unknown_attribute", "node 'choose/then_branch/r' \\(Relu\\): Unrecognized attribute: slope"),
    ("subgraph_negative_pads", "node 'choose/then_branch/pool' \\(MaxPool\\): attribute 'pads' must be non-negative"),
    ("subgraph_writes_initializer", "node 'choose/then_branch/clobber'.*writes tensor 'w', which is an initializer"),
    ("subgraph_negative_initializer_dims", "initializer 'w' of subgraph 'choose/then_branch' has a negative dimension"),
])
def test_invalid_model_is_refused_naming_the_element(kind, match):
    expect_error(load, kind, error=ModelLoadError, match=match)


# ---- what real exporters write keeps loading -------------------------------------------------

EXPORTED = Path(__file__).resolve().parents[1] / "data" / "exported"


def load_file(path: str) -> int:
    import onyxia

    return len(onyxia.load_model(path))


@pytest.mark.parametrize("name", sorted(p.name for p in EXPORTED.glob("*.onnx")))
def test_torch_exports_load(name):
    assert expect_value(load_file, str(EXPORTED / name)) > 0


@pytest.mark.parametrize("name", sorted(p.name for p in (EXPORTED.parent / "control").glob("*.onnx")))
def test_torch_control_flow_exports_load(name):
    """If/Loop subgraphs as torch.onnx writes them pass the checks of subgraphs."""
    assert expect_value(load_file, str(EXPORTED.parent / "control" / name)) > 0


def genai_decoder_loads(tmp: str, int4: bool) -> int:
    """onnxruntime-genai's builder layout: com.microsoft GroupQueryAttention, RotaryEmbedding,
    SkipSimplifiedLayerNormalization, MatMulNBits, and SimplifiedLayerNormalization, which
    onnxruntime registers in the default domain, unknown to onnx's checker."""
    import onyxia
    from tests.llm_models import DecoderSpec, build_decoder

    folder = build_decoder(DecoderSpec(num_layers=1, int4=int4, rotary="op"), Path(tmp))
    graph = onyxia.load_model(folder / "model.onnx")
    return sum(1 for n in graph.nodes if n.domain == "com.microsoft")


@pytest.mark.parametrize("int4", [False, True], ids=["fp32", "int4"])
def test_genai_builder_models_with_contrib_ops_load(tmp_path, int4):
    assert expect_value(genai_decoder_loads, str(tmp_path), int4, timeout=120) > 0


def deprecated_version_runs() -> None:
    """GroupNormalization-18 is deprecated in onnx (the checker refuses it); onnxruntime runs it."""
    x = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(F)
    model = make_model([h.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)],
                       [("x", F, [2, 4, 3])], ["y"], {"s": np.ones(2, F), "b": np.zeros(2, F)}, opset=18)
    onyxia_vs_reference(model, {"x": x})


def test_deprecated_op_version_still_runs():
    expect_value(deprecated_version_runs)
