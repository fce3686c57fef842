"""The convolutions with a fused epilogue (passes/epilogue_fusion.py builds them).

onyxia::ConvEpilogue / ConvTransposeEpilogue: Conv / ConvTranspose (inputs 0-2, the bias
possibly absent) whose kernels end with the elementwise ops that read the output (Relu,
HardSwish, SiLU, a residual Add, ...): attributes `epilogue_exprs` / `epilogue_inputs` as for
the matrix products (operators/matmul/epilogue.py), the operands from input 3. Every kernel
plan_conv chooses runs them where it stores the output (conv_direct, conv_gemm, the split-K
finish, the pointwise path's product kernels). The operands broadcast to the output in any way
and are read through strides: a convolution's kernels have no column coordinate to index by.
"""

from __future__ import annotations

from onyxia.operators.base import Operator
from onyxia.operators.conv.conv import Conv, ConvTranspose
from onyxia.operators.matmul.matmul import FusedProduct


class ConvEpilogue(FusedProduct, Conv):
    """onyxia::ConvEpilogue: Conv (inputs 0-2), epilogue operands from input 3."""

    op_type = "ConvEpilogue"
    column = False


class ConvTransposeEpilogue(FusedProduct, ConvTranspose):
    """onyxia::ConvTransposeEpilogue: ConvTranspose (inputs 0-2), epilogue operands from input 3."""

    op_type = "ConvTransposeEpilogue"
    column = False


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(ConvEpilogue(), 1), (ConvTransposeEpilogue(), 1)]
