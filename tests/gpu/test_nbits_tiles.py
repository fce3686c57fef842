"""NBitsTilesPass: 4-bit MatMulNBits weights and scales stored in the chunked kernel's tiles,
read by every kernel of the node on both adapter kinds, against onnxruntime; the weights it
leaves row-major and why."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.operators import core_operator_registry
from onyxia.operators.quantized.quantized import TILES_ATTR, tile_nbits
from tests.helpers import make_model, run_ort

MS = {"com.microsoft": 1}


def nbits_model(k: int, n: int, *, accuracy: int = 4, gather: bool = False, seed: int = 0):
    """y = a @ B^T with 4-bit B [N, K / 32, 16]; `gather`: a GatherBlockQuantized also reads B
    (a tied embedding), so it must stay row-major."""
    rng = np.random.default_rng(seed)
    nblk = k // 32
    inits = {"w": rng.integers(0, 256, (n, nblk, 16), dtype=np.uint8),
             "s": (rng.random(n * nblk) * 0.1 + 0.01).astype(np.float32)}
    nodes = [h.make_node("MatMulNBits", ["a", "w", "s"], ["y"], domain="com.microsoft", K=k, N=n, bits=4,
                         block_size=32, accuracy_level=accuracy)]
    inputs, outputs = [("a", np.float32, ["M", k])], ["y"]
    if gather:
        inits["s2"] = inits["s"].reshape(n, nblk, 1)
        nodes.append(h.make_node("GatherBlockQuantized", ["w", "ids", "s2"], ["e"], domain="com.microsoft",
                                 block_size=32, gather_axis=0, quantize_axis=2))
        inputs.append(("ids", np.int64, [3]))
        outputs.append("e")
    return make_model(nodes, inputs, outputs, inits, extra_opsets=MS)


def compile_with_report(model, dims):
    pipeline = CompilerPipeline(core_operator_registry())
    compiled = pipeline.compile(onyxia.load_model(model), dims)
    return compiled, pipeline.context.reports["nbits-tiles"]


def test_tiles_place_each_unit_where_the_kernels_read_it():
    """Unit (column n, block pair p) at ((n / 64 * P + p) * 8 + n % 8) * 8 + (n % 64) / 8, P
    block pairs a column (shaders/quantized/nbits_index.wgsl's nbits_unit)."""
    n, nblk = 128, 6
    b = np.random.default_rng(1).integers(0, 256, (n, nblk, 16), dtype=np.uint8)
    s = np.random.default_rng(2).random(n * nblk).astype(np.float32)
    bt, st = tile_nbits(b, s, n, nblk)
    assert bt.shape == b.shape and bt.dtype == b.dtype and st.shape == s.shape and st.dtype == s.dtype
    units_b, units_s = bt.reshape(-1, 32), st.reshape(-1, 2)
    pairs = nblk // 2
    for col in range(n):
        for p in range(pairs):
            unit = ((col // 64 * pairs + p) * 8 + col % 8) * 8 + (col % 64) // 8
            np.testing.assert_array_equal(units_b[unit], b[col, 2 * p:2 * p + 2].reshape(-1))
            np.testing.assert_array_equal(units_s[unit], s[col * nblk + 2 * p:col * nblk + 2 * p + 2])


@pytest.mark.parametrize("accuracy", [4, 0])
def test_every_kernel_reads_the_tiles(runtime, accuracy):
    """The chunked kernel (assume_adapter("cpu")) and the coalesced ones ("gpu") for decode and a prompt,
    from tiles: onnxruntime's result from the row-major weight. The plan keeps one copy."""
    model = nbits_model(256, 192, accuracy=accuracy)
    compiled, report = compile_with_report(model, {"M": 70})
    assert list(report.tiled) == ["w"] and not report.skipped, report
    assert "w" not in compiled.tensors and "s" not in compiled.tensors  # stored once, in tiles
    assert all(dict(s.defs).get("TILED") for s in compiled.shaders if "matmul_nbits" in s.label)
    exe = runtime.load_model(compiled)
    rng = np.random.default_rng(5)
    for cpu in (1, 0):
        for m in (1, 5, 70):
            exe.update_dimensions({"M": m})
            exe.assume_adapter("cpu" if cpu else "gpu")
            a = rng.standard_normal((m, 256)).astype(np.float32)
            ref = run_ort(model, {"a": a})[0]
            np.testing.assert_allclose(exe.run({"a": a})["y"], ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()),
                                       err_msg=f"cpu={cpu} M={m}")


def test_weights_left_row_major_say_why():
    cases = {"N = 96": nbits_model(128, 96), "odd block count": nbits_model(96, 64),
             "GatherBlockQuantized": nbits_model(128, 64, gather=True)}
    for why, model in cases.items():
        compiled, report = compile_with_report(model, {"M": 1})
        assert not report.tiled and "w" in report.skipped, (why, report)
        assert not any(dict(s.defs).get("TILED") for s in compiled.shaders), why
    assert "N = 96" in compile_with_report(cases["N = 96"], {"M": 1})[1].skipped["w"]
    assert "GatherBlockQuantized" in compile_with_report(cases["GatherBlockQuantized"], {"M": 1})[1].skipped["w"]


def test_the_attribute_without_tiles_is_refused():
    """A node claiming tiles its geometry cannot have (a hand-made plan input) is an error
    naming it, not a wrong product."""
    model = nbits_model(128, 96)
    model.graph.node[0].attribute.append(h.make_attribute(TILES_ATTR, 1))
    with pytest.raises(onyxia.OnyxiaError, match=TILES_ATTR):
        compile_with_report(model, {"M": 1})


@pytest.mark.parametrize("accuracy", [4, 0])
def test_weights_from_onnxruntimes_quantizer_read_from_tiles(runtime, accuracy):
    """A float two-layer product quantized by onnxruntime's own MatMulNBitsQuantizer (block 32,
    asymmetric: packed zero points): its MatMulNBits weights go to tiles, and both adapter
    kinds' kernels give onnxruntime's result on the quantized model."""
    import logging

    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    rng = np.random.default_rng(11)
    w1 = (rng.standard_normal((256, 192)) / 16).astype(np.float32)
    w2 = (rng.standard_normal((192, 128)) / 14).astype(np.float32)
    model = make_model([h.make_node("MatMul", ["a", "w1"], ["h"]), h.make_node("Relu", ["h"], ["r"]),
                        h.make_node("MatMul", ["r", "w2"], ["y"])], [("a", np.float32, ["M", 256])], ["y"],
                       {"w1": w1, "w2": w2})
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    quantizer = MatMulNBitsQuantizer(model, algo_config=DefaultWeightOnlyQuantConfig(
        block_size=32, is_symmetric=False, accuracy_level=accuracy))
    quantizer.process()
    quantized = quantizer.model.model
    assert [n.op_type for n in quantized.graph.node] == ["MatMulNBits", "Relu", "MatMulNBits"]
    compiled, report = compile_with_report(quantized, {"M": 5})
    assert len(report.tiled) == 2 and not report.skipped, report
    exe = runtime.load_model(compiled)
    for cpu in (1, 0):
        for m in (1, 5):
            exe.update_dimensions({"M": m})
            exe.assume_adapter("cpu" if cpu else "gpu")
            a = rng.standard_normal((m, 256)).astype(np.float32)
            ref = run_ort(quantized, {"a": a})[0]
            np.testing.assert_allclose(exe.run({"a": a})["y"], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()),
                                       err_msg=f"cpu={cpu} M={m}")
