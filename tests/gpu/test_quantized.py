"""com.microsoft MatMulNBits and GatherBlockQuantized (4-bit) against onnxruntime.

The packed uint8 weights are stored as they are (4 bytes to a word) and read a word at a time.
MatMulNBits runs M = 1 (gemv kernel) and M > GEMV_MAX_ROWS (tiled kernel) in one executor
through update_dimensions, without recompiling.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.builders.quantized import MS, compile_with, nbits_model, pack_nibbles
from tests.helpers import make_model, run_ort


@pytest.mark.parametrize("block,k,n,zero_points,bias", [
    (16, 40, 5, None, False),  # K not a multiple of the block (nor of 8)
    (32, 64, 70, "uint8", True),
    (64, 192, 33, "float", False),
    (128, 256, 20, "uint8", False),  # odd block count: padded zero-point rows
    (32, 256, 40, "uint8", True),  # blocks a multiple of 4: the chunked kernel's vec4 scale loads
    (32, 128, 36, "float", False),
    # B and scales in tiles (NBitsTilesPass: block 32, even block count, N a multiple of 64)
    (32, 128, 128, "uint8", True),
    (32, 256, 192, "float", False),
    (32, 64, 64, None, False),
])
def test_matmul_nbits(runtime, block, k, n, zero_points, bias):
    rng = np.random.default_rng(block + k)
    model = nbits_model(rng, k=k, n=n, block=block, zero_points=zero_points, bias=bias)
    exe = runtime.load_model(compile_with(model, {"M": 1}))
    tiled = block == 32 and (k // block) % 2 == 0 and n % 64 == 0
    assert {bool(dict(s.defs).get("TILED")) for s in exe.model.shaders if "nbits" in s.label} == {tiled}
    # Both adapter kinds' kernels (the chunked one where it applies: block >= 32, whole blocks)
    for cpu in (0, 1) if exe.model.adapter_dependent else (None,):
        if cpu is not None:
            exe.assume_adapter("cpu" if cpu else "gpu")
        for m in (1, 3, 70):  # gemv (m <= 4) / chunked (m <= 16) and tiled kernels, one plan
            exe.update_dimensions({"M": m})
            a = rng.standard_normal((m, k), dtype=np.float32)
            np.testing.assert_allclose(exe.run({"A": a})["Y"], run_ort(model, {"A": a})[0], rtol=1e-4, atol=1e-4,
                                       err_msg=f"M={m} cpu={cpu}")
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("k,n", [(64, 24), (128, 24), (128, 64)])  # 2 / 4 blocks; N 64: in tiles
def test_matmul_nbits_float16_batched(runtime, k, n):
    rng = np.random.default_rng(4)
    model = nbits_model(rng, k=k, n=n, block=32, zero_points="uint8", bias=True, dtype=np.float16,
                        batch_dims=(2, "S"))
    exe = runtime.load_model(compile_with(model, {"S": 3}))
    for s in (3, 1):
        exe.update_dimensions({"S": s})
        a = rng.standard_normal((2, s, k)).astype(np.float16)
        ours, ref = exe.run({"A": a})["Y"], run_ort(model, {"A": a})[0]
        assert ours.dtype == np.float16 and ours.shape == ref.shape
        np.testing.assert_allclose(ours.astype(np.float32), ref.astype(np.float32), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("shape,block,zero_points", [((7, 20), 16, False), ((9, 64), 32, True),
                                                     ((3, 4, 16), 16, True)])
def test_gather_block_quantized(runtime, shape, block, zero_points):
    rng = np.random.default_rng(sum(shape))
    nblk = -(-shape[-1] * 2 // block)
    inits = {"data": rng.integers(0, 256, shape, dtype=np.uint8),
             "scales": rng.random(shape[:-1] + (nblk,)).astype(np.float32)}
    names = ["data", "idx", "scales"]
    if zero_points:
        inits["zp"] = pack_nibbles(rng.integers(0, 16, shape[:-1] + (nblk,), dtype=np.uint8))
        names.append("zp")
    node = helper.make_node("GatherBlockQuantized", names, ["y"], domain="com.microsoft", block_size=block,
                            quantize_axis=len(shape) - 1, bits=4)
    model = make_model([node], [("idx", np.int64, [2, "n"])], ["y"], inits, extra_opsets=MS)
    exe = runtime.load_model(compile_with(model, {"n": 3}))
    rows = shape[0]
    # negative indices wrap; out-of-range ones give zeros (onnxruntime's contract)
    idx = np.array([[0, rows - 1, 2], [-1, 1, rows + 3]], np.int64)
    np.testing.assert_allclose(exe.run({"idx": idx})["y"], run_ort(model, {"idx": idx})[0], rtol=1e-6, atol=1e-6)
    exe.update_dimensions({"n": 1})
    idx = np.array([[1], [rows - 2]], np.int64)
    np.testing.assert_allclose(exe.run({"idx": idx})["y"], run_ort(model, {"idx": idx})[0], rtol=1e-6, atol=1e-6)
