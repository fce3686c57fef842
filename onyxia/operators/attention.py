"""Attention operators: com.microsoft GroupQueryAttention and RotaryEmbedding; ONNX Attention.

Semantics follow onnxruntime's contrib operator docs and its CPU kernels (the test oracle).
Sequence, past and total lengths are symbolic dims that change every decode step without a
recompile, so every length a kernel needs is a param (an immediate when dynamic) or is read
on the GPU from the seqlens_k / total_sequence_length tensors; nothing is baked.

GroupQueryAttention KV cache layouts (onnxruntime decides by whether past and present are
the same buffer; a graph cannot say so, hence the rule below):
  growing       present = past (P rows) + new (S rows): present has P + S rows.
  shared buffer past and present have the capacity C rows; only the new rows are written, at
                [seqlens_k + 1 - S, seqlens_k + 1) (0 for the first prompt). When past_key is a
                graph input read by nothing else, present aliases its buffer (zero copy: feed
                the present DeviceTensor back as past); otherwise past is copied first.
The shared layout is used when the node has the onyxia attribute
`past_present_share_buffer = 1` (the name of com.microsoft.Attention's attribute; set it on
the loaded IrGraph, onnxruntime rejects it in GQA), or when total_sequence_length is a
constant not above the past length (onnxruntime's rule: present rows = max(total, past)).
"""

from __future__ import annotations

import math

from onyxia.ir.dtypes import DType
from onyxia.ir.graph import TensorKind
from onyxia.ir.shapes import Dim, Shape, numel
from onyxia.operators.base import InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import binding_block, prefer_literal
from onyxia.plan import Step

DOMAIN = "com.microsoft"
SHARE_BUFFER_ATTR = "past_present_share_buffer"


def _require_float(ctx: InferenceCtx, i: int) -> DType:
    dtype = ctx.input_dtype(i)
    if not dtype.is_float:
        raise ctx.fail(f"expected float32/float16, got {dtype}", i)
    return dtype


def _rotary_half(ctx: InferenceCtx, cos: int, sin: int, head_size: Dim) -> Dim:
    """cos/sin caches are [max_pos, rotary_dim / 2] with rotary_dim <= head_size."""
    shapes = [ctx.input_shape(cos), ctx.input_shape(sin)]
    for i, shape in zip((cos, sin), shapes):
        if len(shape) != 2:
            raise ctx.fail(f"cos/sin cache must be 2-D [max_position, rotary_dim / 2], got rank {len(shape)}", i)
    if not ctx.same_shape(shapes[1], shapes[0]):
        raise ctx.fail("cos_cache and sin_cache shapes differ", sin)
    half = prefer_literal(shapes[0][1], shapes[1][1])
    if not isinstance(half, int):
        raise ctx.fail("the rotary dim (cos_cache dim 1) must be static", cos)
    if isinstance(head_size, int) and 2 * half > head_size:
        raise ctx.fail(f"rotary dim {2 * half} exceeds head size {head_size}", cos)
    return half


def _exclusive_input(ctx: PlanCtx, i: int) -> bool:
    """Input i is a graph input that nothing else reads: its buffer may be updated in place."""
    t = ctx.input_tensor(i)
    return (t.kind is TensorKind.INPUT and t.name not in ctx.graph.outputs
            and len(ctx.graph.consumers(t.name)) == 1)


# ---- GroupQueryAttention ------------------------------------------------------------------

# Inputs past the rotary caches that onyxia does not implement yet, with the attributes that
# would switch on features it does not implement; each is rejected by name.
_UNSUPPORTED_INPUTS = {9: "position_ids", 10: "attention_bias", 11: "head_sink", 12: "k_scale",
                       13: "v_scale", 14: "q_norm_weight", 15: "k_norm_weight"}
_UNSUPPORTED_ATTRS = {"smooth_softmax": 0, "qk_output": 0, "sliding_window_cache": 0}


