"""com.microsoft GroupQueryAttention (RotaryEmbedding is in rotary.py, ONNX's Attention in
onnx_attention.py).

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
  window        sliding_window_cache = 1 (Gemma-2/3, Mistral exported for CPU): past and present
                hold C rows (past's static dim 2, C >= local_window_size W); after T tokens rows
                [0, L(T)) hold the last L(T) positions (shaders/attention/window.wgsl). The
                step's rows go to a scratch, attention reads past and scratch, and a third
                kernel writes present (its own buffer: compaction moves rows down).
The shared layout is used when the node has the onyxia attribute
`past_present_share_buffer = 1` (the name of com.microsoft.Attention's attribute; set it on
the loaded IrGraph, onnxruntime rejects it in GQA), or when total_sequence_length is a
constant not above the past length (onnxruntime's rule: present rows = max(total, past)).

The attention step has two kernels, both in every plan (the adapter symbol gives one an empty
grid, so a plan runs on either kind of adapter without recompiling): a GPU-type adapter runs
shaders/attention/gqa_attention.wgsl, a workgroup of 64 threads per query row; a CPU-type
adapter runs shaders/attention/gqa_flash.wgsl, 8 query (head, row) pairs of one KV head per
8-invocation workgroup streaming K/V once for all of them (heads up to 128; larger ones run
gqa_attention.wgsl with 8 threads). On lavapipe the tiled kernel is faster at every sequence
length, decode included (numbers in its header).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from onyxia.ir.dtypes import DType
from onyxia.ir.graph import TensorKind
from onyxia.ir.shapes import Dim, Shape, numel, shape_str
from onyxia.operators.attention.split_kv import (
    ATTENTION_WG,
    CPU_ATTENTION_WG,
    SPLIT_TRIPS,
    combine_splits,
    split_by,
    split_keys,
)
from onyxia.operators.base import Buf, InferenceCtx, Operator, PlanCtx
from onyxia.operators.common import prefer_literal
from onyxia.operators.indexing.indexing import copy_elements
from onyxia.plan import ALWAYS, Step, adapter

DOMAIN = "com.microsoft"
SHARE_BUFFER_ATTR = "past_present_share_buffer"
FLASH_LANES = 8  # (query head, query row) pairs per workgroup of the tiled kernel (gqa_flash.wgsl)
FLASH_KEYS = 4  # keys per step of its walk (gqa_flash.wgsl QT)
FLASH_MAX_SLICES = 4  # its register slices of 32 head columns: head sizes up to 128


def require_float(ctx: InferenceCtx, i: int) -> DType:
    dtype = ctx.input_dtype(i)
    if not dtype.is_float:
        raise ctx.fail(f"expected float32/float16, got {dtype}", i)
    return dtype


def rotary_half(ctx: InferenceCtx, cos: int, sin: int, head_size: Dim) -> Dim:
    """cos/sin caches are [max_pos, rotary_dim / 2] with rotary_dim <= head_size."""
    shapes = [ctx.input_shape(cos), ctx.input_shape(sin)]
    for i, shape in zip((cos, sin), shapes):
        if len(shape) != 2:
            raise ctx.fail(f"cos/sin cache must be 2-D [max_position, rotary_dim / 2], got rank {len(shape)}", i)
    if not ctx.same_shape(shapes[1], shapes[0]):
        raise ctx.fail("cos_cache and sin_cache shapes differ", sin)
    half = ctx.literal(prefer_literal(shapes[0][1], shapes[1][1]), "the rotary dim (cos_cache dim 1)", cos)
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
                       13: "v_scale"}
_UNSUPPORTED_ATTRS = {"smooth_softmax": 0, "qk_output": 0}


@dataclass(frozen=True)
class GqaSpec:
    """A GroupQueryAttention node's validated attributes and dims (infer and plan share them)."""

    dtype: DType
    heads: int
    kv_heads: int
    head_size: int
    batch: Dim
    seq: Dim
    past: Dim  # past KV rows (0 without a past)
    present: Dim  # present KV rows: past (shared buffer) or past + seq
    packed: bool  # Q, K and V packed in input 0
    has_past: bool
    share: bool  # past and present share one buffer
    rotary: bool
    half: Dim  # rotary dim / 2 (0 without rotary)
    causal: bool
    window: int  # local_window_size, -1 for none
    windowed: bool = False  # sliding_window_cache = 1: past and present are window-sized (past rows)
    qk_norm: bool = False  # per-head RMS norm of Q and K before rotary (inputs 14, 15)
    q_eps: float = 1e-6
    k_eps: float = 1e-6


