"""A decoder folder compiled as LlmSession compiles it, without a GPU (`onyxia compile FOLDER`).

Mirrors LlmSession's setup: fixed dims from the config, the shared-buffer attribute, the
last-token head, buffers sized for the longest generation. (LlmSession could build on this;
kept separate so the session's own setup is untouched.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from onyxia.compiler import CompilerPipeline
from onyxia.errors import DimensionError
from onyxia.llm.hf_config import load_model_config
from onyxia.llm.io import DecoderIO, bind_decoder_io, write_fixed_dims
from onyxia.llm.ops import LOGITS_GATE, add_last_token_head, register_llm_operators, restrict_logits_rows
from onyxia.onnx import load_model
from onyxia.operators import core_operator_registry
from onyxia.operators.attention import DOMAIN as MS_DOMAIN
from onyxia.operators.attention import SHARE_BUFFER_ATTR
from onyxia.plan import CompiledModel


def compile_decoder(model_dir: str | Path, max_length: int | None = None,
                    progress: Callable | None = None) -> tuple[CompiledModel, DecoderIO]:
    config = load_model_config(model_dir)
    context = config.context_length
    length = max_length if max_length is not None else config.search.max_length or context
    if not isinstance(length, int) or isinstance(length, bool) or not 2 <= length <= context:
        raise DimensionError(f"max_length must be an integer in [2, {context}], got {length!r}")
    graph = load_model(config.model_path)
    io = bind_decoder_io(graph, config, length)
    write_fixed_dims(graph, io)
    if config.search.past_present_share_buffer:
        for node in graph.nodes:
            if node.op_type == "GroupQueryAttention" and node.domain == MS_DOMAIN:
                node.attributes[SHARE_BUFFER_ATTR] = 1
    gate = restrict_logits_rows(graph, config.decoder.logits)
    add_last_token_head(graph, config.decoder.logits)
    capacity = {io.sequence: length}
    if gate:
        capacity[LOGITS_GATE] = 1
    if io.past:
        capacity[io.past] = length
    if io.total:
        capacity[io.total] = length
    if io.batch:
        capacity[io.batch] = 1
    pipeline = CompilerPipeline(register_llm_operators(core_operator_registry()))
    compiled = pipeline.compile(graph, capacity, static=[io.batch] if io.batch else [], progress=progress)
    return compiled, io
