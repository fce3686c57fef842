"""A convolution over an input whose channels a per-image gate scales (squeeze-excite).

MobileNetV3, EfficientNet and RegNetY end each squeeze-excite block with Mul(x, gate), gate
[N, C, 1, 1] broadcast over x [N, C, *spatial], and the block's 1x1 projection reads the product:
a full pass over the activation (read, multiply, write) between two convolutions.
compiler/passes/channel_scale.py gives the gate to the convolution instead: a Conv or
onyxia::ConvEpilogue whose attribute CHANNEL_SCALE_ATTR names the input holding it computes
conv(x * gate). The kernels a CPU-type adapter prefers read it where they load x: the
register-tiled conv (conv_register.wgsl X_SCALE: one scale an input channel, multiplied into
the loaded row) and the chunked product of a pointwise conv (gemv_chunked.wgsl A_SCALE: one a k);
every other alternative runs the multiply as a dispatch of its own first (`plan_scaled_input`),
as the graph did.
"""

from __future__ import annotations

from dataclasses import dataclass

from onyxia.ir.shapes import Dim, numel, shape_str
from onyxia.operators.base import InferenceCtx, PlanCtx
from onyxia.operators.elementwise.map_kernel import Operand, map_dispatch
from onyxia.plan import Step

# Conv / ConvEpilogue attribute: the index of the input holding the gate ([N or 1, C, 1, ...]).
CHANNEL_SCALE_ATTR = "onyxia_channel_scale"


@dataclass(frozen=True)
class ChannelScale:
    """The gate's tensor and its stride between images (C; 0 where one gate serves all)."""

    tensor: str
    batch_stride: Dim


def channel_scale(ctx: InferenceCtx, x: tuple[Dim, ...], channels: int) -> ChannelScale | None:
    """The node's gate, checked against its input x [N, C, *spatial]; None without one."""
    index = int(ctx.attr(CHANNEL_SCALE_ATTR, 0))
    if not index:
        return None
    if index < 3 or not ctx.has_input(index):
        raise ctx.fail(f"attribute '{CHANNEL_SCALE_ATTR}' {index} names no input past the bias")
    shape = ctx.input_shape(index)
    batch_one = isinstance(shape[0], int) and shape[0] == 1 if shape else False
    if (len(shape) != len(x) or not (batch_one or ctx.same_dim(shape[0], x[0]))
            or not ctx.same_dim(shape[1], channels) or not all(isinstance(d, int) and d == 1 for d in shape[2:])):
        images = "1" if isinstance(x[0], int) and x[0] == 1 else f"{x[0]} or 1"
        raise ctx.fail(f"the channel scale must have shape [{images}, {channels}{', 1' * (len(x) - 2)}], "
                       f"got {shape_str(shape)}", index)
    if not ctx.input_dtype(index).is_float:
        raise ctx.fail(f"the channel scale must be a float tensor, got {ctx.input_dtype(index)}", index)
    return ChannelScale(ctx.input_tensor(index).name, 0 if batch_one else channels)


def plan_scaled_input(ctx: PlanCtx) -> tuple[list[Step], str]:
    """x * gate into a scratch of x's shape: the steps and the scratch (for the kernels that do
    not read the gate themselves)."""
    x, shape = ctx.input(0), ctx.input_shape(0)
    index = int(ctx.attr(CHANNEL_SCALE_ATTR))
    scaled = ctx.scratch(numel(shape), ctx.tensor_dtype(x).name, "scaled")
    operands = [Operand(x, shape, "f32"), Operand(ctx.input(index), ctx.input_shape(index), "f32")]
    return map_dispatch(ctx, "x0 * x1", operands, output=scaled, shape=shape, label="conv_channel_scale"), scaled


__all__ = ["CHANNEL_SCALE_ATTR", "ChannelScale", "channel_scale", "plan_scaled_input"]
