"""LLM sessions for decoder-only models in onnxruntime-genai's folder layout.

A folder holds genai_config.json, the decoder (model.onnx + external data) and tokenizer.json.
`LlmSession` compiles the decoder once and decodes by changing dimensions, with the KV cache
kept on the GPU and greedy token choice made there.
"""

from onyxia.llm.config import DecoderConfig, GenaiConfig, SearchConfig, load_genai_config, load_tokenizer
from onyxia.llm.sampling import SamplingParams
from onyxia.llm.session import GenerationStats, LlmSession, StepOutput

__all__ = ["DecoderConfig", "GenaiConfig", "GenerationStats", "LlmSession", "SamplingParams", "SearchConfig",
           "StepOutput", "load_genai_config", "load_tokenizer"]
