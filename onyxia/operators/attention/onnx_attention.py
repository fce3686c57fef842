"""ONNX Attention (opsets 23-25): scaled dot-product attention in one fused kernel; FlexAttention
and LinearAttention run as their function bodies (RotaryEmbedding: rotary.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from onyxia.ir.dtypes import DType
from onyxia.ir.shapes import Dim, Shape, shape_str
from onyxia.operators.attention.gqa import require_float
from onyxia.operators.attention.split_kv import combine_splits, split_keys
from onyxia.operators.base import Buf, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import prefer_literal
from onyxia.operators.functions import expanded
from onyxia.plan import Step

_QK_MODES = (0, 1, 2, 3)  # raw, after softcap, after bias, after softmax


def _mask_strides(mask: Shape) -> list[Dim]:
    """Element strides of a mask right-aligned to [B, H, S, MT] over its B, H and S axes (0 where
    the mask has no such axis or broadcasts it; the key axis is contiguous)."""
    full = (1,) * (4 - len(mask)) + tuple(mask)
    strides, acc = [], full[3]
    for d in reversed(full[:3]):
        strides.append(0 if isinstance(d, int) and d == 1 else acc)
        acc = acc * d
    return strides[::-1]


@dataclass(frozen=True)
class AttentionSpec:
    """An Attention node's validated attributes and dims (infer and plan share them)."""

    dtype: DType
    rank: int  # 3: [batch, seq, heads * size]; 4: [batch, heads, seq, size]
    heads: int
    kv_heads: int
    head: int  # Q/K head size
    v_head: int  # V head size
    batch: Dim
    seq: Dim
    kv_seq: Dim
    past: Dim
    has_past: bool
    nonpad: bool  # nonpad_kv_seqlen given
    mask: Shape | None  # attn_mask's shape
    mode: int  # qk_matmul_output_mode
    left_window_size: int
    right_window_size: int

    @property
    def total(self) -> Dim:
        """Keys attended to: past + new."""
        return self.past + self.kv_seq