class GroupQueryAttention(Operator):
    """Grouped-query attention with a KV cache, optional rotary, softcap and sliding window."""

    op_type = "GroupQueryAttention"
    domain = DOMAIN

    def _config(self, ctx: InferenceCtx) -> dict:
        """Validated attributes and dims shared by infer and plan."""
        for i, name in _UNSUPPORTED_INPUTS.items():
            if ctx.has_input(i):
                raise ctx.fail(f"input '{name}' is not supported by onyxia", i)
        for name, default in _UNSUPPORTED_ATTRS.items():
            if ctx.attr(name, default) != default:
                raise ctx.fail(f"attribute '{name}' = {ctx.attr(name)} is not supported by onyxia")
        if ctx.attr("k_quant_type", "NONE") != "NONE" or ctx.attr("v_quant_type", "NONE") != "NONE":
            raise ctx.fail("quantized KV caches (k_quant_type / v_quant_type) are not supported by onyxia")
        heads, kv_heads = int(ctx.attr("num_heads")), int(ctx.attr("kv_num_heads"))
        if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
            raise ctx.fail(f"num_heads ({heads}) must be a positive multiple of kv_num_heads ({kv_heads})")
        dtype = _require_float(ctx, 0)
        q = ctx.input_shape(0)
        if len(q) != 3 or not isinstance(q[2], int):
            raise ctx.fail(f"query must be [batch, sequence, hidden] with a static hidden size, got "
                           f"{[str(d) for d in q]}", 0)
        packed = not ctx.has_input(1)
        if packed == ctx.has_input(2):
            raise ctx.fail("key and value must both be given, or both absent (packed QKV)", 1)
        width = heads + 2 * kv_heads if packed else heads
        if q[2] % width:
            raise ctx.fail(f"query hidden size {q[2]} is not a multiple of {width} heads", 0)
        head_size = q[2] // width
        if head_size % 4:  # onnxruntime requires multiples of 8; the kernel reads rows as vec4
            raise ctx.fail(f"head size {head_size} must be a multiple of 4", 0)
        batch, seq = q[0], q[1]
        if not packed:
            for i in (1, 2):
                shape = ctx.input_shape(i)
                if len(shape) != 3 or not ctx.same_dim(shape[2], kv_heads * head_size):
                    raise ctx.fail(f"expected [batch, sequence, {kv_heads * head_size}], got "
                                   f"{[str(d) for d in shape]}", i)
                if ctx.input_dtype(i) != dtype:
                    raise ctx.fail(f"dtype {ctx.input_dtype(i)} differs from query's {dtype}", i)
        has_past = ctx.has_input(3)
        if has_past != ctx.has_input(4):
            raise ctx.fail("past_key and past_value must both be given or both absent", 3)
        past: Dim = 0
        if has_past:
            for i in (3, 4):
                shape = ctx.input_shape(i)
                if len(shape) != 4 or not (ctx.same_dim(shape[1], kv_heads) and ctx.same_dim(shape[3], head_size)):
                    raise ctx.fail(f"expected BNSH [batch, {kv_heads}, past_length, {head_size}], got "
                                   f"{[str(d) for d in shape]}", i)
            past = ctx.input_shape(3)[2]
            if not ctx.same_dim(ctx.input_shape(4)[2], past):
                raise ctx.fail("past_key and past_value lengths differ", 4)
        for i in (5, 6):
            if ctx.input_dtype(i).name != "int32":
                raise ctx.fail(f"expected int32, got {ctx.input_dtype(i)}", i)
        if numel(ctx.input_shape(6)) != 1:
            raise ctx.fail("total_sequence_length must hold one element", 6)

        rotary = bool(ctx.attr("do_rotary", 0))
        half: Dim = 0
        if rotary:
            if not (ctx.has_input(7) and ctx.has_input(8)):
                raise ctx.fail("do_rotary=1 needs the cos_cache and sin_cache inputs", 7)
            half = _rotary_half(ctx, 7, 8, head_size)

        share = bool(ctx.attr(SHARE_BUFFER_ATTR, 0)) and has_past
        total = ctx.input_value(6)
        if total is not None and total.dtype != object and isinstance(past, int):
            share = has_past and int(total.reshape(-1)[0]) <= past  # onnxruntime: max(total, past)
        present: Dim = past if share else past + seq
        causal = bool(ctx.attr("causal", 1))
        window = int(ctx.attr("local_window_size", -1))
        if window >= 0 and not causal:
            raise ctx.fail("local_window_size needs causal=1")
        return dict(dtype=dtype, heads=heads, kv_heads=kv_heads, head_size=head_size, batch=batch,
                    seq=seq, past=past, present=present, packed=packed, has_past=has_past, share=share,
                    rotary=rotary, half=half, causal=causal, window=window)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        c = self._config(ctx)
        cache = (c["batch"], c["kv_heads"], c["present"], c["head_size"])
        return [(c["dtype"], (c["batch"], c["seq"], c["heads"] * c["head_size"])),
                (c["dtype"], cache), (c["dtype"], cache)][:len(ctx.node.outputs)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        c = self._config(ctx)
        if len(ctx.node.outputs) < 3:
            raise ctx.fail("needs the present_key and present_value outputs")
        heads, kv_heads, d = c["heads"], c["kv_heads"], c["head_size"]
        batch, seq, present = c["batch"], c["seq"], c["present"]
        steps: list[Step] = []
        kv_src = [ctx.input(0)] * 2 if c["packed"] else [ctx.input(1), ctx.input(2)]
        row = (heads + 2 * kv_heads) * d if c["packed"] else kv_heads * d
        k_off = heads * d if c["packed"] else 0
        v_off = (heads + kv_heads) * d if c["packed"] else 0
        rotary_reads = [ctx.input(7), ctx.input(8)] if c["rotary"] else []
        rotary_decls = [("cos_cache", "f32"), ("sin_cache", "f32")] if c["rotary"] else []
        maxpos = ctx.input_shape(7)[0] if c["rotary"] else 1
        flags = {"ROTARY": True} if c["rotary"] else {}
        if c["rotary"] and ctx.attr("rotary_interleaved", 0):
            flags["INTERLEAVED"] = True
        common = {"S": seq, "T": present, "KVH": kv_heads, "D": d, "HALF": c["half"], "MAXPOS": maxpos}

        # 1. new K/V into present
        present_k, present_v = ctx.output(1), ctx.output(2)
        reads = [*kv_src, ctx.input(5), ctx.input(6), *rotary_reads]
        decls = [("key_in", "f32"), ("value_in", "f32"), ("seqlens", "i32"), ("total_len", "i32"), *rotary_decls]
        kv_defs: dict[str, object] = dict(flags)
        if c["share"]:
            count = batch * kv_heads * seq * d
            if _exclusive_input(ctx, 3) and _exclusive_input(ctx, 4):
                ctx.alias_output(1, 3)
                ctx.alias_output(2, 4)
            else:
                nbytes = numel(ctx.output_shape(1)) * 4
                steps += [ctx.copy(ctx.input(3), present_k, nbytes), ctx.copy(ctx.input(4), present_v, nbytes)]
        else:
            count = batch * kv_heads * present * d
            kv_defs["FULL"] = True
            if c["has_past"]:
                kv_defs["HAS_PAST"] = True
                reads += [ctx.input(3), ctx.input(4)]
                decls += [("past_k", "f32"), ("past_v", "f32")]
        kv_defs["BINDINGS"] = binding_block(decls, [("present_k", "f32"), ("present_v", "f32")])
        if not (isinstance(count, int) and count == 0):
            steps.append(ctx.dispatch(
                "attention/gqa_kv.wgsl", label="gqa_kv", defs=kv_defs, reads=reads,
                writes=[present_k, present_v], workgroups=ctx.grid(count),
                params={**common, "N": count, "PAST": c["past"], "ROW": row, "K_OFF": k_off, "V_OFF": v_off}))

        # 2. fused attention over present
        att_defs: dict[str, object] = dict(flags)
        att_defs.update(DIM=d, DPT=max(1, math.ceil(d / 4 / 64)), BINDINGS=binding_block(
            [("query", "f32"), ("seqlens", "i32"), ("total_len", "i32"), *rotary_decls,
             ("present_k", "vec4<f32>"), ("present_v", "vec4<f32>")], [("output", "f32")]))
        if c["causal"]:
            att_defs["CAUSAL"] = True
        if c["window"] >= 0:
            att_defs["WINDOW"] = True
        softcap = float(ctx.attr("softcap", 0.0))
        if softcap > 0:
            att_defs["SOFTCAP"] = True
        scale = float(ctx.attr("scale", 0.0)) or 1.0 / math.sqrt(d)
        steps.append(ctx.dispatch(
            "attention/gqa_attention.wgsl", label="gqa_attention", defs=att_defs,
            reads=[ctx.input(0), ctx.input(5), ctx.input(6), *rotary_reads, present_k, present_v],
            writes=[ctx.output(0)], workgroups=(heads, seq, batch),
            params={**common, "H": heads, "D4": d // 4, "Q_ROW": (heads + 2 * kv_heads) * d if c["packed"] else heads * d,
                    "SCALE": scale, "CAP": softcap if softcap > 0 else 1.0,
                    "WINDOW_SIZE": max(c["window"], 0)}))
        return steps


# ---- RotaryEmbedding ----------------------------------------------------------------------

class RotaryEmbedding(Operator):
    """RoPE on [batch, seq, hidden] (BSNH) or [batch, heads, seq, head_size] (BNSH) input."""

    op_type = "RotaryEmbedding"
    domain = DOMAIN

    def _config(self, ctx: InferenceCtx) -> dict:
        if ctx.attr("is_packed_batching", 0):
            raise ctx.fail("attribute 'is_packed_batching' = 1 (ragged batches) is not supported by onyxia")
        dtype = _require_float(ctx, 0)
        x = ctx.input_shape(0)
        if len(x) not in (3, 4):
            raise ctx.fail(f"input must be 3-D or 4-D, got rank {len(x)}", 0)
        if ctx.input_dtype(1).name not in ("int64", "int32"):
            raise ctx.fail(f"position_ids must be int64, got {ctx.input_dtype(1)}", 1)
        pos = ctx.input_shape(1)
        if len(pos) == 2:
            offset = False
        elif numel(pos) == 1:
            offset = True
        else:
            raise ctx.fail(f"position_ids must be [batch, sequence] or one offset, got {[str(d) for d in pos]}", 1)
        cache_half = ctx.input_shape(2)[1] if len(ctx.input_shape(2)) == 2 else None
        heads = int(ctx.attr("num_heads", 0))
        rotary_dim = int(ctx.attr("rotary_embedding_dim", 0))
        if len(x) == 4:
            heads, head_size = x[1], x[3]
        else:
            if rotary_dim > 0 and heads == 0:
                raise ctx.fail("rotary_embedding_dim needs the num_heads attribute")
            if heads == 0:  # onnxruntime: head_size = 2 * cos_cache dim 1
                if not isinstance(cache_half, int) or not isinstance(x[2], int) or x[2] % (2 * cache_half):
                    raise ctx.fail("cannot derive num_heads: hidden size is not a multiple of 2 * cos_cache dim 1", 2)
                heads = x[2] // (2 * cache_half)
            if not isinstance(x[2], int) or x[2] % heads:
                raise ctx.fail(f"hidden size {x[2]} is not a multiple of num_heads {heads}", 0)
            head_size = x[2] // heads
        if not isinstance(head_size, int) or not isinstance(heads, int):
            raise ctx.fail("num_heads and head_size must be static", 0)
        half = _rotary_half(ctx, 2, 3, head_size)
        if rotary_dim and rotary_dim != 2 * half:
            raise ctx.fail(f"rotary_embedding_dim {rotary_dim} != 2 * cos_cache dim 1 ({2 * half})", 2)
        return dict(dtype=dtype, heads=heads, head_size=head_size, half=half, offset=offset, bnsh=len(x) == 4)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        c = self._config(ctx)
        return [(c["dtype"], ctx.input_shape(0))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        c = self._config(ctx)
        x = ctx.input_shape(0)
        n = numel(x)
        if isinstance(n, int) and n == 0:
            return []
        defs = {k: True for k, on in (("INTERLEAVED", ctx.attr("interleaved", 0)), ("BNSH", c["bnsh"]),
                                      ("POS_OFFSET", c["offset"])) if on}
        return [ctx.dispatch("attention/rotary.wgsl", label="rotary_embedding", defs=defs,
                             params={"N": n, "S": x[2] if c["bnsh"] else x[1], "NH": c["heads"],
                                     "D": c["head_size"], "HALF": c["half"], "MAXPOS": ctx.input_shape(2)[0]},
                             reads=[ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3)],
                             writes=[ctx.output(0)], workgroups=ctx.grid(n))]


# ---- Attention (ONNX domain, opset 23+) ------------------------------------------------------

_QK_MODES = (0, 1, 2, 3)  # raw, after softcap, after bias, after softmax


def _fmt(shape: Shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def _mask_strides(mask: Shape) -> list[Dim]:
    """Element strides of a mask right-aligned to [B, H, S, MT] over its B, H and S axes (0 where
    the mask has no such axis or broadcasts it; the key axis is contiguous)."""
    full = (1,) * (4 - len(mask)) + tuple(mask)
    strides, acc = [], full[3]
    for d in reversed(full[:3]):
        strides.append(0 if isinstance(d, int) and d == 1 else acc)
        acc = acc * d
    return strides[::-1]


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

    def _config(self, ctx: InferenceCtx) -> dict:
        dtype = _require_float(ctx, 0)
        for i in (1, 2):
            _require_float(ctx, i)
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
                if not isinstance(shape[2], int) or shape[2] % n:
                    raise ctx.fail(f"hidden size {shape[2]} is not a static multiple of {n} heads", i)
                sizes.append(shape[2] // n)
            head, k_head, v_head = sizes
            batch, seq, kv_seq = q[0], q[1], k[1]
        else:
            heads, kv_heads = q[1], k[1]
            k_head, v_head = k[3], v[3]
            # Q's head size may be a symbol known to equal K's literal one (checked below).
            head = prefer_literal(q[3], k_head) if ctx.same_dim(q[3], k_head) else q[3]
            batch, seq, kv_seq = q[0], q[2], k[2]
            for i, d in ((0, heads), (1, kv_heads), (0, head), (2, v_head)):
                if not isinstance(d, int):
                    raise ctx.fail(f"head counts and head sizes must be static, got {_fmt(ctx.input_shape(i))}", i)
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
                    raise ctx.fail(f"expected [batch, {kv_heads}, past_length, {d}], got {_fmt(shape)}", i)
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
                raise ctx.fail(f"attn_mask must have rank 1 to 4, got {_fmt(mask)}", 3)
        mode = int(ctx.attr("qk_matmul_output_mode", 0))
        if mode not in _QK_MODES:
            raise ctx.fail(f"attribute 'qk_matmul_output_mode' = {mode} is not one of {_QK_MODES}")
        windows = {}
        for name in ("left_window_size", "right_window_size"):
            w = int(ctx.attr(name, -1))
            if w < -1:
                raise ctx.fail(f"attribute '{name}' = {w} must be -1 or non-negative")
            windows[name] = w
        return dict(dtype=dtype, rank=rank, heads=heads, kv_heads=kv_heads, head=head, v_head=v_head,
                    batch=batch, seq=seq, kv_seq=kv_seq, past=past, total=past + kv_seq, has_past=has_past,
                    nonpad=nonpad, mask=mask, mode=mode, **windows)

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        c = self._config(ctx)
        b, s, h, kvh = c["batch"], c["seq"], c["heads"], c["kv_heads"]
        y = (b, s, h * c["v_head"]) if c["rank"] == 3 else (b, h, s, c["v_head"])
        return [(c["dtype"], y), (ctx.input_dtype(1), (b, kvh, c["total"], c["head"])),
                (ctx.input_dtype(2), (b, kvh, c["total"], c["v_head"])),
                (c["dtype"], (b, h, s, c["total"]))][:len(ctx.node.outputs)]

    @staticmethod
    def _strides(c: dict, heads: Dim, seq: Dim, size: Dim) -> tuple[Dim, Dim, Dim]:
        """(batch, head, sequence) element strides of a Q/K/V/Y tensor in the node's layout."""
        if c["rank"] == 3:
            return seq * heads * size, size, heads * size
        return heads * seq * size, seq * size, size

    def plan(self, ctx: PlanCtx) -> list[Step]:
        c = self._config(ctx)
        outputs = ctx.node.outputs
        wants = [i < len(outputs) and bool(outputs[i]) for i in range(4)]
        b, s, t = c["batch"], c["seq"], c["total"]
        h, kvh, d, dv = c["heads"], c["kv_heads"], c["head"], c["v_head"]
        steps: list[Step] = []

        # 1. present = concat(past, new) when asked for or needed (a past cache)
        k_src, v_src = ctx.input(1), ctx.input(2)
        k_strides = self._strides(c, kvh, c["kv_seq"], d)
        v_strides = self._strides(c, kvh, c["kv_seq"], dv)
        if wants[1] or wants[2] or c["has_past"]:
            cache = []
            for out, new, past, size, strides in ((1, ctx.input(1), 4, d, k_strides),
                                                  (2, ctx.input(2), 5, dv, v_strides)):
                count = b * kvh * t * size
                dst = ctx.output(out) if wants[out] else ctx.scratch(count, hint=f"present{out}")
                reads = [new] + ([ctx.input(past)] if c["has_past"] else [])
                if not (isinstance(count, int) and count == 0):
                    steps.append(ctx.dispatch(
                        "attention/kv_concat.wgsl", label="attention_kv_concat",
                        defs={"HAS_PAST": c["has_past"]}, reads=reads, writes=[dst], workgroups=ctx.grid(count),
                        params={"N": count, "T": t, "P": c["past"], "H": kvh, "D": size,
                                "SB": strides[0], "SH": strides[1], "SS": strides[2]}))
                cache.append(dst)
            k_src, v_src = cache
            k_strides, v_strides = (kvh * t * d, t * d, d), (kvh * t * dv, t * dv, dv)

        # 2. the fused attention
        reads = [ctx.input(0), k_src, v_src]
        decls = [("q", "f32"), ("k", "f32"), ("v", "f32")]
        defs: dict[str, object] = {"DIM": d, "DPT": max(1, math.ceil(dv / 64))}
        q_strides = self._strides(c, h, s, d)
        y_strides = self._strides(c, h, s, dv)
        params: dict = {"H": h, "S": s, "T": t, "D": d, "DV": dv, "GROUP": h // kvh, "P": c["past"],
                        "SCALE": float(ctx.attr("scale", 0.0)) or 1.0 / math.sqrt(d)}
        for name, strides in (("Q", q_strides), ("K", k_strides), ("V", v_strides), ("Y", y_strides)):
            params.update({f"{name}B": strides[0], f"{name}H": strides[1], f"{name}S": strides[2]})
        mask = c["mask"]
        params.update(MT=0, MB=0, MH=0, MS=0)  # the kernel addresses a mask row either way
        if mask is not None:
            is_bool = ctx.input_dtype(3).is_bool
            defs["MASK_BOOL" if is_bool else "MASK_FLOAT"] = True
            reads.append(ctx.input(3))
            decls.append(("mask", "u32" if is_bool else "f32"))
            mb, mh, ms = _mask_strides(mask)
            params.update(MT=mask[-1], MB=mb, MH=mh, MS=ms)
        if c["nonpad"]:
            defs["NONPAD"] = True
            reads.append(ctx.input(6))
            decls.append(("nonpad", "i32"))
        if ctx.attr("is_causal", 0):
            defs["CAUSAL"] = True
        if c["left_window_size"] >= 0:
            defs["LEFT_WINDOW"] = True
            params["LEFT"] = c["left_window_size"]
        if c["right_window_size"] >= 0:
            defs["RIGHT_WINDOW"] = True
            params["RIGHT"] = c["right_window_size"]
        softcap = float(ctx.attr("softcap", 0.0))
        if softcap > 0:
            defs["SOFTCAP"] = True
            params["CAP"] = softcap
        writes, wdecls = [ctx.output(0)], [("y", "f32")]
        if wants[3]:
            defs.update(QK_OUT=True, MODE=c["mode"])
            writes.append(ctx.output(3))
            wdecls.append(("qk", "f32"))
        defs["BINDINGS"] = binding_block(decls, wdecls)
        steps.append(ctx.dispatch("attention/sdpa.wgsl", label="attention", defs=defs, params=params,
                                  reads=reads, writes=writes, workgroups=(h, s, b)))
        return steps


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(GroupQueryAttention(), 1), (RotaryEmbedding(), 1), (Attention(), 23)]
