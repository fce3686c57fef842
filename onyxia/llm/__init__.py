"""LLM sessions for decoder-only models in onnxruntime-genai's or Optimum's folder layout.

A folder holds genai_config.json (or Optimum's config.json), the decoder (model.onnx + external
data) and tokenizer.json.
`Seq2SeqSession` generates with optimum's encoder-decoder exports (Whisper, T5, BART).
`LlmSession` compiles the decoder once and decodes by changing dimensions, with the KV cache
kept on the GPU and greedy token choice made there.
"""

from onyxia.llm.config import (
    DecoderConfig,
    GenaiConfig,
    SearchConfig,
    SlidingWindowConfig,
    load_genai_config,
    load_tokenizer,
)
from onyxia.llm.hf_config import load_hf_config, load_model_config
from onyxia.llm.sampling import SamplingParams
from onyxia.llm.seq2seq import Seq2SeqSession
from onyxia.llm.session import GenerationStats, LlmSession, StepOutput

__all__ = ["DecoderConfig", "GenaiConfig", "GenerationStats", "LlmSession", "SamplingParams", "SearchConfig",
           "Seq2SeqSession", "SlidingWindowConfig", "StepOutput", "load_genai_config", "load_hf_config",
           "load_model_config", "load_tokenizer"]