class Attention(Operator):
    """ONNX Attention (opsets 23-25): scaled dot-product attention with MHA/GQA/MQA heads.

    Q/K/V are 4-D [batch, heads, seq, head_size] or 3-D [batch, seq, heads * head_size] (with the
    q_num_heads / kv_num_heads attributes). past_key/past_value are concatenated with K/V into
    present_key/present_value (shaders/attention/kv_concat.wgsl); the attention itself is one fused
    online-softmax kernel (shaders/attention/sdpa.wgsl) that handles attn_mask (bool or float,
    broadcast, shorter than the keys), is_causal (bottom-right aligned), nonpad_kv_seqlen, the
    opset-25 windows, softcap and every qk_matmul_output_mode. Computation is in f32;
    softmax_precision therefore changes nothing. Head sizes must be static.
    """

    op_type = "Attention"

    def spec(self, ctx: InferenceCtx) -> AttentionSpec:
        dtype = require_float(ctx, 0)
        for i in (1, 2):
            require_float(ctx, i)
        if ctx.input_dtype(1) != dtype:
            raise ctx.fail(f"K dtype {ctx.input_dtype(1)} differs from Q's {dtype}", 1)
        q, k, v = (ctx.input_shape(i) for i in range(3))
        rank = len(q)
        if rank not in (3, 4) or len(k) != rank or len(v) != rank:
            raise ctx.fail(f"Q, K and V must all be 3-D or all 4-D, got ranks {len(q)}, {len(k)}, {len(v)}", 0)
        if rank == 3:
            heads, kv_heads = int(ctx.attr("q_num_heads", 0)), int(ctx.attr("kv_num_heads", 0))
            if heads <= 0 or kv_heads <= 0:
                raise ctx.fail("3-D inputs need the q_num_heads and kv_num_heads attributes")
            sizes = []
            for i, shape, n in ((0, q, heads), (1, k, kv_heads), (2, v, kv_heads)):
                hidden = ctx.literal(shape[2], "the hidden size", i)
                if hidden % n:
                    raise ctx.fail(f"hidden size {shape[2]} is not a static multiple of {n} heads", i)
                sizes.append(hidden // n)
            head, k_head, v_head = sizes
            batch, seq, kv_seq = q[0], q[1], k[1]
        else:
            heads, kv_heads = q[1], k[1]
            k_head, v_head = k[3], v[3]
            # Q's head size may be a symbol known to equal K's literal one (checked below).
            head = prefer_literal(q[3], k_head) if ctx.same_dim(q[3], k_head) else q[3]
            batch, seq, kv_seq = q[0], q[2], k[2]
            heads = ctx.literal(heads, "Q's head count", 0)
            kv_heads = ctx.literal(kv_heads, "K's head count", 1)
            head = ctx.literal(head, "Q's head size", 0)
            v_head = ctx.literal(v_head, "V's head size", 2)
            if not ctx.same_dim(v[1], kv_heads):
                raise ctx.fail(f"V has {v[1]} heads, K has {kv_heads}", 2)
        if not ctx.same_dim(k_head, head):
            raise ctx.fail(f"K head size {k_head} differs from Q's {head}", 1)
        if heads % kv_heads:
            raise ctx.fail(f"q_num_heads ({heads}) must be a multiple of kv_num_heads ({kv_heads})")
        has_past = ctx.has_input(4)
        if has_past != ctx.has_input(5):
            raise ctx.fail("past_key and past_value must both be given or both absent", 4)
        past: Dim = 0
        if has_past:
            for i, d in ((4, head), (5, v_head)):
                shape = ctx.input_shape(i)
                if len(shape) != 4 or not (ctx.same_dim(shape[1], kv_heads) and ctx.same_dim(shape[3], d)):
                    raise ctx.fail(f"expected [batch, {kv_heads}, past_length, {d}], got {shape_str(shape)}", i)
            past = ctx.input_shape(4)[2]
        nonpad = ctx.has_input(6)
        if nonpad:
            if has_past:
                raise ctx.fail("nonpad_kv_seqlen cannot be combined with past_key / past_value", 6)
            if not ctx.input_dtype(6).is_integer:
                raise ctx.fail(f"nonpad_kv_seqlen must be int64, got {ctx.input_dtype(6)}", 6)
        mask = ctx.input_shape(3) if ctx.has_input(3) else None
        if mask is not None:
            mdt = ctx.input_dtype(3)
            if not (mdt.is_bool or mdt.is_float):
                raise ctx.fail(f"attn_mask must be bool or float, got {mdt}", 3)
            if not 1 <= len(mask) <= 4:
                raise ctx.fail(f"attn_mask must have rank 1 to 4, got {shape_str(mask)}", 3)
        mode = int(ctx.attr("qk_matmul_output_mode", 0))
        if mode not in _QK_MODES:
            raise ctx.fail(f"attribute 'qk_matmul_output_mode' = {mode} is not one of {_QK_MODES}")
        windows = []
        for name in ("left_window_size", "right_window_size"):
            w = int(ctx.attr(name, -1))
            if w < -1:
                raise ctx.fail(f"attribute '{name}' = {w} must be -1 or non-negative")
            windows.append(w)
        return AttentionSpec(dtype, rank, heads, kv_heads, head, v_head, batch, seq, kv_seq, past, has_past,
                             nonpad, mask, mode, *windows)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        c = self.spec(ctx)
        b, s, h, kvh = c.batch, c.seq, c.heads, c.kv_heads
        y = (b, s, h * c.v_head) if c.rank == 3 else (b, h, s, c.v_head)
        return [(c.dtype, y), (ctx.input_dtype(1), (b, kvh, c.total, c.head)),
                (ctx.input_dtype(2), (b, kvh, c.total, c.v_head)),
                (c.dtype, (b, h, s, c.total))][:len(ctx.node.outputs)]

    @staticmethod
    def _strides(c: AttentionSpec, heads: Dim, seq: Dim, size: Dim) -> tuple[Dim, Dim, Dim]:
        """(batch, head, sequence) element strides of a Q/K/V/Y tensor in the node's layout."""
        if c.rank == 3:
            return seq * heads * size, size, heads * size
        return heads * seq * size, seq * size, size

    def plan(self, ctx: PlanCtx) -> list[Step]:
        c = self.spec(ctx)
        outputs = ctx.node.outputs
        wants = [i < len(outputs) and bool(outputs[i]) for i in range(4)]
        b, s, t = c.batch, c.seq, c.total
        h, kvh, d, dv = c.heads, c.kv_heads, c.head, c.v_head
        steps: list[Step] = []

        # 1. present = concat(past, new) when asked for or needed (a past cache)
        k_src, v_src = ctx.input(1), ctx.input(2)
        k_strides = self._strides(c, kvh, c.kv_seq, d)
        v_strides = self._strides(c, kvh, c.kv_seq, dv)
        if wants[1] or wants[2] or c.has_past:
            cache = []
            for out, new, past, size, strides in ((1, ctx.input(1), 4, d, k_strides),
                                                  (2, ctx.input(2), 5, dv, v_strides)):
                count = b * kvh * t * size
                # Raw copies: the cache keeps the new keys' dtype (the scratch too)
                dst = ctx.output(out) if wants[out] else ctx.scratch(count, ctx.tensor_dtype(new).name,
                                                                     hint=f"present{out}")
                reads = {"src": Buf(new, raw=True)} | ({"past": Buf(ctx.input(past), raw=True)} if c.has_past else {})
                if not (isinstance(count, int) and count == 0):
                    steps.append(ctx.dispatch(
                        "attention/kv_concat.wgsl", label="attention_kv_concat",
                        defs={"HAS_PAST": c.has_past}, reads=reads, writes={"dst": Buf(dst, raw=True)},
                        workgroups=ctx.grid(count),
                        params={"N": count, "T": t, "P": c.past, "H": kvh, "D": size,
                                "SB": strides[0], "SH": strides[1], "SS": strides[2]}))
                cache.append(dst)
            k_src, v_src = cache
            k_strides, v_strides = (kvh * t * d, t * d, d), (kvh * t * dv, t * dv, dv)

        # 2. the fused attention
        reads = {"q": ctx.input(0), "k": k_src, "v": v_src}
        defs: dict[str, object] = {"DIM": d, "DPT": max(1, math.ceil(dv / 64))}
        q_strides = self._strides(c, h, s, d)
        y_strides = self._strides(c, h, s, dv)
        params: dict = {"H": h, "S": s, "T": t, "D": d, "DV": dv, "GROUP": h // kvh, "P": c.past,
                        "SCALE": float(ctx.attr("scale", 0.0)) or 1.0 / math.sqrt(d)}
        for name, strides in (("Q", q_strides), ("K", k_strides), ("V", v_strides), ("Y", y_strides)):
            params.update({f"{name}B": strides[0], f"{name}H": strides[1], f"{name}S": strides[2]})
        mask = c.mask
        params.update(MT=0, MB=0, MH=0, MS=0)  # the kernel addresses a mask row either way
        if mask is not None:
            is_bool = ctx.input_dtype(3).is_bool
            defs["MASK_BOOL" if is_bool else "MASK_FLOAT"] = True
            reads["mask"] = ctx.input(3)
            mb, mh, ms = _mask_strides(mask)
            params.update(MT=mask[-1], MB=mb, MH=mh, MS=ms)
        if c.nonpad:
            defs["NONPAD"] = True
            reads["nonpad"] = ctx.input(6)
        if ctx.attr("is_causal", 0):
            defs["CAUSAL"] = True
        if c.left_window_size >= 0:
            defs["LEFT_WINDOW"] = True
            params["LEFT"] = c.left_window_size
        if c.right_window_size >= 0:
            defs["RIGHT_WINDOW"] = True
            params["RIGHT"] = c.right_window_size
        softcap = float(ctx.attr("softcap", 0.0))
        if softcap > 0:
            defs["SOFTCAP"] = True
            params["CAP"] = softcap
        writes: dict[str, str] = {"y": ctx.output(0)}
        split = None
        if wants[3]:
            # (qk_matmul_output's probabilities are normalized by the thread that stored them: no
            # split; one row walks all T keys)
            defs.update(QK_OUT=True, MODE=c.mode)
            writes["qk"] = ctx.output(3)
        else:
            split = split_keys(ctx, t, b * h * s, dv, d, int(defs["DPT"]))  # type: ignore[call-overload]
        if split is None:
            steps.append(ctx.dispatch("attention/sdpa.wgsl", label="attention", defs=defs, params=params,
                                      reads=reads, writes=writes, workgroups=(h, s, b)))
            return steps
        steps.append(ctx.dispatch("attention/sdpa.wgsl", label="attention", defs={**defs, **split.defs()},
                                  params={**params, **split.params()}, reads=reads,
                                  writes={**writes, "partial": split.partial}, workgroups=(h, s, b * split.splits)))
        return steps + combine_splits(ctx, split, ctx.output(0), b, h, s, y_strides)


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(Attention(), 23),
            # ops that run as their ONNX function bodies (operators/functions.py)
            expanded("FlexAttention", "ai.onnx.preview"),  # score_mod / prob_mod subgraphs are inlined too
            expanded("LinearAttention")]  # its body scans the sequence (Scan)
