"""The LLM session's own operators: the next token picked on the GPU, and logits computed only
for the position that needs them.

`LastToken` reads logits [batch, sequence, vocab] and writes the last position's row
([batch, vocab], for host-side sampling) and its argmax ([batch] int64, for greedy decoding).
`add_last_token_head` appends it to a decoder's graph before compiling, so greedy decoding
reads back one token id per step instead of the logits.

`LastRows` keeps the last R rows of [batch, sequence, hidden], R = 1 + (sequence - 1) * g for
the session symbol g = LOGITS_GATE (0 or 1). `restrict_logits_rows` puts it in front of the
lm_head (in front of the final norm feeding it, where there is one), so a prefill computes the
vocabulary projection for its last position only (g = 0: 14 prompt tokens cost one lm_head row
instead of 14) unless the caller asks for every position's logits (g = 1: R = sequence, the
graph's own logits). A decode step (sequence 1) has R = 1 either way.
"""

from __future__ import annotations

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.graph import IrGraph, TensorId, TensorKind
from onyxia.ir.shapes import Dim, Shape, SymDim
from onyxia.operators.base import InferenceCtx, Operator, PlanCtx
from onyxia.operators.indexing.indexing import plan_strided_copy
from onyxia.operators.registry import OperatorRegistry
from onyxia.plan import ALWAYS, Step, adapter

DOMAIN = "onyxia.llm"
LAST_TOKEN_CPU_MAX_VOCAB = 8 * 60_000  # the 8-thread variant's loop: V / 8 trips
LAST_LOGITS = "onyxia::last_logits"
NEXT_TOKEN = "onyxia::next_token"
# 1: logits for every position of a forward pass; 0: for its last position only.
LOGITS_GATE = "onyxia_all_logits"


