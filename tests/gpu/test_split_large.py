"""SplitLargeTensorsPass on the device: split models agree with onnxruntime on the ORIGINAL model.

A tiny limit (4 KiB or 1 KiB) forces the rewrites on small models; symbolic dims change through
update_dimensions without recompiling.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.builders.quantized import MS, nbits_model, pack_nibbles
from tests.builders.split_large import (
    compiled,
    decoder_model,
    gemm_model,
    genai_tied_model,
    split_pipeline,
    unfolded_split,
)
from tests.helpers import make_model, run_ort


def boundary_ids(rows: int, piece: int, count: int, rng) -> np.ndarray:
    """`count` indices: the rows on both sides of every piece boundary and the ends (also as negative
    indices) first, random ones after."""
    edges = [i for a in range(piece, rows, piece) for i in (a - 1, a)] + [0, rows - 1, -1, -rows, -piece - 1]
    assert len(edges) <= count
    return np.concatenate([edges, rng.integers(-rows, rows, count - len(edges))])


def check_dims(runtime, model, plan, feeds_for, dims_list, rtol=1e-4, atol=1e-4):
    exe = runtime.load_model(plan)
    for dims in dims_list:
        exe.update_dimensions(dims)
        feeds = feeds_for(dims)
        ours, ref = exe.run(feeds), run_ort(model, feeds)
        for name, expected in zip(plan.outputs, ref):
            assert ours[name].shape == expected.shape, f"{name} at {dims}"
            np.testing.assert_allclose(ours[name], expected, rtol=rtol, atol=atol, err_msg=f"{name} at {dims}")
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("tied", [False, True], ids=["own_head", "tied_transpose"])
def test_decoder_embedding_and_lm_head(runtime, tied):
    rng = np.random.default_rng(10)
    model = decoder_model(rng, tied=tied)
    first = {"B": 1, "S": 3}
    # The tied head goes through the Transpose rewrite (a real one is too big to fold).
    plan = split_pipeline().compile(unfolded_split(model, first)[0], first) if tied else compiled(model, first)
    assert not any(n in plan.tensors for n in ("embed", "head", "embed_t"))

    def feeds(dims):  # 300 rows in pieces of 60
        count = dims["B"] * dims["S"]
        ids = boundary_ids(300, 60, count, rng) if count >= 13 else rng.integers(-300, 300, count)
        return {"ids": ids.reshape(dims["B"], dims["S"]).astype(np.int64)}
    check_dims(runtime, model, plan, feeds, [first, {"B": 2, "S": 8}, {"B": 1, "S": 1}])


def test_genai_tied_table_gathered_from_column_pieces(runtime):
    """Gather(Transpose(W)) + MatMul(x, W): each piece gathers columns of the MatMul's piece."""
    rng = np.random.default_rng(11)
    model = genai_tied_model(rng)
    first = {"B": 1, "S": 3}
    plan = split_pipeline().compile(unfolded_split(model, first)[0], first)

    def feeds(dims):  # 300 columns in pieces of 64
        count = dims["B"] * dims["S"]
        ids = boundary_ids(300, 64, count, rng) if count >= 15 else rng.integers(-300, 300, count)
        return {"ids": ids.reshape(dims["B"], dims["S"]).astype(np.int64)}
    check_dims(runtime, model, plan, feeds, [first, {"B": 2, "S": 9}, {"B": 1, "S": 1}])


@pytest.mark.parametrize("trans_b,c", [(False, "row"), (True, "full"), (True, "scalar"), (False, None)])
def test_gemm(runtime, trans_b, c):
    rng = np.random.default_rng(11)
    model = gemm_model(rng, trans_b=trans_b, c=c)
    check_dims(runtime, model, compiled(model, {}), lambda _: {"A": rng.standard_normal((3, 24), np.float32)}, [{}])


def test_matmul_cut_along_k(runtime):
    rng = np.random.default_rng(12)
    model = make_model([helper.make_node("MatMul", ["A", "W"], ["Y"])], [("A", np.float32, ["M", 3000])], ["Y"],
                       {"W": rng.standard_normal((3000, 3)).astype(np.float32)})
    check_dims(runtime, model, compiled(model, {"M": 2}),
               lambda d: {"A": rng.standard_normal((d["M"], 3000), np.float32)}, [{"M": 2}, {"M": 9}], rtol=1e-3)


@pytest.mark.parametrize("zero_points,bias", [("uint8", True), ("float", False)])
def test_matmul_nbits(runtime, zero_points, bias):
    rng = np.random.default_rng(13)
    model = nbits_model(rng, k=64, n=300, block=32, zero_points=zero_points, bias=bias)
    plan = compiled(model, {"M": 1}, limit=1024)
    assert sum(op.op_type == "MatMulNBits" for op in plan.operations) > 1
    check_dims(runtime, model, plan, lambda d: {"A": rng.standard_normal((d["M"], 64), np.float32)},
               [{"M": 1}, {"M": 3}, {"M": 70}])  # gemv and tiled kernels


def test_gather_block_quantized(runtime):
    rng = np.random.default_rng(14)
    rows = 200
    inits = {"data": rng.integers(0, 256, (rows, 16), dtype=np.uint8),
             "scales": rng.random((rows, 1)).astype(np.float32),
             "zp": pack_nibbles(rng.integers(0, 16, (rows, 1), dtype=np.uint8))}
    node = helper.make_node("GatherBlockQuantized", ["data", "idx", "scales", "zp"], ["y"], domain="com.microsoft",
                            block_size=32, quantize_axis=1, bits=4)
    model = make_model([node], [("idx", np.int64, [2, "n"])], ["y"], inits, extra_opsets=MS)
    plan = compiled(model, {"n": 3}, limit=1024)
    assert sum(op.op_type == "GatherBlockQuantized" for op in plan.operations) == 4
    fixed = {3: np.array([[0, rows - 1, 120], [-1, -150, rows + 3]]),  # out of range: zeros, like onnxruntime
             6: boundary_ids(rows, 50, 12, rng).reshape(2, 6)}
    check_dims(runtime, model, plan, lambda d: {"idx": fixed[d["n"]].astype(np.int64)}, [{"n": 3}, {"n": 6}])


def test_gather_rank3_int32_indices_opset12(runtime):
    """Rows of several trailing dims broadcast the index with a two-axis Unsqueeze (an attribute at 12)."""
    rng = np.random.default_rng(15)
    model = make_model([helper.make_node("Gather", ["W", "idx"], ["y"])], [("idx", np.int32, ["n"])], ["y"],
                       {"W": rng.standard_normal((100, 2, 4)).astype(np.float32)}, opset=12)
    plan = compiled(model, {"n": 12}, limit=1024)
    check_dims(runtime, model, plan, lambda d: {"idx": boundary_ids(100, 25, d["n"], rng).astype(np.int32)},
               [{"n": 12}, {"n": 16}], rtol=0, atol=0)
