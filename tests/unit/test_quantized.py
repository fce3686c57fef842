"""MatMulNBits weight packing as the plan shows it (no GPU; kernels in tests/gpu/test_quantized.py)."""

from __future__ import annotations

import numpy as np

from tests.gpu.test_quantized import compile_with, nbits_model


def test_packed_weights_are_words_on_device():
    """The pass uploads 4 weight bytes per device word instead of 1."""
    model = nbits_model(np.random.default_rng(0), k=64, n=16, block=32, zero_points="uint8", bias=False)
    plain, packed = compile_with(model, {"M": 1}, False), compile_with(model, {"M": 1}, True)
    assert packed.metadata["weight_bytes"] < plain.metadata["weight_bytes"]
    words = [t for t in packed.tensors.values() if t.data is not None and t.dtype == "uint32"]
    assert sum(t.data.size for t in words) * 4 == 16 * 64 // 2 + 16 * 1  # B bytes + zero-point bytes