class LastToken(Operator):
    op_type = "LastToken"
    domain = DOMAIN

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        shape, dtype = ctx.input_shape(0), ctx.input_dtype(0)
        if len(shape) != 3:
            raise ctx.fail(f"logits must be [batch, sequence, vocab], got rank {len(shape)}", 0)
        if not dtype.is_float:
            raise ctx.fail(f"logits must be floating point, got {dtype}", 0)
        return [(dtype, (shape[0], shape[2])), (dtypes.INT64, (shape[0],))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        batch, seq, vocab = ctx.input_shape(0)
        ctx.compute_type(ctx.input_dtype(0), "logits")
        # 8 threads on a CPU-type adapter (one SIMD batch of lavapipe: no barrier switches), where
        # their loop stays under its ~65,535-iteration cut; 256 elsewhere.
        def variant(wg: int) -> list[Step]:
            return [ctx.dispatch("llm/last_token.wgsl", label=f"llm/last_token_{wg}", defs={"WG": wg},
                                 params={"S": seq, "V": vocab}, reads={"logits": ctx.input(0)},
                                 writes={"last": ctx.output(0), "token": ctx.output(1)}, workgroups=(batch, 1, 1))]

        cpu_fits = isinstance(vocab, int) and vocab <= LAST_TOKEN_CPU_MAX_VOCAB
        return ctx.select("llm/last_token", [*([("cpu", variant(8), ALWAYS, adapter("cpu"))] if cpu_fits else []),
                                             ("gpu", variant(256), ALWAYS, ALWAYS)])


def kept_rows(seq: Dim) -> Dim:
    """Rows LastRows keeps of `seq`: all of them with LOGITS_GATE = 1, the last one with 0."""
    return 1 + (seq - 1) * SymDim.symbol(LOGITS_GATE)


class LastRows(Operator):
    """x [batch, sequence, hidden] -> its last kept_rows(sequence) rows."""

    op_type = "LastRows"
    domain = DOMAIN

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        shape = ctx.input_shape(0)
        if len(shape) != 3:
            raise ctx.fail(f"expected [batch, sequence, hidden], got rank {len(shape)}", 0)
        return [(ctx.input_dtype(0), (shape[0], kept_rows(shape[1]), shape[2]))]

    def plan(self, ctx: PlanCtx) -> list[Step]:
        batch, seq, hidden = ctx.input_shape(0)
        rows = kept_rows(seq)
        bits = ctx.input_dtype(0).require_bits()
        row_bytes = hidden * bits // 8 if isinstance(hidden, int) and hidden * bits % 32 == 0 else None
        if row_bytes is not None and ctx.env.value(batch) == 1 and ctx.env.assume_equal(batch, 1, ctx.node.name):
            # One contiguous run of whole words: a buffer copy, no dispatch (the runtime refuses
            # a batch other than 1 for this plan: the recorded assumption).
            return [ctx.copy(ctx.input(0), ctx.output(0), rows * row_bytes, (seq - rows) * row_bytes)]
        return plan_strided_copy(ctx, (batch, rows, hidden), (seq * hidden, hidden, 1), (seq - rows) * hidden)


def register_llm_operators(registry: OperatorRegistry) -> OperatorRegistry:
    """A copy of `registry` with the session's operators added."""
    return registry.copy().register(LastToken()).register(LastRows())


def add_last_token_head(graph: IrGraph, logits: str) -> tuple[str, str]:
    """Append LastToken over `logits` as two new graph outputs; returns their names."""
    if graph.tensor(logits).kind is TensorKind.WEIGHT:
        raise ValueError(f"logits tensor '{logits}' is a constant")
    graph.add_node("LastToken", [logits], [LAST_LOGITS, NEXT_TOKEN], domain=DOMAIN, name="onyxia::LastToken")
    for name in (LAST_LOGITS, NEXT_TOKEN):
        graph.tensor(name).kind = TensorKind.OUTPUT
        graph.outputs.append(name)
    return LAST_LOGITS, NEXT_TOKEN


# The vocabulary projection, and the elementwise ops exporters put after it (Gemma-2's softcap
# Div -> Tanh -> Mul, a Cast): each computes a position's logits from that position's row alone.
_PRODUCTS = {("", "MatMul"), ("com.microsoft", "MatMulNBits")}
_ROW_LOCAL = {"Cast", "Tanh", "Div", "Mul", "Add", "Sub", "Neg", "Sigmoid", "Softplus", "Identity"}


def _constant(graph: IrGraph, tid: TensorId, depth: int = 0) -> bool:
    """`tid` does not depend on any graph input (a weight, or computed from weights only)."""
    t = graph.tensor(tid)
    if t.kind is TensorKind.WEIGHT or t.value is not None:
        return True
    producer = graph.producer(tid)
    if producer is None or depth > 8:
        return False
    return all(i is None or _constant(graph, i, depth + 1) for i in graph.node(producer).inputs)


def _small_constant(graph: IrGraph, tid: TensorId) -> bool:
    """A constant that broadcasts along the last axis only (a scalar or a [vocab] row)."""
    t = graph.tensor(tid)
    return _constant(graph, tid) and (t.shape is None or len(t.shape) <= 1)


def restrict_logits_rows(graph: IrGraph, logits: str) -> bool:
    """Put LastRows in front of the product that computes `logits` (through row-local ops only),
    so the logits have kept_rows(sequence) rows. False, graph untouched: not that structure."""
    tid = logits
    while True:
        nid = graph.producer(tid)
        if nid is None:
            return False
        node = graph.node(nid)
        if (node.domain, node.op_type) in _PRODUCTS:
            break
        if node.domain != "" or node.op_type not in _ROW_LOCAL:
            return False
        path = [i for i in node.inputs if i is not None and not _small_constant(graph, i)]
        if len(path) != 1 or len(node.outputs) != 1:
            return False
        tid = path[0]
    if len(node.outputs) != 1 or not node.inputs or node.inputs[0] is None \
            or not all(i is None or _constant(graph, i) for i in node.inputs[1:]):
        return False
    hidden = node.inputs[0]
    norm = graph.producer(hidden)
    if norm is not None and _final_norm(graph, norm, hidden, nid):
        # In front of the final norm instead: it normalizes the kept rows only, and stays next
        # to the lm_head, whose int8 quantization it then makes (passes/quantize_sharing.py).
        target, positions = norm, (0, 1) if graph.node(norm).op_type.startswith("Skip") else (0,)
    else:
        target, positions = nid, (0,)
    inputs = list(graph.node(target).inputs)
    for k, i in enumerate(positions):
        kept = graph.fresh_name(f"{inputs[i]}/onyxia_last_rows")
        graph.add_node("LastRows", [inputs[i]], [kept], domain=DOMAIN, name=f"onyxia::LastRows{k or ''}")
        inputs[i] = kept
    graph.set_inputs(target, inputs)
    return True


_NORMS = {"SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "LayerNormalization",
          "SkipLayerNormalization", "RMSNormalization"}


def _final_norm(graph: IrGraph, nid, out: TensorId, reader) -> bool:
    """A norm over the last axis of [batch, sequence, hidden] rows (a skip norm: of both operands)
    whose output `out` only `reader` reads and whose other outputs nobody reads."""
    node = graph.node(nid)
    if node.op_type not in _NORMS or node.domain not in ("", "com.microsoft") or node.outputs[0] != out:
        return False
    if int(node.attributes.get("axis", -1)) not in (-1, 2) or out in graph.outputs:
        return False
    if graph.consumers(out) != [reader]:
        return False
    rows = node.inputs[:2] if node.op_type.startswith("Skip") else node.inputs[:1]
    if any(t is None or len(graph.tensor(t).shape or ()) != 3 for t in rows):
        return False
    return not any(t and (graph.consumers(t) or t in graph.outputs) for t in node.outputs[1:])
