"""SplitLargeTensorsPass without a device: what gets split, piece sizes, names, reasons.

A tiny limit (4 KiB = 1024 elements) exercises the rewrites on small models; numeric checks
against onnxruntime are in tests/gpu/test_split_large.py, which reuses the builders here.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import onyxia
from onyxia.compiler import CompileContext, Stage
from onyxia.compiler.passes.split_large import MAX_BINDING_BYTES, SplitLargeTensorsPass, SplitReport, chunk_ranges
from onyxia.ir.graph import IrGraph
from onyxia.ir.shapes import SymDim
from onyxia.operators import core_operator_registry
from tests.builders.split_large import (
    LIMIT,
    compiled,
    decoder_model,
    gemm_model,
    genai_tied_model,
    split_pipeline,
    unfolded_split,
)
from tests.helpers import make_model

MS = {"com.microsoft": 1}


def optimized(model, dims, limit: int = LIMIT) -> tuple[IrGraph, SplitReport]:
    """The graph after the optimization passes, and the split pass's report."""
    pipeline = split_pipeline(limit)
    graph = pipeline.run_passes(onyxia.load_model(model), dims, until=Stage.OPTIMIZATION)
    return graph, pipeline.context.reports["split-large-tensors"]


def weights(model) -> dict[str, int]:
    """Device bytes of every constant a compiled model uploads."""
    return {n: int(t.nbytes) for n, t in model.tensors.items() if t.data is not None}


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.integers(1, 600), st.sampled_from([1, 4, 64]))
def test_chunk_ranges_cover_in_bounded_aligned_pieces(total, most, align):
    ranges = chunk_ranges(total, most, align)
    assert ranges[0][0] == 0 and ranges[-1][1] == total
    assert all(a < b and b - a <= most for a, b in ranges)
    assert all(prev[1] == nxt[0] for prev, nxt in zip(ranges, ranges[1:]))
    assert len(ranges) <= -(-total // (most // align * align)) if most >= align else len(ranges) == -(-total // most)
    if most >= align:
        assert all(a % align == 0 for a, _ in ranges)


def test_decoder_splits_embedding_and_lm_head_only():
    model = decoder_model(np.random.default_rng(0))
    graph, report = optimized(model, {"B": 1, "S": 4})
    assert report == SplitReport({"embed_tokens": ["embed"], "lm_head": ["head"]}, {})
    ops = [n.op_type for n in graph.nodes]
    # proj is not split (its Relu runs in its epilogue); lm_head [16, 300]: 64-column pieces
    assert ops.count("MatMulEpilogue") == 1 and ops.count("MatMul") == 5
    assert ops.count("Gather") == 5 and ops.count("Concat") == 1  # 300 rows of 16: 5 x 60 rows
    # The outputs keep their symbolic shapes, and so do the new intermediates.
    B, S = SymDim.symbol("B"), SymDim.symbol("S")
    assert graph.tensor("logits").shape == (B, S, 300)
    assert graph.tensor("logits/cols_0_64").shape == (B, S, 64)
    uploaded = weights(compiled(model, {"B": 1, "S": 4}))
    assert max(uploaded.values()) <= LIMIT
    assert "embed" not in uploaded and "head" not in uploaded
    # each lm_head piece stored in column panels (passes/weight_panels.py)
    assert {n for n in uploaded if n.startswith("head/")} == {f"head/cols_{a}_{min(a + 64, 300)}/panels"
                                                              for a in range(0, 300, 64)}
    assert {n for n in uploaded if n.startswith("embed/")} == {f"embed/rows_{a}_{a + 60}" for a in range(0, 300, 60)}


def test_names_are_deterministic():
    model = decoder_model(np.random.default_rng(1), tied=True)
    first, second = compiled(model, {"B": 2, "S": 3}), compiled(model, {"B": 2, "S": 3})
    assert list(first.tensors) == list(second.tensors)
    assert [op.name for op in first.operations] == [op.name for op in second.operations]


def test_nothing_changes_under_the_limit():
    model = decoder_model(np.random.default_rng(2))
    graph, report = optimized(model, {"B": 1, "S": 4}, limit=MAX_BINDING_BYTES)
    assert report == SplitReport({}, {})
    assert sorted(n.name for n in graph.nodes) == ["embed_tokens", "lm_head", "proj"]  # act: proj's epilogue
    ctx = CompileContext(dims={"B": 1, "S": 4}, registry=core_operator_registry())
    result = SplitLargeTensorsPass().run(graph, ctx)
    assert not result.modified


def test_tied_lm_head_drops_the_transpose():
    graph, report = unfolded_split(decoder_model(np.random.default_rng(3), tied=True), {"B": 1, "S": 2})
    assert report.split == {"embed_tokens": ["embed"], "lm_head": ["embed_t"]}
    assert "tie" not in {n.name for n in graph.nodes}  # (each gathered piece has its own small Transpose)
    pieces = [t for t in graph.tensors.values() if t.name.startswith("embed/T/cols_")]
    assert len(pieces) == 5 and all(t.shape[0] == 16 and t.value.size * 4 <= LIMIT for t in pieces)
    np.testing.assert_array_equal(np.concatenate([t.value for t in pieces], axis=1),
                                  graph.tensor("embed").value.T)


@pytest.mark.parametrize("trans_b", [False, True])
def test_gemm_pieces_follow_trans_b(trans_b):
    graph, _ = optimized(gemm_model(np.random.default_rng(4), trans_b=trans_b, c="row"), {})
    gemms = [n for n in graph.nodes if n.op_type == "Gemm"]
    # K = 24: at most 42 columns per piece, so three near-equal ones.
    assert len(gemms) == 3 and all(n.attributes["transB"] == int(trans_b) for n in gemms)
    shapes = [graph.tensor(n.inputs[1]).shape for n in gemms]
    assert shapes == ([(34, 24), (34, 24), (32, 24)] if trans_b else [(24, 34), (24, 34), (24, 32)])
    assert [graph.tensor(n.inputs[2]).shape for n in gemms] == [(34,), (34,), (32,)]


def test_matmul_cuts_k_when_one_column_is_too_big():
    rng = np.random.default_rng(5)
    model = make_model([helper.make_node("MatMul", ["A", "W"], ["Y"], name="mm")], [("A", np.float32, ["M", 3000])],
                       ["Y"], {"W": rng.standard_normal((3000, 3)).astype(np.float32)})
    graph, _ = optimized(model, {"M": 2})
    ops = [n.op_type for n in graph.nodes]
    assert ops.count("Slice") == 3 and ops.count("MatMul") == 9 and ops.count("Sum") == 1  # 1000-row pieces
    assert max(t.value.size * 4 for t in graph.tensors.values() if t.name.startswith("W/")) <= LIMIT


def test_matmul_nbits_pieces_change_n():
    from tests.builders.quantized import nbits_model

    model = nbits_model(np.random.default_rng(6), k=64, n=300, block=32, zero_points="uint8", bias=True)
    graph, _ = optimized(model, {"M": 1}, limit=1024)
    nodes = [n for n in graph.nodes if n.op_type == "MatMulNBits"]
    # Per row: 32 packed bytes of B, 2 scales (8 bytes), 1 zero-point byte, 1 bias (4 bytes).
    assert [n.attributes["N"] for n in nodes] == [30] * 10  # at most 32 rows, near-equal pieces
    assert max(weights(compiled(model, {"M": 1}, limit=1024)).values()) <= 1024


def test_gather_block_quantized_splits_rows():
    rng = np.random.default_rng(7)
    inits = {"data": rng.integers(0, 256, (200, 16), dtype=np.uint8),
             "scales": rng.random((200, 1)).astype(np.float32)}
    node = helper.make_node("GatherBlockQuantized", ["data", "idx", "scales"], ["y"], domain="com.microsoft",
                            block_size=32, quantize_axis=1, bits=4, name="gbq")
    model = make_model([node], [("idx", np.int64, ["n"])], ["y"], inits, extra_opsets=MS)
    graph, report = optimized(model, {"n": 3}, limit=1024)
    assert report.split == {"gbq": ["data"]}
    assert sum(n.op_type == "GatherBlockQuantized" for n in graph.nodes) == 4  # 16 bytes per row: 64 rows


def test_reasons_for_what_stays():
    rng = np.random.default_rng(8)
    big = rng.standard_normal((40, 40)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["W", "i"], ["g"], axis=1, name="gather_cols"),
             helper.make_node("Add", ["x", "W"], ["s"], name="add")]
    model = make_model(nodes, [("i", np.int64, [2]), ("x", np.float32, [40, 40])], ["g", "s"], {"W": big})
    _, report = optimized(model, {})
    assert report.split == {}
    assert report.skipped == {"gather_cols": "the large constant is not the data gathered along axis 0",
                                 "add": "no split rule for Add"}


