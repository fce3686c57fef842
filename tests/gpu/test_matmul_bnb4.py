"""com.microsoft MatMulBnb4 (transformers.js' "bnb4" files) against onnxruntime, with models that
onnxruntime's own MatMulBnb4Quantizer writes. B stays packed on the device (two 4-bit codes a
byte, one absmax a block) and the kernel dequantizes it through the FP4 / NF4 table; where K or
the block is not a multiple of 8 the op runs as its decomposition (weights folded to float)."""

from __future__ import annotations

import numpy as np
import pytest

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.compiler.passes import ElementwiseFusionPass
from onyxia.operators import core_operator_registry
from onyxia.plan import walk_steps
from tests.builders.quantized import bnb4_model, compile_with
from tests.helpers import run_ort

pytestmark = pytest.mark.gpu


def labels(compiled) -> set[str]:
    return {compiled.shaders[s.shader].label for op in compiled.operations for s in walk_steps(op.steps)
            if hasattr(s, "shader")}


@pytest.mark.parametrize("k,n,block,quant_type,dtype,kernel", [
    (64, 48, 64, 1, np.float32, True),   # NF4, transformers.js' default
    (64, 48, 64, 0, np.float32, True),   # FP4
    (40, 7, 16, 1, np.float32, True),    # N odd, K not a multiple of the block: a partial block per column
    (96, 32, 64, 1, np.float16, True),   # the weight rounded to float16 as onnxruntime does
    (36, 7, 16, 1, np.float32, False),   # K not a multiple of 8: the decomposition
])
def test_matmul_bnb4(runtime, k, n, block, quant_type, dtype, kernel):
    rng = np.random.default_rng(k + n + quant_type)
    model = bnb4_model(rng, k, n, block, quant_type, dtype)
    compiled = compile_with(model, {"S": 5})
    assert ("matmul_bnb4" in labels(compiled)) == kernel
    exe = runtime.load_model(compiled)
    for s in (5, 1):
        exe.update_dimensions({"S": s})
        a = rng.standard_normal((s, k)).astype(dtype)
        ref = run_ort(model, {"A": a})[0]
        for kind in ("cpu", "gpu"):  # both adapter kinds' kernels, whatever this adapter is
            exe.assume_adapter(kind)
            ours = exe.run({"A": a})["Y"]
            assert ours.dtype == ref.dtype and ours.shape == ref.shape
            tol = 2e-3 if dtype == np.float16 else 1e-5  # float16: the products' sums round differently
            scale = float(np.abs(ref.astype(np.float32)).max())
            np.testing.assert_allclose(ours.astype(np.float32), ref.astype(np.float32), rtol=tol, atol=tol * scale,
                                       err_msg=f"S {s}, {kind} kernels")


def test_elementwise_tail_runs_in_the_epilogue(runtime):
    """SiLU and a residual Add after the product run in the packed kernel (onyxia::MatMulBnb4)."""
    from onyxia.compiler.passes import EpilogueFusionPass

    rng = np.random.default_rng(7)
    model = bnb4_model(rng, 64, 24, 64, 1, tail=True)
    pipeline = CompilerPipeline(core_operator_registry(), optimize=False)
    pipeline.add_pass(ElementwiseFusionPass()).add_pass(EpilogueFusionPass())
    compiled = pipeline.compile(onyxia.load_model(model), {"S": 3})
    assert [op.op_type for op in compiled.operations] == ["MatMulBnb4"], [op.op_type for op in compiled.operations]
    exe = runtime.load_model(compiled)
    feeds = {"A": rng.standard_normal((3, 64)).astype(np.float32), "R": rng.standard_normal((3, 24)).astype(np.float32)}
    ref = run_ort(model, feeds)[0]
    for kind in ("cpu", "gpu"):
        exe.assume_adapter(kind)
        np.testing.assert_allclose(exe.run(feeds)["Y"], ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


def test_weights_stay_packed_on_the_device():
    """The plan holds B and absmax as the file has them (K N / 2 bytes + a float a block), not a
    [K, N] float weight (8x the bytes)."""
    k, n, block = 128, 64, 64
    model = bnb4_model(np.random.default_rng(0), k, n, block, 1)
    compiled = compile_with(model, {"S": 1})
    weights = {name: t for name, t in compiled.tensors.items() if t.kind == "weight"}
    sizes = sorted((t.dtype, int(np.prod(t.shape))) for t in weights.values())
    assert sizes == [("float32", k * n // block), ("uint8", k * n // 2)], sizes


def test_long_k_stays_within_lavapipes_loop_cap(runtime):
    """K = 131072: a CPU-type thread walks 16384 words of its column, 8 codes each."""
    k, n = 131072, 4
    rng = np.random.default_rng(5)
    model = bnb4_model(rng, k, n, 64, 1)
    exe = runtime.load_model(compile_with(model, {"S": 2}))
    a = rng.standard_normal((2, k)).astype(np.float32)
    ref = run_ort(model, {"A": a})[0]
    for kind in ("cpu", "gpu"):
        exe.assume_adapter(kind)
        np.testing.assert_allclose(exe.run({"A": a})["Y"], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_matmul_bnb4_bad_sizes_name_the_node(runtime):
    rng = np.random.default_rng(0)
    model = bnb4_model(rng, 64, 48, 64, 1)
    node = model.graph.node[0]
    node.attribute[[a.name for a in node.attribute].index("N")].i = 40  # absmax / B sized for N = 48
    with pytest.raises(onyxia.OnyxiaError, match=r"(?s)proj.*must hold 1280 elements for N = 40"):
        onyxia.InferenceSession(model, runtime=runtime).run(None, {"A": np.zeros((1, 64), np.float32)})
