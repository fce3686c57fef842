"""What a plan costs: bytes moved and flops per dispatch, peak live activations, decode traffic.

A cost model read off the plan alone (a loaded plan file works too), evaluated at any dims:

- bytes: every tensor a dispatch binds, read or written, at its full size for the dims (the
  status word aside). Gather-like ops read only the rows they copy, so their reads count at
  most the bytes they write; so do other ops' strided copies (a strided conv's patches). A
  CopyBuffer moves its size twice (read + write); WriteBuffer steps run at load time, not per
  run, and cost nothing here.
- flops: 2·M·N·K for the kernels of a product (MatMul, Gemm, MatMulNBits, Conv: K from the
  operand shapes), 4·S·T·D per head for attention (QKᵀ and PV; FusedAttention's T from its
  kernels' params), and one per element written
  for everything else (elementwise, norms, copies). An op's product/attention flops go to its
  dispatch that reads the most bytes; its other dispatches (split-K reductions, packing) count
  their elements.
- dispatches whose grid is empty at these dims (kernel variants for other shapes or adapters)
  are listed but cost nothing, as the runtime skips them. Of a Select step's alternatives only
  the one replayed counts: the executor's choice where the caller passes it (`choices`), else
  the heuristic's at these dims on the adapter the caller names (`adapter`).
- a KV cache (a rank-4 [batch, heads, rows, head size] tensor an attention op binds) counts the
  rows its kernels touch where the caller says how many (`kv`, KvRows): attention reads the
  valid keys only, not the cache's capacity, and a shared-buffer cache (present written in place
  over past: an alias) is written only where the step's new rows go. decode_cost passes them.

Nested steps (a loop body, a branch's arms) count once. The model is first-order: a kernel that
reads an operand twice, or caches it, moves other bytes than it binds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from onyxia.ir.dtypes import from_name
from onyxia.ir.shapes import Dim, evaluate_dim, numel
from onyxia.plan import (
    REUSABLE_KINDS,
    STATUS_TENSOR,
    AdapterFacts,
    Binding,
    CompiledModel,
    CopyBuffer,
    Dispatch,
    Select,
    ShaderSpec,
    Step,
    TensorInfo,
    walk_steps,
)

PRODUCT_OPS = frozenset({"MatMul", "Gemm", "MatMulNBits", "FusedMatMul", "MatMulInteger", "QLinearMatMul",
                         "Conv", "ConvTranspose", "QLinearConv", "ConvInteger",
                         "MatMulEpilogue", "GemmEpilogue", "MatMulNBitsShared",  # the fused forms
                         "ConvEpilogue", "ConvTransposeEpilogue"})
ATTENTION_OPS = frozenset({"Attention", "MultiHeadAttention", "GroupQueryAttention", "SplitKvAttention"})
FUSED_ATTENTION_OPS = frozenset({"FusedAttention"})  # q, k, v through views (_fused_attention_flops)
GATHER_OPS = frozenset({"Gather", "GatherElements", "GatherND", "GatherBlockQuantized", "Slice", "Split"})
# Kernels of any op that copy the elements they read (a strided conv's patches): gather-like too.
GATHER_SHADERS = frozenset({"strided_copy"})


@dataclass(frozen=True)
class DispatchCost:
    op: str  # node name
    op_type: str
    shader: str  # shader label (the kernel variant)
    read_bytes: int
    written_bytes: int
    flops: int
    live: bool  # False: empty grid at these dims, the runtime skips it

    @property
    def bytes(self) -> int:
        return self.read_bytes + self.written_bytes


@dataclass(frozen=True)
class KvRows:
    """Rows of a KV cache an attention op touches in one run (see the module doc)."""

    read: int  # keys attention reads: the valid length (a cache's rows beyond it are not read)
    written: int  # rows written into a cache updated in place (the step's new tokens)


@dataclass(frozen=True)
class PlanCost:
    dims: dict[str, int]
    dispatches: tuple[DispatchCost, ...]  # every dispatch in replay order, live or not
    copy_bytes: int  # CopyBuffer traffic
    # Per weight a live dispatch reads: the most bytes one dispatch reads of it (what a run must
    # read at least once: all of a matrix, the rows gathered of a table).
    weight_reads: dict[str, int] = field(default_factory=dict)

    @property
    def live(self) -> list[DispatchCost]:
        return [d for d in self.dispatches if d.live]

    @property
    def bytes(self) -> int:
        return sum(d.bytes for d in self.live) + self.copy_bytes

    @property
    def flops(self) -> int:
        return sum(d.flops for d in self.live)


def _eval(d: Dim, dims: Mapping[str, int]) -> int:
    return int(evaluate_dim(d, dims))


def tensor_bytes(t: TensorInfo, dims: Mapping[str, int]) -> int:
    return _eval(t.nbytes, dims)


def _elements(t: TensorInfo, dims: Mapping[str, int]) -> int:
    return _eval(numel(t.shape), dims)


def _window_bytes(spec: ShaderSpec, d: Dispatch, b: Binding, t: TensorInfo, written: int,
                  env: Mapping[str, int]) -> float:
    """What a product reading its A through a strided window (gemv_chunked.wgsl A_WINDOW: a
    strided 1x1 conv's input) reads of binding `b`: the K values of each of its positions, not
    the whole input (`written`: the elements it writes, batch x N x M); unbounded elsewhere."""
    if ("A_WINDOW", True) not in spec.defs or spec.buffers[d.bindings.index(b)].name != "a":
        return float("inf")
    values = {p.name: v for p, v in spec.constants}
    values.update((p.name, v) for p, v in zip(spec.immediates, d.immediates))
    n, k = (_eval(values[name], env) for name in ("N", "K"))
    return _eval(from_name(t.dtype).nbytes(written // max(n, 1) * k), env)


def _conv_weight(reads: list[TensorInfo], out: TensorInfo, dims: Mapping[str, int]) -> TensorInfo | None:
    """A conv's weights among the tensors its dispatches read, in whatever order they bind them
    (a pointwise conv's matrix product binds W first, the conv kernels the input) and whatever
    layout they are stored in (k-major, or W^T for a pooled map: passes/pooled_conv.py): the
    constant of the output's rank, else the tensor of that rank with the output's channels first."""
    if len(out.shape) < 3:
        return None
    ranked = [t for t in reads if len(t.shape) == len(out.shape)]
    weight = next((t for t in ranked if t.kind == "weight"), None)
    if weight is not None:
        return weight
    maps = _eval(out.shape[1], dims)
    fits = [t for t in ranked if _eval(t.shape[0], dims) == maps]
    return fits[-1] if fits else None


def _op_flops(op_type: str, reads: list[TensorInfo], writes: list[TensorInfo], dims: Mapping[str, int]) -> int:
    """Flops of a product or attention op from the tensors its dispatches bind (0: not one)."""
    if not reads or not writes:
        return 0
    out = max(writes, key=lambda t: _elements(t, dims))
    if op_type in PRODUCT_OPS:
        w = _conv_weight(reads, out, dims) if op_type.startswith(("Conv", "QLinearConv")) else None
        if w is not None:  # each output element is a dot of numel(W) / output channels products
            return 2 * _elements(out, dims) * (_elements(w, dims) // max(_eval(out.shape[1], dims), 1))
        a = reads[0]
        k = _eval(a.shape[-1], dims) if a.shape else 1
        return 2 * _elements(out, dims) * k
    if op_type in ATTENTION_OPS:
        # T: the longest key axis of a rank-4 K/V tensor ([batch, kv heads, T, head size]).
        lengths = [_eval(t.shape[2], dims) for t in (*reads, *writes) if len(t.shape) == 4]
        q = reads[0]  # [batch, S, heads · head size]: one dot of length D per (query, key) pair, twice
        return 4 * _elements(q, dims) * (max(lengths) if lengths else 1)
    return 0


def _fused_attention_flops(model: CompiledModel, live: list[Dispatch], reads: list[TensorInfo],
                           writes: list[TensorInfo], dims: Mapping[str, int]) -> int:
    """FusedAttention (operators/attention/fused.py): its q and y hold B·H·S·D and B·H·S·DV
    elements in whatever layout (views); each of the T keys costs a dot of D and a multiply-add
    of DV per query row, T read off the kernels' param of that name (baked or an immediate), or
    in the products alternative off its softmax's row length (rownorm's K)."""
    if not reads or not writes:
        return 0
    for d in live:
        spec = model.shaders[d.shader]
        values = {p.name: v for p, v in (*spec.constants, *zip(spec.immediates, d.immediates))}
        keys = values.get("T", values.get("K") if spec.label == "rownorm_softmax" else None)
        if keys is not None:
            return 2 * _eval(keys, dims) * (_elements(reads[0], dims) + _elements(writes[0], dims))
    return 0


def replayed_steps(steps: Sequence[Step], dims: Mapping[str, int], choices: Mapping[int, int] | None = None,
                   adapter: AdapterFacts = AdapterFacts()) -> list[Step]:
    """`walk_steps` with each Select replaced by the alternative a run replays: `choices[id(step)]`
    where given (PlanReplay.select_choices), else the heuristic's at `dims` on `adapter`."""
    out: list[Step] = []
    for s in steps:
        if isinstance(s, Select):
            index = (choices or {}).get(id(s))
            chosen = s.alternatives[s.choose(dims, adapter) if index is None else index]
            out.extend(replayed_steps(chosen.steps, dims, choices, adapter))
        else:
            out.append(s)
            out.extend(replayed_steps(s.children(), dims, choices, adapter))
    return out


def _rows_bytes(t: TensorInfo, env: Mapping[str, int], rows: int, axis: int = 0) -> int:
    """Bytes of at most `rows` of a tensor's rows along `axis`."""
    total = _eval(t.shape[axis], env)
    full = tensor_bytes(t, env)
    return full if total <= rows else full * rows // max(total, 1)


def _kv_bytes(t: TensorInfo, env: Mapping[str, int], rows: int) -> int:
    """Bytes of at most `rows` rows (dim 2) of a rank-4 cache tensor."""
    return _rows_bytes(t, env, rows, axis=2)


def plan_cost(model: CompiledModel, dims: Mapping[str, int] | None = None,
              choices: Mapping[int, int] | None = None, kv: KvRows | None = None,
              adapter: AdapterFacts = AdapterFacts()) -> PlanCost:
    """The cost of one run of `model` at `dims` (default: the dims it was compiled for), with the
    Select alternatives `choices` picks (default: the heuristic's on `adapter`); `kv`: the KV
    cache rows attention touches (default: whole tensors)."""
    env = {**model.dims, **(dims or {})}
    tensors = model.tensors
    out: list[DispatchCost] = []
    weight_reads: dict[str, int] = {}
    copies = 0
    for op in model.operations:
        steps = replayed_steps(op.steps, env, choices, adapter)
        own: list[tuple[Dispatch, bool]] = []
        for s in steps:
            if isinstance(s, CopyBuffer):
                copies += 2 * _eval(s.size, env)
            for d in s.dispatches():
                own.append((d, all(_eval(w, env) > 0 for w in d.workgroups)))
        written_names = dict.fromkeys(b.tensor for d, live in own if live for b in d.bindings if not b.read_only)
        ext_reads = dict.fromkeys(b.tensor for d, live in own if live for b in d.bindings
                                  if b.read_only and b.tensor not in written_names and b.tensor not in op.scratch)
        ext_writes = [tensors[n] for n in written_names if n not in op.scratch and n != STATUS_TENSOR]
        op_flops = _op_flops(op.op_type, [tensors[n] for n in ext_reads], ext_writes, env)
        if op.op_type in FUSED_ATTENTION_OPS:
            op_flops = _fused_attention_flops(model, [d for d, live in own if live],
                                              [tensors[n] for n in ext_reads], ext_writes, env)
        cache_op = kv is not None and op.op_type in ATTENTION_OPS
        costs: list[list] = []
        for d, live in own:
            read = written = elements = 0
            for b in d.bindings:
                if b.tensor != STATUS_TENSOR and not b.read_only:
                    t = tensors[b.tensor]
                    in_place = cache_op and len(t.shape) == 4 and t.alias_of is not None
                    written += _kv_bytes(t, env, kv.written) if in_place else tensor_bytes(t, env)  # type: ignore
                    elements += _elements(t, env)
            for b in d.bindings:
                if b.read_only:
                    t = tensors[b.tensor]
                    if cache_op and len(t.shape) == 4:
                        nbytes = _kv_bytes(t, env, kv.read)  # type: ignore[union-attr]
                    elif cache_op and len(t.shape) == 2 and t.kind == "weight":
                        # rotary cos/sin caches [positions, rotary dim / 2]: the new tokens' rows
                        nbytes = _rows_bytes(t, env, kv.written)  # type: ignore[union-attr]
                    else:
                        nbytes = tensor_bytes(t, env)
                    # A gather reads only the rows it copies: at most what it writes.
                    gather = op.op_type in GATHER_OPS or model.shaders[d.shader].label in GATHER_SHADERS
                    nbytes = min(nbytes, written) if gather else nbytes
                    nbytes = min(nbytes, _window_bytes(model.shaders[d.shader], d, b, t, elements, env))
                    read += nbytes
                    if live and t.kind == "weight":
                        weight_reads[b.tensor] = max(weight_reads.get(b.tensor, 0), nbytes)
            costs.append([op.name, op.op_type, model.shaders[d.shader].label, read, written, elements, live])
        live_costs = [c for c in costs if c[6]]
        if op_flops and live_costs:
            main = max(live_costs, key=lambda c: c[3])
            main[5] = op_flops
        out.extend(DispatchCost(*c) for c in costs)
    return PlanCost(dict(env), tuple(out), copies, weight_reads)


@dataclass(frozen=True)
class MemoryPeak:
    peak_bytes: int  # most activation buffer bytes in use at once (a shared buffer: all its tensors' uses)
    allocated_bytes: int  # activation buffers the memory plan allocates (shared ones once)
    buffers: int
    # Most activation bytes live at once by tensor lifetimes, at the compile dims (planning's
    # figure, before buffers are shared: the floor an ideal allocator reaches); None: not recorded.
    planned_peak: int | None = None


def activation_memory(model: CompiledModel, dims: Mapping[str, int] | None = None) -> MemoryPeak:
    """Peak activation memory over the plan's operations, and what the memory plan allocates.

    Activations are intermediate and scratch buffers (not weights, inputs or outputs); a buffer
    is in use from the operation that first uses it to the one that last does (a buffer that
    several tensors share: from the first use of any to the last).
    """
    env = {**model.dims, **(dims or {})}
    tensors = model.tensors
    roots = {n: t for n, t in tensors.items()
             if t.alias_of is None and t.kind in REUSABLE_KINDS and t.data is None}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, op in enumerate(model.operations):
        for s in walk_steps(op.steps):
            for name, _ in s.uses():
                r = tensors[name].alias_of or name if name in tensors else name
                if r in roots:
                    first.setdefault(r, i)
                    last[r] = i
    size = {r: tensor_bytes(t, env) for r, t in roots.items()}
    delta = [0] * (len(model.operations) + 1)
    for r in first:
        delta[first[r]] += size[r]
        delta[last[r] + 1] -= size[r]
    peak = live = 0
    for d in delta:
        live += d
        peak = max(peak, live)
    order = model.metadata.get("order")
    planned = int(order["peak_after"]) if isinstance(order, dict) and "peak_after" in order else None
    return MemoryPeak(peak, sum(size.values()), len(roots), planned)


@dataclass(frozen=True)
class DecodeCost:
    """One decode step of a decoder (sequence length 1) against what it must read."""

    dims: dict[str, int]
    plan_bytes: int  # what the plan moves in the step
    weight_bytes: int  # every weight the plan holds
    kv_bytes: int  # the past KV cache's valid rows, read by attention (at most the past inputs)
    # The weights a step reads, each once: all of a matrix, the rows gathered of a table (the
    # token embedding), the new positions' rows of rotary caches (PlanCost.weight_reads).
    weight_read_bytes: int = -1

    @property
    def required_bytes(self) -> int:
        """What a decode step cannot avoid moving: the weights it reads and the valid KV rows."""
        weights = self.weight_bytes if self.weight_read_bytes < 0 else self.weight_read_bytes
        return weights + self.kv_bytes

    @property
    def ratio(self) -> float:
        """Plan traffic over the bytes a decode step cannot avoid (1.0: nothing else moves)."""
        return self.plan_bytes / max(self.required_bytes, 1)


def _symbol(d: Dim) -> str | None:
    symbols = getattr(d, "symbols", frozenset())
    return next(iter(symbols)) if len(symbols) == 1 and str(d) in symbols else None


def past_inputs(model: CompiledModel) -> list[str]:
    """The inputs holding a past KV cache (past_key_values.*, past_key_*, ...), rank 4."""
    return [n for n in model.inputs if n.lower().startswith("past") and len(model.tensors[n].shape) == 4]


def decode_cost(model: CompiledModel) -> DecodeCost | None:
    """The decode step's cost, for a model with past KV inputs (None otherwise).

    The step: the sequence symbol (input_ids' last axis) set to 1, the past length as compiled,
    a total-length symbol (the attention mask's last axis, when it is a symbol of its own) set to
    past + 1. Attention reads the cache's valid rows (at most `total` of them) and writes a
    shared buffer's new row only (KvRows); the KV read is those valid rows of the past inputs.
    """
    pasts = past_inputs(model)
    ids = next((n for n in model.inputs if "input_ids" in n or n == "inputs_embeds"), None)
    if not pasts or ids is None or len(model.tensors[ids].shape) < 2:
        return None
    seq = _symbol(model.tensors[ids].shape[1])
    if seq is None:
        return None
    dims = {**model.dims, seq: 1}
    past = _symbol(model.tensors[pasts[0]].shape[2])
    total_len = (dims[past] if past else _eval(model.tensors[pasts[0]].shape[2], dims)) + 1
    mask = next((n for n in model.inputs if "attention_mask" in n), None)
    if mask is not None and len(model.tensors[mask].shape) >= 2:
        total = _symbol(model.tensors[mask].shape[-1])
        if total is not None and total not in (seq, past):
            dims[total] = total_len
    cost = plan_cost(model, dims, kv=KvRows(read=total_len, written=1))
    weights = sum(tensor_bytes(t, dims) for t in model.tensors.values() if t.kind == "weight")
    kv = sum(_kv_bytes(model.tensors[n], dims, total_len) for n in pasts)
    return DecodeCost(dims, cost.bytes, weights, kv, sum(cost.weight_reads.values()))


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def cost_summary(model: CompiledModel) -> list[str]:
    """`onyxia compile`'s cost lines: traffic per run, peak activations, decode-step traffic."""
    cost = plan_cost(model)
    memory = activation_memory(model)
    lines = [
        f"bytes per run:    {fmt_bytes(cost.bytes)} moved by {len(cost.live)} dispatches at the dims given "
        f"({cost.flops / 1e6:.3g} Mflop)",
        f"peak activations: {fmt_bytes(memory.peak_bytes)} of buffers in use at once, "
        + (f"{fmt_bytes(memory.planned_peak)} of tensors live at once, " if memory.planned_peak is not None else "")
        + f"{fmt_bytes(memory.allocated_bytes)} allocated in {memory.buffers} buffers",
    ]
    step = decode_cost(model)
    if step is not None:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(step.dims.items()) if not k.startswith("onyxia_"))
        lines += [
            f"decode step:      {fmt_bytes(step.plan_bytes)} moved ({shown})",
            f"decode traffic:   {step.ratio:.3f} x (weights read {fmt_bytes(step.weight_read_bytes)} of "
            f"{fmt_bytes(step.weight_bytes)} + KV read {fmt_bytes(step.kv_bytes)}); 1.0 moves nothing else",
        ]
    return lines
