"""AttentionFusionPass: the attention torch's exporters spell out becomes one FusedAttention node
that reads Q, K, V through their head views (correctness: tests/gpu/test_attention_fusion.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.operators import core_operator_registry
from onyxia.operators.attention.fused import FLASH_MAX_KEYS
from tests.builders.encoder_attention import MASKS, SPELLINGS, attention_block

ENCODERS = Path(__file__).resolve().parent.parent / "data" / "exported" / "encoders"


def compile_ops(model, dims=None):
    pipeline = CompilerPipeline(core_operator_registry())
    graph = pipeline.run_passes(onyxia.load_model(model), dims or {"batch": 2, "seq": 5})
    return graph, pipeline.context.reports["attention-fusion"]


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_each_spelling_becomes_one_node(spelling, mask):
    graph, report = compile_ops(attention_block(spelling, mask, heads=2, head=8))
    ops = sorted(n.op_type for n in graph.nodes)
    assert "Softmax" not in ops and "Transpose" not in ops, ops
    assert ops.count("FusedAttention") == 1 and ops.count("MatMul") == 3, ops  # the projections stay
    node = next(n for n in graph.nodes if n.op_type == "FusedAttention")
    assert node.attributes["scale"] == pytest.approx(1 / math.sqrt(8), rel=1e-6)
    # Q, K, V read from the [B, S, H * D] projections, the output written as [B, S, H * D]
    assert node.attributes["q_view"] == node.attributes["v_view"] == [8, 0, 2, 1, 3]
    assert node.attributes["k_view"] == [8, 0, 2, 1, 3]
    assert node.attributes["y_view"] == [8, 0, 2, 1, 3]
    assert len(node.inputs) == (4 if mask else 3)
    assert report.skipped == {}


def test_the_output_without_its_transpose_is_written_as_bhsd():
    graph, _ = compile_ops(attention_block("eager", None, output_transpose=False))
    node = next(n for n in graph.nodes if n.op_type == "FusedAttention")
    assert node.attributes["y_view"] == [0, 0, 1, 2, 3]


def _edit(model, op_type, **attrs):
    for node in model.graph.node:
        if node.op_type == op_type:
            for k, v in attrs.items():
                node.attribute.remove(next(a for a in node.attribute if a.name == k))
                node.attribute.append(helper.make_attribute(k, v))
    return model


@pytest.mark.parametrize("change,reason", [
    ("axis", "Softmax is not over the last axis"),
    ("probs_output", "the probabilities are a graph output"),
    ("scale_tensor", "Div between the scores MatMul and Softmax"),
])
def test_what_is_not_attention_stays_with_its_reason(change, reason):
    model = attention_block("eager", None)
    if change == "axis":
        _edit(model, "Softmax", axis=2)
    elif change == "probs_output":
        model.graph.output.append(helper.make_tensor_value_info("probs", 1, None))
    else:  # a scale that is no constant
        model.graph.input.append(helper.make_tensor_value_info("d", 1, []))
        next(n for n in model.graph.node if n.op_type == "Div").input[1] = "d"
    graph, report = compile_ops(model)
    assert "FusedAttention" not in {n.op_type for n in graph.nodes}
    assert list(report.skipped.values()) == [reason]


def test_a_mask_broadcast_over_the_keys_stays():
    model = attention_block("eager", "full")
    model.graph.input[1].type.tensor_type.shape.dim[3].dim_value = 1
    _, report = compile_ops(model)
    assert list(report.skipped.values()) == ["the mask broadcasts over the keys"]


@pytest.mark.parametrize("path", sorted(ENCODERS.glob("*.onnx")), ids=lambda p: p.name)
def test_every_exported_encoder_attention_is_fused(path):
    """Each exporter's spelling in the committed fixtures (tools/export_encoders.py): every
    layer's attention fused, no Softmax left."""
    dims = {"batch": 2, "sequence": 7} if path.name.startswith("bert") else {"batch": 2}
    graph, report = compile_ops(str(path), dims)
    assert len(report.fused) == 2 and report.skipped == {}
    assert "Softmax" not in {n.op_type for n in graph.nodes}
    assert np.all([n.domain == "onyxia" for n in graph.nodes if n.op_type == "FusedAttention"])


def test_a_long_static_key_axis_stays_spelled_out():
    """Over max_static_keys literal keys (what the flash kernel walks) the matmul kernels win on
    lavapipe (the pass's note); Whisper's 1500 are fused."""
    model = attention_block("eager", None)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 1500
    _, report = compile_ops(model, {"batch": 1})
    assert report.fused and not report.skipped
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = FLASH_MAX_KEYS + 4
    _, report = compile_ops(model, {"batch": 1})
    assert list(report.skipped.values()) == [f"{FLASH_MAX_KEYS + 4} keys, over max_static_keys ({FLASH_MAX_KEYS})"]