class GroupQueryAttention(Operator):
    """Grouped-query attention with a KV cache, optional rotary, softcap and sliding window."""

    op_type = "GroupQueryAttention"
    domain = DOMAIN

    def __init__(self, flash: bool = True) -> None:
        self.flash = flash  # the tiled prefill kernel where it applies (False: the per-row kernel only)

    def spec(self, ctx: InferenceCtx) -> GqaSpec:
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
        dtype = require_float(ctx, 0)
        q = ctx.input_shape(0)
        if len(q) != 3:
            raise ctx.fail(f"query must be [batch, sequence, hidden] with a static hidden size, got {shape_str(q)}", 0)
        q = (q[0], q[1], ctx.literal(q[2], "the query's hidden size", 0))
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
                    raise ctx.fail(f"expected [batch, sequence, {kv_heads * head_size}], got {shape_str(shape)}", i)
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
                                   f"{shape_str(shape)}", i)
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
            half = rotary_half(ctx, 7, 8, head_size)

        causal = bool(ctx.attr("causal", 1))
        window = int(ctx.attr("local_window_size", -1))
        if window >= 0 and not causal:
            raise ctx.fail("local_window_size needs causal=1")
        windowed = bool(ctx.attr("sliding_window_cache", 0))
        share = bool(ctx.attr(SHARE_BUFFER_ATTR, 0)) and has_past
        total = ctx.input_value(6)
        if total is not None and total.dtype != object and isinstance(past, int):
            share = has_past and int(total.reshape(-1)[0]) <= past  # onnxruntime: max(total, past)
        if windowed:
            # The cache capacity C (past's rows) is fixed: present has C rows too.
            if not has_past or window <= 0:
                raise ctx.fail("sliding_window_cache = 1 needs past_key/past_value and local_window_size > 0")
            past = ctx.literal(prefer_literal(past, ctx.input_shape(4)[2]), "the cache capacity (past_key dim 2)", 3)
            if past < window:
                raise ctx.fail(f"sliding_window_cache = 1 needs a static cache capacity (past_key dim 2) of at "
                               f"least local_window_size {window}, got {past}", 3)
            share = False
        present: Dim = past if share or windowed else past + seq
        qk_norm = ctx.has_input(14) or ctx.has_input(15)
        eps = float(ctx.attr("qk_norm_epsilon", 1e-6))
        if qk_norm:
            for i in (14, 15):
                if not ctx.has_input(i):
                    raise ctx.fail("q_norm_weight and k_norm_weight must both be given", i)
                if not ctx.input_dtype(i).is_float or not ctx.same_shape(ctx.input_shape(i), (head_size,)):
                    raise ctx.fail(f"expected a float [head_size] = [{head_size}] weight, got {ctx.input_dtype(i)}"
                                   f"{shape_str(ctx.input_shape(i))}", i)
        return GqaSpec(dtype, heads, kv_heads, head_size, batch, seq, past, present, packed, has_past, share,
                       rotary, half, causal, window, windowed, qk_norm, float(ctx.attr("q_norm_epsilon", eps)),
                       float(ctx.attr("k_norm_epsilon", eps)))

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        c = self.spec(ctx)
        cache = (c.batch, c.kv_heads, c.present, c.head_size)
        return [(c.dtype, (c.batch, c.seq, c.heads * c.head_size)),
                (c.dtype, cache), (c.dtype, cache)][:len(ctx.node.outputs)]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        c = self.spec(ctx)
        if len(ctx.node.outputs) < 3:
            raise ctx.fail("needs the present_key and present_value outputs")
        cache = kv_cache(c)
        rotary = _rotary_inputs(ctx, c)
        # 1. new K/V into the cache (and whatever copies the layout needs first)
        rows = cache.new_rows(ctx, c)
        steps = rows.steps + _kv_step(ctx, c, rows, rotary)
        # 2. fused attention over the cache
        steps += self._attention_steps(ctx, c, cache, rows, rotary)
        # 3. the layout's last step, if any
        return steps + cache.finish(ctx, c, rows)

    def _attention_steps(self, ctx: PlanCtx, c: GqaSpec, cache: KvCache, rows: NewRows,
                         rotary: RotaryInputs) -> list[Step]:
        """Step 2 on both kernels: the row-per-workgroup kernel on a GPU-type adapter, on a
        CPU-type one the tiled kernel (heads up to 128) or the row kernel with 8 threads."""
        heads, kv_heads, d, batch, seq = c.heads, c.kv_heads, c.head_size, c.batch, c.seq
        att_defs = _attention_defs(ctx, c, cache, rotary)
        softcap = float(ctx.attr("softcap", 0.0))
        scale = float(ctx.attr("scale", 0.0)) or 1.0 / math.sqrt(d)
        att_params = {**rotary.params(c), "H": heads, "D4": d // 4,
                      "Q_ROW": (heads + 2 * kv_heads) * d if c.packed else heads * d,
                      "SCALE": scale, "CAP": softcap if softcap > 0 else 1.0,
                      "WINDOW_SIZE": max(c.window, 0), "EPS": c.q_eps, "C": c.past}
        max_keys = cache.max_keys(c)
        # Threads per workgroup -> vec4 value columns per thread; 64 threads on a GPU, 8 (no
        # coroutine switches at the barriers, see attention::reduce) on a CPU-type adapter.
        lanes = {wg: max(1, math.ceil(d / 4 / wg)) for wg in (ATTENTION_WG, CPU_ATTENTION_WG)}
        split = split_keys(ctx, max_keys, batch * heads * seq, d, d // 4, lanes)
        norm_reads = {"q_norm": ctx.input(14)} if c.qk_norm else {}
        reads = {"query": ctx.input(0), "seqlens": ctx.input(5), "total_len": ctx.input(6), **rotary.reads,
                 **norm_reads, **cache.attention_reads(ctx, rows)}
        # Which kernel (one Select): a CPU-type adapter runs the tiled kernel (heads up to 128),
        # else the row kernel with 8 threads; a GPU-type one the row kernel with 64.
        variants = []
        if self.flash and math.ceil(d / 32) <= FLASH_MAX_SLICES:
            variants.append(("tiled", _tiled_attention(ctx, att_defs, att_params, reads, max_keys,
                                                       (batch, heads, kv_heads, seq, d)), ALWAYS, adapter("cpu")))
        for label, wg, prefer in (("rows8", CPU_ATTENTION_WG, adapter("cpu")), ("rows64", ATTENTION_WG, ALWAYS)):
            kernel = [ctx.dispatch(
                "attention/gqa_attention.wgsl", label="gqa_attention",
                defs={**att_defs, **(split.defs() if split else {}), "ATT_WG": wg, "DPT": lanes[wg]}, reads=reads,
                writes={"output": ctx.output(0), **({"partial": split.partial} if split else {})},
                workgroups=(heads, seq, batch * (split.splits if split else 1)),
                params={**att_params, **(split.params() if split else {})})]
            if split is not None:
                kernel += combine_splits(ctx, split, ctx.output(0), batch, heads, seq, (seq * heads * d, d, heads * d))
            variants.append((label, kernel, ALWAYS, prefer))
        return ctx.select("gqa_attention", variants)


@dataclass(frozen=True)
class RotaryInputs:
    """What steps 1 and 2 share: the rotary caches (when do_rotary) and the dims both kernels take."""

    reads: dict[str, str]  # cos_cache, sin_cache
    flags: dict[str, object]  # ROTARY, INTERLEAVED
    maxpos: Dim  # the caches' positions (1 without rotary)

    def params(self, c: GqaSpec) -> dict[str, object]:
        return {"S": c.seq, "T": c.present, "KVH": c.kv_heads, "D": c.head_size, "HALF": c.half,
                "MAXPOS": self.maxpos}


def _rotary_inputs(ctx: PlanCtx, c: GqaSpec) -> RotaryInputs:
    if not c.rotary:
        return RotaryInputs({}, {}, 1)
    flags: dict[str, object] = {"ROTARY": True}
    if ctx.attr("rotary_interleaved", 0):
        flags["INTERLEAVED"] = True
    return RotaryInputs({"cos_cache": ctx.input(7), "sin_cache": ctx.input(8)}, flags, ctx.input_shape(7)[0])


def _kv_step(ctx: PlanCtx, c: GqaSpec, rows: NewRows, rotary: RotaryInputs) -> list[Step]:
    """Step 1, shaders/attention/gqa_kv.wgsl: the step's K/V rows (rotated, normalized) into
    the buffers the cache layout chose; none when it writes nothing."""
    if isinstance(rows.count, int) and rows.count == 0:
        return []
    d, kv_heads = c.head_size, c.kv_heads
    kv_src = [ctx.input(0)] * 2 if c.packed else [ctx.input(1), ctx.input(2)]
    reads: dict[str, str | Buf] = {"key_in": kv_src[0], "value_in": kv_src[1], "seqlens": ctx.input(5),
                                   "total_len": ctx.input(6), **rotary.reads}
    defs: dict[str, object] = dict(rotary.flags)
    if c.qk_norm:
        defs["QK_NORM"] = True
        reads["k_norm"] = ctx.input(15)
        if c.dtype.name == "float16":
            defs["ROUND_F16"] = True
    return [ctx.dispatch(
        "attention/gqa_kv.wgsl", label="gqa_kv", defs={**defs, **rows.defs}, reads={**reads, **rows.reads},
        writes={"present_k": rows.keys, "present_v": rows.values}, workgroups=ctx.grid(rows.count),
        params={**rotary.params(c), "N": rows.count, "PAST": c.past,
                "ROW": (c.heads + 2 * kv_heads) * d if c.packed else kv_heads * d,
                "K_OFF": c.heads * d if c.packed else 0, "V_OFF": (c.heads + kv_heads) * d if c.packed else 0,
                "EPS": c.k_eps})]


def _attention_defs(ctx: PlanCtx, c: GqaSpec, cache: KvCache, rotary: RotaryInputs) -> dict[str, object]:
    defs: dict[str, object] = dict(rotary.flags)
    if c.qk_norm:
        defs["QK_NORM"] = True
    defs |= cache.attention_defs
    defs["DIM"] = c.head_size
    if c.dtype.name == "float16" and (c.rotary or c.qk_norm):
        defs["ROUND_F16"] = True  # onnxruntime's float16 steps (attention::rope f16_step)
    if c.causal:
        defs["CAUSAL"] = True
    if c.window >= 0:
        defs["WINDOW"] = True
    if float(ctx.attr("softcap", 0.0)) > 0:
        defs["SOFTCAP"] = True
    return defs


# ---- KV cache layouts (the module docstring describes them) ---------------------------------

@dataclass(frozen=True)
class NewRows:
    """Where step 1 writes the step's K/V rows, and what its kernel needs for that layout."""

    keys: str
    values: str
    count: Dim  # elements the gqa_kv kernel writes
    defs: dict[str, object]
    reads: dict[str, str | Buf]
    steps: list[Step]  # copies that go before it


class KvCache:
    """A GroupQueryAttention KV cache layout: where step 1 writes (`new_rows`), what step 2
    reads (`attention_defs`, `attention_reads`, `max_keys`) and a step 3 (`finish`)."""

    attention_defs: dict[str, object] = {}

    def new_rows(self, ctx: PlanCtx, c: GqaSpec) -> NewRows:
        raise NotImplementedError

    def attention_reads(self, ctx: PlanCtx, rows: NewRows) -> dict[str, str | Buf]:
        # K and V are read as vec4s (head sizes are multiples of 8)
        return {"present_k": Buf(rows.keys, vector=True), "present_v": Buf(rows.values, vector=True)}

    def max_keys(self, c: GqaSpec) -> Dim:
        """The most keys a query row visits: the present's T, or the window's when smaller."""
        if c.window >= 0 and (not isinstance(c.present, int) or c.window < c.present):
            return c.window
        return c.present

    def finish(self, ctx: PlanCtx, c: GqaSpec, rows: NewRows) -> list[Step]:
        return []


class GrowingCache(KvCache):
    """present = past + the new rows: the kernel writes all of present's rows."""

    def new_rows(self, ctx: PlanCtx, c: GqaSpec) -> NewRows:
        defs: dict[str, object] = {"FULL": True}
        reads: dict[str, str | Buf] = {}
        if c.has_past:
            defs["HAS_PAST"] = True
            reads = {"past_k": ctx.input(3), "past_v": ctx.input(4)}
        return NewRows(ctx.output(1), ctx.output(2), c.batch * c.kv_heads * c.present * c.head_size, defs, reads,
                       [])


class SharedCache(KvCache):
    """past and present are one buffer of capacity rows: only the new rows are written, into
    past's own buffer when nothing else reads it, else into a copy of it."""

    def new_rows(self, ctx: PlanCtx, c: GqaSpec) -> NewRows:
        keys, values = ctx.output(1), ctx.output(2)
        count: Dim = c.batch * c.kv_heads * c.seq * c.head_size
        steps: list[Step] = []
        if _exclusive_input(ctx, 3) and _exclusive_input(ctx, 4):
            ctx.alias_output(1, 3)
            ctx.alias_output(2, 4)
        else:
            count = numel(ctx.output_shape(1))
            steps = copy_elements(ctx, ctx.input(3), keys, count) + copy_elements(ctx, ctx.input(4), values, count)
        return NewRows(keys, values, count, {}, {}, steps)


class WindowCache(KvCache):
    """sliding_window_cache = 1: the step's rows go to a scratch (present can hold fewer rows
    than the step reads), attention reads past and scratch, step 3 writes present."""

    attention_defs = {"WINDOWED": True}

    def new_rows(self, ctx: PlanCtx, c: GqaSpec) -> NewRows:
        count = c.batch * c.kv_heads * c.seq * c.head_size
        cache_dtype = ctx.output_dtype(1).name  # the window kernel copies their bits into present
        keys = ctx.scratch(count, cache_dtype, hint="new_k")
        values = ctx.scratch(count, cache_dtype, hint="new_v")
        return NewRows(keys, values, count, {"WINDOWED": True}, {}, [])

    def attention_reads(self, ctx: PlanCtx, rows: NewRows) -> dict[str, str | Buf]:
        return {"past_k": Buf(ctx.input(3), vector=True), "past_v": Buf(ctx.input(4), vector=True),
                "new_k": Buf(rows.keys, vector=True), "new_v": Buf(rows.values, vector=True)}

    def max_keys(self, c: GqaSpec) -> Dim:
        return c.window  # the only bound (the spec requires local_window_size > 0)

    def finish(self, ctx: PlanCtx, c: GqaSpec, rows: NewRows) -> list[Step]:
        """present from past and the step's rows (see shaders/attention/window.wgsl)."""
        count = c.batch * c.kv_heads * c.past * c.head_size
        return [ctx.dispatch(
            "attention/gqa_window.wgsl", label="gqa_window",
            reads={"new_k": Buf(rows.keys, raw=True), "new_v": Buf(rows.values, raw=True), "seqlens": ctx.input(5),
                   "total_len": ctx.input(6), "past_k": Buf(ctx.input(3), raw=True),
                   "past_v": Buf(ctx.input(4), raw=True)},
            writes={"present_k": Buf(ctx.output(1), raw=True), "present_v": Buf(ctx.output(2), raw=True)},
            workgroups=ctx.grid(count),
            params={"N": count, "S": c.seq, "C": c.past, "KVH": c.kv_heads, "D": c.head_size,
                    "WINDOW_SIZE": c.window})]


def kv_cache(c: GqaSpec) -> KvCache:
    """The node's cache layout (GqaSpec decided it: windowed wins over a shared buffer)."""
    return WindowCache() if c.windowed else SharedCache() if c.share else GrowingCache()


def _tiled_attention(ctx: PlanCtx, defs: dict[str, object], params: dict[str, object], reads: dict[str, str | Buf],
                     max_keys: Dim, sizes: tuple[Dim, int, int, Dim, int]) -> list[Step]:
    """GQA's step 2 as shaders/attention/gqa_flash.wgsl: 8
    (query head, query row) pairs per workgroup, one per invocation, HB heads of a KV group by
    8 / HB rows; its own split of the keys (one loop trip per FLASH_KEYS keys), merged by its
    own combine step."""
    batch, heads, kv_heads, seq, d = sizes
    group = heads // kv_heads
    per_block = next(n for n in (8, 4, 2, 1) if group % n == 0)  # heads per workgroup (HB)
    rows = FLASH_LANES // per_block
    # One trip of the key walk per FLASH_KEYS keys; the kernel's other loops (the query's norm
    # and slices, the stores) take a few hundred trips, kept out of SPLIT_TRIPS
    kps = FLASH_KEYS * (SPLIT_TRIPS - 1024)
    split = split_by(ctx, max_keys, batch * heads * seq, d, kps)
    steps = [ctx.dispatch(
        "attention/gqa_flash.wgsl", label="gqa_flash",
        defs={**defs, "CPL": math.ceil(d / 32), "HB": per_block, **(split.defs() if split else {})},
        reads=reads, writes={"output": ctx.output(0), **({"partial": split.partial} if split else {})},
        workgroups=(heads // per_block, (seq + rows - 1) // rows, batch * (split.splits if split else 1)),
        params={**params, **(split.params() if split else {})})]
    if split is not None:
        steps += combine_splits(ctx, split, ctx.output(0), batch, heads, seq, (seq * heads * d, d, heads * d))
    return steps


def operators() -> list[tuple[Operator, int]]:
    """(operator, since_version) pairs this module registers."""
    return [(GroupQueryAttention(), 1)]
