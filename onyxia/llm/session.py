"""LlmSession: prefill a prompt, then decode token by token with one compiled plan.

The decoder is compiled once, for capacities (a prefill chunk, and a KV cache of some rows that
grows by doubling up to `max_length` as a generation needs them: a 32k-context folder does not
reserve 32k rows per layer on load). Each forward pass only changes dimensions
(`update_dimensions`: sequence length, past and total length), so nothing recompiles, and
buffers are reallocated only when the cache grows (a few times per long generation). The KV cache never leaves the
GPU: each present tensor goes back in as the next step's past as a DeviceTensor (a GPU copy,
or none at all when the attention kernel writes present into the past buffer). Greedy decoding
reads back one token id per step (the argmax runs on the GPU, see ops.LastToken); sampling
reads back the last position's logits.

Cache layouts (genai_config.json search.past_present_share_buffer):
  false: past holds the `past` tokens seen so far and present `past + new` — a growing cache.
  true:  past and present are both `cache_rows` long (the cache's current capacity); attention
         writes only the new positions
         (onnxruntime's GroupQueryAttention semantics: present length = max(past, total)).
  A layer whose GroupQueryAttention has sliding_window_cache = 1 keeps a window-sized cache
  instead (past and present `window_capacity` rows, the operator evicts), whatever the above.

Folders: onnxruntime-genai's (genai_config.json) or Optimum's (config.json; names from the graph).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from onyxia.errors import ConfigError, DimensionError, InputError
from onyxia.ir.shapes import SymDim
from onyxia.llm.compile import PREFILL_CHUNK, compile_decoder, initial_cache_rows, max_length_for
from onyxia.llm.config import GenaiConfig, load_tokenizer
from onyxia.llm.hf_config import load_model_config
from onyxia.llm.io import DecoderIO
from onyxia.llm.ops import LAST_LOGITS, LOGITS_GATE, NEXT_TOKEN
from onyxia.llm.sampling import Sampler, SamplingParams
from onyxia.operators import OperatorRegistry
from onyxia.plan.cost import replayed_steps
from onyxia.runtime.tensor import DeviceTensor


@dataclass(frozen=True)
class StepOutput:
    """One forward pass: the greedy next token and, when asked for, logits read back."""

    token: int  # argmax of the last position, computed on the GPU
    last_logits: np.ndarray | None = None  # [vocab] of the last position
    logits: np.ndarray | None = None  # [sequence, vocab], every position (tests, debugging)


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_tokens: int = 0  # forward passes after the prefill
    decode_seconds: float = 0.0

    @property
    def decode_tokens_per_second(self) -> float:
        return self.decode_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0


@dataclass
class _Cache:
    # Per past input: the present DeviceTensor of the previous step, or None before a prefill.
    feeds: dict[str, DeviceTensor | None] = field(default_factory=dict)
    length: int = 0  # tokens in the cache


class LlmSession:
    """A decoder-only LLM in onnxruntime-genai's folder layout, on the GPU.

        session = LlmSession("phi3-mini-int4")
        ids = session.encode("The capital of France is")
        print(session.decode(session.generate(ids, max_new_tokens=16)))

    max_length: prompt + generated tokens at most (default: search.max_length, else the
        model's context_length); the KV cache is allocated for it.
    runtime: the onyxia Runtime (wgpu device) to use; a new one by default.
    registry: operators to compile with (default: the core registry); the session adds its own.
    prefill_length: the prefill chunk (default: PREFILL_CHUNK tokens, at most max_length): a
        longer prompt runs as several prefill steps over the growing cache, so activation
        buffers are sized by the chunk, never by max_length.
    progress: `progress(phase, done, total)` as setup moves through its phases ("reading model",
        "compiling" pass by pass, "uploading weights"); the CLI draws it on a terminal.
    cache_rows: KV cache rows allocated on load (default: initial_cache_rows, e.g. 1024); the
        session doubles them, up to max_length, when a generation needs more.
    decoder: the ONNX file to run when the folder has several (transformers.js' onnx/model_q4.onnx,
        model_fp16.onnx, ...): a file inside the folder or a dtype name (fp16, q8, q4, q4f16, bnb4, ...).
    """

    def __init__(self, model_dir: str | Path, max_length: int | None = None, *, runtime=None,
                 registry: OperatorRegistry | None = None, prefill_length: int | None = None,
                 progress: Callable[[str, int, int], None] | None = None, decoder: str | None = None,
                 cache_rows: int | None = None):
        report = progress or (lambda phase, done, total: None)
        self.model_dir = Path(model_dir)
        self.config: GenaiConfig = load_model_config(self.model_dir, decoder)
        self.tokenizer = load_tokenizer(self.model_dir)
        self.max_length = max_length_for(self.config, max_length)
        if prefill_length is not None and (isinstance(prefill_length, bool) or not isinstance(prefill_length, int)
                                           or prefill_length < 1):
            raise InputError(f"prefill_length must be an integer >= 1, got {prefill_length!r}")
        # A prompt runs in chunks of this many tokens (activations are sized by the chunk).
        self.prefill_length = min(prefill_length or PREFILL_CHUNK, self.max_length)
        self.share_buffer = self.config.search.past_present_share_buffer
        start = time.perf_counter()
        if cache_rows is not None and (isinstance(cache_rows, bool) or not isinstance(cache_rows, int)
                                       or cache_rows < 1):
            raise InputError(f"cache_rows must be an integer >= 1, got {cache_rows!r}")
        # KV cache rows allocated now; doubled (up to max_length) when a generation needs more.
        self.cache_rows = min(cache_rows, self.max_length) if cache_rows else \
            initial_cache_rows(self.max_length, self.prefill_length)
        decoder = compile_decoder(self.config, self.max_length, prefill_length=self.prefill_length,
                                  cache_rows=self.cache_rows,
                                  registry=registry, report=report)
        self.compiled = decoder.compiled
        self.io: DecoderIO = decoder.io
        self._logits_gate = decoder.logits_gate
        self.compile_seconds = time.perf_counter() - start
        if runtime is None:
            from onyxia.runtime import Runtime

            runtime = Runtime()
        self.runtime = runtime
        report("uploading weights", 0, 1)
        self.executor = runtime.load_model(self.compiled)
        report("uploading weights", 1, 1)
        self._check_cache_layout()
        self.stats = GenerationStats()
        self.reset()

    # ---- setup ----------------------------------------------------------------------------
    def _check_cache_layout(self) -> None:
        """With a shared buffer, present must have past's shape (cache_rows long)."""
        tensors = self.compiled.tensors
        if not self.share_buffer:
            return
        for past, present in self.io.kv:
            if past not in self.io.windowed and tensors[present].shape != tensors[past].shape:
                raise ConfigError(
                    f"{self.config.path}: search.past_present_share_buffer is true, but the compiled "
                    f"'{present}' has shape {[str(d) for d in tensors[present].shape]}, not past's "
                    f"{[str(d) for d in tensors[past].shape]} (the attention operator does not share the buffer)")

    # ---- text -----------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    # ---- forward passes -------------------------------------------------------------------
    @property
    def cache_length(self) -> int:
        return self._cache.length

    @property
    def dispatches_per_step(self) -> int:
        """Dispatches a decode step runs (kernels whose grid is empty at one token are skipped;
        of a Select's alternatives the one replayed now, or the heuristic's)."""
        io, cached = self.io, self.cache_rows // 2
        dims = {**self.executor.dims, io.sequence: 1}
        if io.past:
            dims[io.past] = self.cache_rows if self.share_buffer else cached
        if io.total:
            dims[io.total] = cached + 1
        steps = replayed_steps([s for op in self.compiled.operations for s in op.steps], dims,
                               self.executor.select_choices(), self.executor.adapter_facts)
        return sum(all(d.evaluate(dims) if isinstance(d, SymDim) else d for d in dispatch.workgroups)
                   for step in steps for dispatch in step.dispatches())

    def reset(self) -> None:
        """Forget the cache: the next forward pass is a prefill."""
        self._cache = _Cache({past: None for past, _ in self.io.kv}, 0)

    def _past_feed(self, past: str) -> np.ndarray | DeviceTensor:
        value = self._cache.feeds[past]
        if value is not None:
            return value
        if self.share_buffer or past in self.io.windowed:
            # The buffer as it is: attention never reads positions past the current length.
            return self.executor.device_tensor(past)
        return np.zeros(self.executor.input_shape(past), self.io.dtypes[past])  # 0 rows: no upload

    @property
    def device_bytes(self) -> int:
        """Bytes of device memory the session's buffers hold now (weights, activations, cache)."""
        return sum(self.executor.capacity.values())

    def _grow_cache(self, rows: int) -> None:
        """Make room for `rows` cache rows: double the capacity (at most max_length) and regrow
        the buffers it sizes. The cache so far is read back first and fed again as host arrays
        (a regrown buffer starts empty; a shared-buffer cache also changes its row stride), so
        this costs one read of the cache per doubling, a handful of times in a long generation."""
        io = self.io
        new = min(self.max_length, max(rows, 2 * self.cache_rows))
        kept: dict[str, np.ndarray | DeviceTensor | None] = {}
        for past, value in self._cache.feeds.items():
            if value is None or past in io.windowed:
                kept[past] = value  # window-sized caches do not depend on the capacity
                continue
            host = self.executor.read_tensor(value) if isinstance(value, DeviceTensor) else value
            if self.share_buffer:  # [batch, heads, rows, head size]: the rows written so far
                host = host[:, :, :self._cache.length]
                pad = [(0, 0)] * host.ndim
                pad[2] = (0, new - host.shape[2])
                host = np.pad(host, pad)
            kept[past] = host
        # Grow every buffer the capacity sizes once, for the largest step it can take.
        grow = {io.sequence: self.prefill_length}
        if io.past:
            grow[io.past] = new if self.share_buffer else max(new - self.prefill_length, 0)
        if io.total:
            grow[io.total] = new
        self.executor.update_dimensions(grow)
        self.cache_rows = new
        self._cache = _Cache(kept, self._cache.length)

    def _token_array(self, ids: Sequence[int]) -> np.ndarray:
        """`ids` as a [1, n] int64 array, each checked against the vocabulary."""
        if len(ids) == 0:
            raise InputError("no token ids given: a forward pass needs at least one")
        vocab = self.config.vocab_size
        array = np.asarray(ids, dtype=np.int64).reshape(1, len(ids))
        if array.min() < 0 or array.max() >= vocab:
            bad = int(array[(array < 0) | (array >= vocab)][0])
            raise InputError(f"token id {bad} is outside the vocabulary (0..{vocab - 1})")
        return array

    def forward(self, ids: Sequence[int], *, last_logits: bool = False, logits: bool = False) -> StepOutput:
        """Run `ids` (the prompt, or one new token) on top of the cache; returns the next token.

        `last_logits` reads back the last position's logits (sampling); `logits` every
        position's (tests). Greedy decoding needs neither: the token is picked on the GPU.
        More than `prefill_length` ids run as several steps of at most that many, each on top of
        the cache the previous one left.
        """
        array = self._token_array(ids)
        past_len, total = self._cache.length, self._cache.length + array.shape[1]
        if total > self.max_length:
            raise DimensionError(f"{total} tokens exceed max_length {self.max_length} "
                                 f"({past_len} cached + {array.shape[1]} new)")
        chunk = self.prefill_length
        parts = [array[:, start:start + chunk] for start in range(0, array.shape[1], chunk)]
        steps = [self._step(part, last_logits=last_logits and i == len(parts) - 1, logits=logits)
                 for i, part in enumerate(parts)]
        every = np.concatenate([s.logits for s in steps]) if logits else None  # type: ignore[misc]
        return StepOutput(steps[-1].token, steps[-1].last_logits, every)

    def _step(self, array: np.ndarray, *, last_logits: bool, logits: bool) -> StepOutput:
        """One forward pass of a [1, n] token array, n <= prefill_length."""
        io, n = self.io, array.shape[1]
        past_len, total = self._cache.length, self._cache.length + n
        if total > self.cache_rows:
            self._grow_cache(total)
        dims = {io.sequence: n}
        if io.past:
            dims[io.past] = self.cache_rows if self.share_buffer else past_len
        if io.total:
            dims[io.total] = total
        if self._logits_gate:
            dims[LOGITS_GATE] = int(logits)
        self.executor.update_dimensions(dims)

        feeds: dict[str, object] = {io.input_ids: array.astype(io.dtypes[io.input_ids])}
        if io.mask:
            feeds[io.mask] = np.ones((1, total), io.dtypes[io.mask])
        if io.positions:
            feeds[io.positions] = np.arange(past_len, total).reshape(1, n).astype(io.dtypes[io.positions])
        for past, _ in io.kv:
            feeds[past] = self._past_feed(past)
        logits_name = self.config.decoder.logits
        readback = [NEXT_TOKEN] + ([LAST_LOGITS] if last_logits else []) + ([logits_name] if logits else [])
        out = self.executor.run(feeds, outputs=readback, device_outputs=[present for _, present in io.kv])
        self._cache = _Cache({past: out[present] for past, present in io.kv}, total)  # type: ignore[misc]
        return StepOutput(int(out[NEXT_TOKEN][0]),
                          out[LAST_LOGITS][0] if last_logits else None,  # type: ignore[index]
                          out[logits_name][0] if logits else None)  # type: ignore[index]

    # ---- generation -----------------------------------------------------------------------
    def stream(self, ids: Sequence[int], max_new_tokens: int = 128, temperature: float = 0.0, top_k: int = 0,
               top_p: float = 1.0, seed: int | None = None, eos_token_id: int | Sequence[int] | None = None
               ) -> Iterator[int]:
        """Yield new token ids one by one; stops after an EOS token (yielded) or max_new_tokens."""
        params = SamplingParams(temperature, top_k, top_p, seed)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise InputError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
        prompt = self._token_array(ids)[0].tolist()
        if len(prompt) >= self.max_length:
            raise DimensionError(
                f"the prompt has {len(prompt)} tokens; max_length {self.max_length} (the model's context_length "
                f"is {self.config.context_length}) leaves room for at most {self.max_length - 1} prompt tokens")
        eos = set(self.config.eos_token_ids if eos_token_id is None else
                  ([eos_token_id] if isinstance(eos_token_id, int) else eos_token_id))
        # genai's max_length bounds prompt + generated tokens.
        budget = min(max_new_tokens, self.max_length - len(prompt))
        return self._generate(prompt, budget, params, eos)

    def _generate(self, prompt: list[int], budget: int, params: SamplingParams, eos: set[int]) -> Iterator[int]:
        sampler = Sampler(params)
        self.reset()
        self.stats = GenerationStats(prompt_tokens=len(prompt))
        if budget == 0:
            return
        start = time.perf_counter()
        step = self.forward(prompt, last_logits=not params.greedy)
        self.stats.prefill_seconds = time.perf_counter() - start
        decode_start = time.perf_counter()
        for produced in range(1, budget + 1):
            token = step.token if params.greedy else sampler(step.last_logits)
            yield token
            if token in eos or produced == budget:
                break
            step = self.forward([token], last_logits=not params.greedy)
            self.stats.decode_tokens += 1
            self.stats.decode_seconds = time.perf_counter() - decode_start

    def generate(self, ids: Sequence[int], max_new_tokens: int = 128, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int | None = None, eos_token_id: int | Sequence[int] | None = None
                 ) -> list[int]:
        """The new token ids (EOS included when generation stopped on it)."""
        return list(self.stream(ids, max_new_tokens, temperature, top_k, top_p, seed, eos_token_id))

    def stream_text(self, prompt: str, max_new_tokens: int = 128, **sampling) -> Iterator[str]:
        """Encode `prompt`, generate, and yield decoded text pieces as they become complete."""
        from tokenizers.decoders import DecodeStream

        decoder = DecodeStream(skip_special_tokens=True)
        for token in self.stream(self.encode(prompt), max_new_tokens, **sampling):
            piece = decoder.step(self.tokenizer, token)
            if piece:
                yield piece

    def __repr__(self) -> str:
        return (f"LlmSession({str(self.model_dir)!r}, type={self.config.type}, max_length={self.max_length}, "
                f"{self.dispatches_per_step} dispatches per step)")
