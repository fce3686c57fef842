"""The LLM session's own operator: the next token, picked on the GPU.

`LastToken` reads logits [batch, sequence, vocab] and writes the last position's row
([batch, vocab], for host-side sampling) and its argmax ([batch] int64, for greedy decoding).
`add_last_token_head` appends it to a decoder's graph before compiling, so greedy decoding
reads back one token id per step instead of the logits.
"""

from __future__ import annotations

from onyxia.ir import dtypes
from onyxia.ir.dtypes import DType
from onyxia.ir.graph import IrGraph, TensorKind
from onyxia.ir.shapes import Shape
from onyxia.operators.base import InferenceCtx, Operator, PlanCtx
from onyxia.operators.registry import OperatorRegistry
from onyxia.plan import Step

DOMAIN = "onyxia.llm"
LAST_LOGITS = "onyxia::last_logits"
NEXT_TOKEN = "onyxia::next_token"


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
        return [ctx.dispatch("llm/last_token.wgsl", params={"S": seq, "V": vocab},
                             reads={"logits": ctx.input(0)}, writes={"last": ctx.output(0), "token": ctx.output(1)},
                             workgroups=(batch, 1, 1))]


def register_llm_operators(registry: OperatorRegistry) -> OperatorRegistry:
    """A copy of `registry` with the session's operators added."""
    return registry.copy().register(LastToken())


def add_last_token_head(graph: IrGraph, logits: str) -> tuple[str, str]:
    """Append LastToken over `logits` as two new graph outputs; returns their names."""
    if graph.tensor(logits).kind is TensorKind.WEIGHT:
        raise ValueError(f"logits tensor '{logits}' is a constant")
    graph.add_node("LastToken", [logits], [LAST_LOGITS, NEXT_TOKEN], domain=DOMAIN, name="onyxia::LastToken")
    for name in (LAST_LOGITS, NEXT_TOKEN):
        graph.tensor(name).kind = TensorKind.OUTPUT
        graph.outputs.append(name)
    return LAST_LOGITS, NEXT_TOKEN
