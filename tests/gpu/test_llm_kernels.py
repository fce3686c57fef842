"""Kernel features today's LLM exporters rely on, one operator at a time, against onnxruntime.

- MatMulNBits `accuracy_level = 4` (onnxruntime-genai's int4 models): onnxruntime quantizes the
  activation per block of block_size to int8 (scale = max|a| / 127, round to nearest even) before
  the integer product; both the dot4I8Packed and the plain-arithmetic kernel must equal it.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.operators import core_operator_registry
from onyxia.operators.quantized import MatMulNBits
from tests.helpers import compile_model, make_model, run_ort

pytestmark = pytest.mark.gpu
MS = {"com.microsoft": 1}
QH, KVH, HEAD = 4, 2, 16


def int4_matmul(k: int, n: int, block: int, accuracy: int, zero_points: bool, seed: int = 0) -> object:
    rng = np.random.default_rng(seed)
    blocks = (k + block - 1) // block
    packed = rng.integers(0, 256, (n, blocks, block // 2), dtype=np.uint8)
    scales = (rng.random(n * blocks).astype(np.float32) * 0.1 + 0.01)
    inputs = ["a", "w", "s"] + (["z"] if zero_points else [])
    inits = {"w": packed, "s": scales}
    if zero_points:
        inits["z"] = rng.integers(0, 256, (n * ((blocks + 1) // 2),), dtype=np.uint8)
    node = helper.make_node("MatMulNBits", inputs, ["y"], domain="com.microsoft", K=k, N=n, bits=4,
                            block_size=block, accuracy_level=accuracy)
    return make_model([node], [("a", np.float32, ["M", k])], ["y"], inits, extra_opsets=MS)


@pytest.mark.parametrize("k,n,block,zp", [(64, 48, 32, True), (128, 40, 16, False), (96, 33, 32, True),
                                          (256, 64, 128, False), (80, 24, 32, True)])
@pytest.mark.parametrize("m", [1, 7])
@pytest.mark.parametrize("packed_dot", [True, False], ids=["dot4I8Packed", "plain"])
def test_matmulnbits_accuracy_level_4_quantizes_the_activation(runtime, k, n, block, zp, m, packed_dot):
    model = int4_matmul(k, n, block, accuracy=4, zero_points=zp)
    a = np.random.default_rng(m).standard_normal((m, k)).astype(np.float32)
    a[0, :block] = 0.0  # an all-zero block: scale 0, quantized to zeros
    ref = run_ort(model, {"a": a})[0]
    registry = core_operator_registry().copy().register(MatMulNBits(packed_dot=packed_dot))
    compiled = CompilerPipeline(registry).compile(onyxia.load_model(model), {"M": m})
    assert {s.label for s in compiled.shaders} == {"quantize_q8", "matmul_nbits_q8"}
    exe = runtime.load_model(compiled)
    ours = exe.run({"a": a})["y"]
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))
    # ... and it differs measurably from the f32-activation product (accuracy_level 0)
    exact = run_ort(int4_matmul(k, n, block, accuracy=0, zero_points=zp), {"a": a})[0]
    assert float(np.abs(exact - ref).max()) > 1e-4 * float(np.abs(ref).max())


def test_matmulnbits_accuracy_level_4_float16(runtime):
    """float16 activations (WebGPU-target int4 folders): quantized from their float16 values."""
    model = int4_matmul(64, 40, 32, accuracy=4, zero_points=False)
    model.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    model.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    scales = next(t for t in model.graph.initializer if t.name == "s")
    scales.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(scales).astype(np.float16), "s"))
    a = np.random.default_rng(3).standard_normal((5, 64)).astype(np.float16)
    ref = run_ort(model, {"a": a})[0].astype(np.float32)
    ours = runtime.load_model(compile_model(model, {"M": 5})).run({"a": a})["y"].astype(np.float32)
    np.testing.assert_allclose(ours, ref, rtol=2e-3, atol=2e-3 * float(np.abs(ref).max()))
