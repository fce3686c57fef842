"""MatMulNBits weight packing as the plan shows it (no GPU; kernels in tests/gpu/test_quantized.py)."""

from __future__ import annotations

import numpy as np

from tests.builders.quantized import compile_with, nbits_model


def test_packed_weights_take_their_bytes_on_device():
    """uint8 weights are stored 4 bytes to a word: the device holds the packed bytes, no more."""
    model = nbits_model(np.random.default_rng(0), k=64, n=16, block=32, zero_points="uint8", bias=False)
    compiled = compile_with(model, {"M": 1})
    packed = [t for t in compiled.tensors.values() if t.data is not None and t.dtype == "uint8"]
    assert sum(int(t.nbytes) for t in packed) == 16 * 64 // 2 + 16 * 1  # B bytes + zero-point bytes
