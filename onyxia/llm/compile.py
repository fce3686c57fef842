"""A decoder folder's graph prepared and compiled for generation: what LlmSession runs and
`onyxia compile FOLDER` prints (no GPU needed).

Fixed dims come from the config, GroupQueryAttention gets the shared-buffer attribute where the
folder asks for one, the lm_head projects only the rows whose logits are read (LastRows), the
last-token head picks the next token on the GPU, and buffers are sized for the longest
generation: prefill steps of up to `prefill_length` tokens (a longer prompt runs in chunks) and
`cache_rows` of cache (LlmSession starts small and grows it by capacity steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from onyxia.compiler import CompilerPipeline
from onyxia.errors import DimensionError
from onyxia.llm.config import GenaiConfig
from onyxia.llm.hf_config import load_model_config
from onyxia.llm.io import DecoderIO, bind_decoder_io, take_cache_branch, write_fixed_dims
from onyxia.llm.ops import LOGITS_GATE, add_last_token_head, register_llm_operators, restrict_logits_rows
from onyxia.onnx import load_model
from onyxia.operators import OperatorRegistry, core_operator_registry
from onyxia.operators.attention.gqa import DOMAIN as MS_DOMAIN
from onyxia.operators.attention.gqa import SHARE_BUFFER_ATTR
from onyxia.plan import CompiledModel

Report = Callable[[str, int, int], None]  # (phase, done, total)

# Tokens per prefill step by default: onnxruntime-genai and llama.cpp prefill in chunks of a few
# hundred tokens too; activations (e.g. a [512, 3 * hidden] QKV projection) stay far below
# WebGPU's 128 MiB binding limit for the models we run, whatever max_length is.
PREFILL_CHUNK = 512
KV_INITIAL_ROWS = 1024  # cache rows on load (the session doubles them as a generation needs more)


@dataclass(frozen=True)
class CompiledDecoder:
    compiled: CompiledModel
    io: DecoderIO
    logits_gate: bool  # the plan has LOGITS_GATE: logits for every position only when asked


def max_length_for(config: GenaiConfig, requested: int | None) -> int:
    """The generation length: `requested`, else the config's search.max_length, else its context."""
    context = config.context_length
    value = requested if requested is not None else config.search.max_length or context
    if isinstance(value, bool) or not isinstance(value, int) or value < 2:
        raise DimensionError(f"max_length must be an integer >= 2, got {value!r}")
    if value > context:
        raise DimensionError(f"max_length {value} exceeds the model's context_length {context} ({config.path})")
    return value


def initial_cache_rows(max_length: int, prefill_length: int) -> int:
    """Rows of KV cache allocated on load: what a first chunk and some decoding use, not max_length
    (a 32k-context folder would reserve 32k rows per layer for a short chat); the session grows it."""
    return min(max_length, max(KV_INITIAL_ROWS, 2 * prefill_length))


def compile_decoder(config: GenaiConfig, max_length: int, *, prefill_length: int | None = None,
                    cache_rows: int | None = None, registry: OperatorRegistry | None = None,
                    report: Report | None = None) -> CompiledDecoder:
    report = report or (lambda phase, done, total: None)
    report("reading model", 0, 1)
    graph = load_model(config.model_path)
    report("reading model", 1, 1)
    take_cache_branch(graph)
    io = bind_decoder_io(graph, config, max_length)
    write_fixed_dims(graph, io)
    if config.search.past_present_share_buffer:
        # GroupQueryAttention cannot tell the layouts apart from the graph (onnxruntime
        # compares buffer pointers); onyxia's kernel takes it as a node attribute.
        for node in graph.nodes:
            if node.op_type == "GroupQueryAttention" and node.domain == MS_DOMAIN:
                node.attributes[SHARE_BUFFER_ATTR] = 1
    # The lm_head runs for the last position only unless a forward pass asks for all logits.
    gate = restrict_logits_rows(graph, config.decoder.logits)
    add_last_token_head(graph, config.decoder.logits)
    # Buffers sized for a prefill chunk and `cache_rows` of cache (default: max_length); LlmSession
    # grows the cache by capacity steps, so decoding reallocates a few times at most.
    chunk = min(prefill_length or PREFILL_CHUNK, max_length)
    rows = min(cache_rows or max_length, max_length)
    capacity = {io.sequence: chunk}
    if io.past:
        capacity[io.past] = rows
    if io.total:
        capacity[io.total] = rows
    if io.batch:
        capacity[io.batch] = 1
    if gate:
        # Sized for generation (the last position's logits): a forward pass asking for every
        # position's grows the logits buffers then (a 262144-token vocabulary at 512 positions
        # would need 512 MiB, over WebGPU's 128 MiB binding limit, for nothing).
        capacity[LOGITS_GATE] = 0
    registry = register_llm_operators(registry or core_operator_registry())
    report("compiling", 0, 1)
    compiled = CompilerPipeline(registry).compile(graph, capacity, static=[io.batch] if io.batch else [],
                                                  progress=lambda record, done, total: report("compiling", done, total))
    return CompiledDecoder(compiled, io, gate)


def compile_folder(model_dir: str | Path, max_length: int | None = None,
                   report: Report | None = None, decoder: str | None = None) -> CompiledDecoder:
    """`model_dir` compiled as LlmSession(model_dir, max_length, decoder=decoder) compiles it."""
    config = load_model_config(model_dir, decoder)
    return compile_decoder(config, max_length_for(config, max_length), report=report)
