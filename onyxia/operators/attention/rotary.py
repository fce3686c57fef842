"""RotaryEmbedding: RoPE applied to Q or K (shaders/attention/rotary.wgsl), one thread per element.

com.microsoft's RotaryEmbedding has this kernel; semantics follow onnxruntime's contrib operator
docs and CPU kernel (interleaved or half-split rotation, BSNH or BNSH input, position_ids as
[batch, sequence] or one offset). ONNX's RotaryEmbedding (opset 23) runs as its function body
(operators/functions.py). GroupQueryAttention's do_rotary applies the same rotation inside its
KV kernel (gqa.py, whose `rotary_half` checks the cos/sin caches for both).
"""

from __future__ import annotations

from dataclasses import dataclass

from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Shape, numel, shape_str
from onyxia.operators.attention.gqa import DOMAIN, require_float, rotary_half
from onyxia.operators.base import InferenceCtx, Operator, PlanCtx
from onyxia.operators.functions import expanded
from onyxia.plan import Step


@dataclass(frozen=True)
class RotarySpec:
    dtype: DType
    heads: int
    head_size: int
    half: int  # rotary dim / 2
    offset: bool  # position_ids is one offset, not [batch, sequence]
    bnsh: bool  # input is [batch, heads, seq, head_size], else [batch, seq, hidden]


class RotaryEmbedding(Operator):
    """RoPE on [batch, seq, hidden] (BSNH) or [batch, heads, seq, head_size] (BNSH) input."""

    op_type = "RotaryEmbedding"
    domain = DOMAIN

    def spec(self, ctx: InferenceCtx) -> RotarySpec:
        if ctx.attr("is_packed_batching", 0):
            raise ctx.fail("attribute 'is_packed_batching' = 1 (ragged batches) is not supported by onyxia")
        dtype = require_float(ctx, 0)
        x = ctx.input_shape(0)
        if len(x) not in (3, 4):
            raise ctx.fail(f"input must be 3-D or 4-D, got rank {len(x)}", 0)
        if ctx.input_dtype(1).name not in ("int64", "int32"):
            raise ctx.fail(f"position_ids must be int64, got {ctx.input_dtype(1)}", 1)
        pos = ctx.input_shape(1)
        if len(pos) == 2:
            offset = False
        elif ctx.same_dim(numel(pos), 1):
            offset = True
        else:
            raise ctx.fail(f"position_ids must be [batch, sequence] or one offset, got {shape_str(pos)}", 1)
        cache_half = ctx.input_shape(2)[1] if len(ctx.input_shape(2)) == 2 else None
        heads = int(ctx.attr("num_heads", 0))
        rotary_dim = int(ctx.attr("rotary_embedding_dim", 0))
        if len(x) == 4:
            heads, head_size = x[1], x[3]
        else:
            if rotary_dim > 0 and heads == 0:
                raise ctx.fail("rotary_embedding_dim needs the num_heads attribute")
            hidden = ctx.literal(x[2], "the hidden size", 0)
            if heads == 0:  # onnxruntime: head_size = 2 * cos_cache dim 1
                cache_half = ctx.literal(cache_half, "cos_cache dim 1", 2)
                if hidden % (2 * cache_half):
                    raise ctx.fail("cannot derive num_heads: hidden size is not a multiple of 2 * cos_cache dim 1", 2)
                heads = hidden // (2 * cache_half)
            if hidden % heads:
                raise ctx.fail(f"hidden size {hidden} is not a multiple of num_heads {heads}", 0)
            head_size = hidden // heads
        heads, head_size = ctx.literals([heads, head_size], "num_heads and head_size", 0)
        half = rotary_half(ctx, 2, 3, head_size)
        if rotary_dim and rotary_dim != 2 * half:
            raise ctx.fail(f"rotary_embedding_dim {rotary_dim} != 2 * cos_cache dim 1 ({2 * half})", 2)
        return RotarySpec(dtype, heads, head_size, half, offset, len(x) == 4)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        c = self.spec(ctx)
        return [(c.dtype, ctx.input_shape(0))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        c = self.spec(ctx)
        x = ctx.input_shape(0)
        n = numel(x)
        if isinstance(n, int) and n == 0:
            return []
        defs = {k: True for k, enabled in (("INTERLEAVED", ctx.attr("interleaved", 0)), ("BNSH", c.bnsh),
                                           ("POS_OFFSET", c.offset)) if enabled}
        return [ctx.dispatch("attention/rotary.wgsl", label="rotary_embedding", defs=defs,
                             params={"N": n, "S": x[2] if c.bnsh else x[1], "NH": c.heads,
                                     "D": c.head_size, "HALF": c.half, "MAXPOS": ctx.input_shape(2)[0]},
                             reads={"x": ctx.input(0), "position_ids": ctx.input(1), "cos_cache": ctx.input(2),
                                    "sin_cache": ctx.input(3)},
                             writes={"y": ctx.output(0)}, workgroups=ctx.grid(n))]


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(RotaryEmbedding(), 1),
            expanded("RotaryEmbedding")]  # ai.onnx's (opset 23): its ONNX function body


__all__ = ["RotaryEmbedding", "RotarySpec", "operators"]
