"""The many-rows matmul variants (operators/matmul/gemm_variants.py) and the split of a long K, replayed
without a GPU: which kernels each adapter kind runs, and that no invocation walks a long K."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

from onyxia.operators.matmul.gemm_variants import TILED_KCHUNK, k_splits
from onyxia.runtime.null import null_executor
from tests.builders.gemv_heuristic import running
from tests.helpers import compile_model, live_dispatches, make_model

pytestmark = pytest.mark.usefixtures("heuristic")  # the heuristic's choice is under test: no tuning

F = np.float32


def product(m, k, n, *, trans_b=False, dtype=F):
    b_shape = [n, k] if trans_b else [k, n]
    node = h.make_node("Gemm" if trans_b else "MatMul", ["a", "b"], ["y"], **({"transB": 1} if trans_b else {}))
    return make_model([node], [("a", dtype, [m, k]), ("b", dtype, b_shape)], ["y"])


WIDE = ("wide-register-tiles",)


# cpu: 0 a GPU, 1 a CPU-type adapter, 2 one with wide register tiles (lavapipe before Mesa 25)
@pytest.mark.parametrize("cpu,k,trans_b,expected", [
    (2, 1024, False, ["gemv_chunked/32"]),
    (1, 1024, False, ["gemv_chunked/16"]),
    (0, 1024, False, ["gemm"]),
    (2, 70_000, False, ["gemv_chunked/32", "splitk"]),
    (1, 70_000, False, ["gemv_chunked/16", "splitk"]),
    (0, 70_000, False, ["gemm", "splitk"]),
    (1, 70_000, True, ["gemm", "splitk"]),  # a transposed operand: the shared-memory kernel everywhere
    (1, 8192, True, ["gemm"]),
    (1, 8193, True, ["gemm", "splitk"]),
])
def test_variant_per_adapter_kind_and_long_k(cpu, k, trans_b, expected):
    exe = null_executor(compile_model(product(100, k, 32, trans_b=trans_b)))
    if exe.model.adapter_dependent:  # planned only where the register variant applies
        exe.assume_adapter("cpu" if cpu else "gpu", WIDE if cpu == 2 else ())
    assert running(exe) == expected


def test_integer_products_take_the_shared_memory_kernel():
    model = compile_model(product(100, 64, 32, dtype=np.int32))
    assert not model.adapter_dependent
    assert [s.label for s in model.shaders] == ["matmul/gemm"]


@pytest.mark.parametrize("k", [1, 16, 8192, 8193, 70_000, 1_000_003])
def test_k_ranges_cover_k_and_stay_short(k):
    splits, chunk, split = k_splits(k, TILED_KCHUNK, 16)
    assert chunk % 16 == 0 and chunk <= TILED_KCHUNK
    assert (splits - 1) * chunk < k <= splits * chunk
    assert split == (splits > 1)


def test_symbolic_k_is_split_by_an_expression():
    model = make_model([h.make_node("MatMul", ["a", "b"], ["y"])], [("a", F, [100, "k"]), ("b", F, ["k", 20])], ["y"])
    exe = null_executor(compile_model(model, {"k": 10}))
    for k, splits in ((10, 1), (8192, 1), (8193, 2), (70_000, 9)):
        exe.update_dimensions({"k": k})
        gemm = next(d for d in exe.dispatch_commands() if exe.model.shaders[d.shader].label == "matmul/gemm")
        assert gemm.workgroups[2] == splits


@pytest.mark.parametrize("channels,maps,expected,cpu", [
    (64, 16, ["conv/conv_gemm"], ["conv/conv_register"]),
    (8192, 16, ["conv/conv_gemm", "matmul/splitk"], ["conv/conv_register", "matmul/splitk"]),  # K = 8192 * 9: split
    # few maps, but too long for the direct kernel
    (8192, 4, ["conv/conv_gemm", "matmul/splitk"], ["conv/conv_register", "matmul/splitk"]),
    (64, 4, ["conv/conv_direct"], ["conv/conv_register"]),
])
def test_conv_splits_a_long_reduction(channels, maps, expected, cpu):
    w = np.zeros((maps, channels, 3, 3), F)
    model = make_model([h.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], [("x", F, [1, channels, 4, 4])],
                       ["y"], {"w": w})
    compiled = compile_model(model)
    for kind, labels in (("gpu", expected), ("cpu", cpu)):
        assert [compiled.shaders[d.shader].label for d in live_dispatches(compiled, {}, kind)] == labels, kind