def test_limit_must_hold_an_element():
    with pytest.raises(ValueError, match="max_binding_bytes"):
        SplitLargeTensorsPass(2)


@pytest.mark.parametrize("layout", ["gather_E_matmul_ET", "genai_gather_WT_matmul_W"])
def test_tied_table_is_stored_once(layout):
    """A table over the limit is never folded (FOLD_MAX_ELEMENTS < 128 MiB of f32), so its Transpose
    is still there when the pass runs: both readers share the MatMul's column pieces."""
    rng = np.random.default_rng(7)
    model = decoder_model(rng, tied=True) if layout == "gather_E_matmul_ET" else genai_tied_model(rng)
    dims = {"B": 1, "S": 2}
    graph, report = unfolded_split(model, dims)
    assert set(report.split) == {"embed_tokens", "lm_head"} and not report.skipped
    uploaded = weights(split_pipeline().compile(graph, dims))
    prefix = "embed/T/cols_" if layout == "gather_E_matmul_ET" else "W/cols_"
    pieces = {n: b for n, b in uploaded.items() if n.startswith(prefix)}
    assert sum(pieces.values()) == 300 * 16 * 4  # the table, once
    assert not [n for n in uploaded if "rows_" in n]  # no second, row-cut copy
    assert max(uploaded.values()) <= LIMIT
