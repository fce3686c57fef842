"""Seq2SeqSession: greedy encoder-decoder generation (Whisper, T5, BART) over optimum's layouts.

Folders (what `optimum-cli export onnx --task text2text-generation-with-past` or
`automatic-speech-recognition-with-past` writes; transformers.js keeps them under onnx/):
- encoder_model.onnx + decoder_model_merged.onnx: one decoder whose If on `use_cache_branch`
  holds the graphs without and with a cache; it runs as a run-time If (operators/control), the
  first step on the branch without a cache, later ones on the other, one plan for both;
- encoder_model.onnx + decoder_model.onnx + decoder_with_past_model.onnx: the same two graphs
  as two plans.
config.json gives decoder_start_token_id / eos_token_id (generation_config.json overrides them).

Every decoder step feeds one token (a prompt of several, Whisper's <|startoftranscript|>
<|en|> <|transcribe|> <|notimestamps|>, is fed token by token): each decoder is compiled once
with its batch and decoder length 1, for a cache of `max_length` positions, so a step only
changes dimensions and never grows a buffer. The encoder's states and every KV tensor stay on
the device (present -> the next step's past as a DeviceTensor; the cross-attention KV of the
first step for all later ones); the argmax runs on the device (ops.LastToken), so a step reads
back one token id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from onyxia.compiler import CompilerPipeline
from onyxia.compiler.passes.resolution import input_symbols
from onyxia.errors import ConfigError, InputError, ValueRequiredError
from onyxia.ir.graph import IrGraph
from onyxia.ir.shapes import SymDim
from onyxia.llm.audio import FeatureConfig, log_mel, read_wav
from onyxia.llm.config import load_tokenizer
from onyxia.llm.ops import NEXT_TOKEN, add_last_token_head, register_llm_operators
from onyxia.onnx import load_model
from onyxia.operators import core_operator_registry
from onyxia.paths import resolve_inside

CACHE_BRANCH = "use_cache_branch"
PAST, PRESENT = "past_key_values.", "present."


@dataclass(frozen=True)
class Seq2SeqLayout:
    """The files of a folder: the encoder, then the merged decoder or the two decoders."""

    encoder: Path
    merged: Path | None = None
    first: Path | None = None  # decoder_model.onnx: the first step, no cache
    with_past: Path | None = None  # decoder_with_past_model.onnx: every later step

    @classmethod
    def find(cls, folder: Path) -> Seq2SeqLayout:
        for base in (folder, folder / "onnx"):
            def file(name: str) -> Path | None:
                path = resolve_inside(base, name, f"{base}: {name}", ConfigError)
                return path if path.is_file() else None
            encoder = file("encoder_model.onnx")
            if encoder is None:
                continue
            if file("decoder_model_merged.onnx"):
                return cls(encoder, merged=file("decoder_model_merged.onnx"))
            if file("decoder_model.onnx") and file("decoder_with_past_model.onnx"):
                return cls(encoder, first=file("decoder_model.onnx"), with_past=file("decoder_with_past_model.onnx"))
            raise ConfigError(f"{base}: encoder_model.onnx without decoder_model_merged.onnx or decoder_model.onnx "
                              "+ decoder_with_past_model.onnx (optimum's encoder-decoder layouts)")
        raise ConfigError(f"{folder}: no encoder_model.onnx (here or in onnx/): not an encoder-decoder export")


def _json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return raw


def _token_id(config: dict, key: str, where: Path) -> int | None:
    v = config.get(key)
    if isinstance(v, list) and v:  # some configs list several eos ids: the first stops
        v = v[0]
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConfigError(f"{where}: {key} must be a token id, got {v!r}")
    return v


class _Plan:
    """One ONNX graph compiled with its batch (and decoder length) 1, loaded on the runtime."""

    def __init__(self, runtime, path: Path, capacities: dict[str, int], ones: Sequence[str], head: bool,
                 fixed: dict[str, int] | None = None):
        graph = load_model(path)
        _fix_symbols(graph, {**{n: 1 for n in ones}, **(fixed or {})})
        if head:
            add_last_token_head(graph, "logits")
        used = input_symbols(graph)
        missing = sorted(set(used) - capacities.keys())
        if missing:
            raise ConfigError(f"{path.name}: dimension '{missing[0]}' (input '{used[missing[0]]}') is not one "
                              f"this session sets ({', '.join(sorted(capacities))})")
        dims = {k: v for k, v in capacities.items() if k in used}
        compiled = CompilerPipeline(register_llm_operators(core_operator_registry())).compile(graph, dims)
        self.name = path.name
        self.inputs = list(compiled.inputs)
        self.outputs = list(compiled.outputs)
        self.symbols = set(dims)
        self.executor = runtime.load_model(compiled)

    def run(self, dims: dict[str, int], feeds: dict[str, Any], read: list[str], keep: list[str]) -> dict[str, Any]:
        self.executor.update_dimensions({k: v for k, v in dims.items() if k in self.symbols})
        return self.executor.run(feeds, read, device_outputs=keep)


def _fix_symbols(graph: IrGraph, values: dict[str, int]) -> None:
    """Make the symbols `values` names literals in the graph's input shapes (batch, decoder length 1)."""
    for tid in graph.inputs:
        t = graph.tensor(tid)
        if t.shape is not None:
            t.shape = tuple(d.substitute(values) if isinstance(d, SymDim) else d for d in t.shape)


def _symbol(graph_shape: Sequence[Any], axis: int) -> str | None:
    d = graph_shape[axis] if len(graph_shape) > axis else None
    return str(d) if isinstance(d, SymDim) and len(d.symbols) == 1 else None


class Seq2SeqSession:
    """Greedy generation for an optimum encoder-decoder folder (see the module docstring).

    `max_length`: the longest decoder sequence (prompt + new tokens) a generation reaches;
    `runtime`: the onyxia Runtime to use (a new one by default)."""

    def __init__(self, folder: str | Path, *, max_length: int = 128, runtime=None):
        self.folder = Path(folder)
        self.layout = Seq2SeqLayout.find(self.folder)
        base = self.layout.encoder.parent
        config = {**_json(self.folder / "config.json"), **_json(base / "config.json")}
        self.generation = {**_json(self.folder / "generation_config.json"), **_json(base / "generation_config.json")}
        merged = {**config, **{k: v for k, v in self.generation.items() if v is not None}}
        self.model_type = str(config.get("model_type", ""))
        self.decoder_start = _token_id(merged, "decoder_start_token_id", self.folder / "config.json")
        self.eos = _token_id(merged, "eos_token_id", self.folder / "config.json")
        if self.decoder_start is None:
            raise ConfigError(f"{self.folder}: config.json has no decoder_start_token_id")
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
            raise InputError(f"max_length must be an integer >= 2, got {max_length!r}")
        self.max_length = max_length
        self.features = FeatureConfig.from_folder(base)
        if runtime is None:
            from onyxia.runtime import Runtime
            runtime = Runtime()
        self.runtime = runtime
        self._encoders: dict[int | None, _Plan] = {}  # None: the plan for every length
        self._decoders: dict[str, _Plan] = {}
        self._tokenizer = None

    # ---- inputs -------------------------------------------------------------------------
    @property
    def is_speech(self) -> bool:
        return self.model_type == "whisper"

    def tokenizer(self):
        if self._tokenizer is None:
            base = self.layout.encoder.parent
            self._tokenizer = load_tokenizer(base if (base / "tokenizer.json").is_file() else self.folder)
        return self._tokenizer

    def prompt(self, task: str | None = None, language: str | None = None) -> list[int]:
        """The decoder's first tokens: decoder_start_token_id, and for Whisper the language, task
        and no-timestamps tokens that generation_config.json names."""
        tokens = [self.decoder_start]
        if not self.is_speech:
            if task is not None or language is not None:
                raise InputError(f"task and language are Whisper options; this is a {self.model_type or 'text'} model")
            return tokens
        langs, tasks = self.generation.get("lang_to_id") or {}, self.generation.get("task_to_id") or {}
        if language is not None or langs:
            key = f"<|{language or 'en'}|>"
            if key not in langs:
                raise InputError(f"language {language or 'en'!r} is not one of the model's "
                                 f"({', '.join(k.strip('<|>') for k in langs) or 'none'})")
            tokens.append(int(langs[key]))
        if task is not None or tasks:
            if (task or "transcribe") not in tasks:
                raise InputError(f"task {task!r} is not one of the model's ({', '.join(tasks) or 'none'})")
            tokens.append(int(tasks[task or "transcribe"]))
        no_timestamps = self.generation.get("no_timestamps_token_id")
        if isinstance(no_timestamps, int):
            tokens.append(no_timestamps)
        return tokens

    def encoder_feeds(self, source: Any) -> dict[str, np.ndarray]:
        """The encoder's feeds for `source`: Whisper: a WAV path, 1-D samples or [n_mels, frames]
        features; text models: token ids (1-D) or a string (tokenizer.json)."""
        if self.is_speech:
            if isinstance(source, (str, Path)):
                source = read_wav(source, self.features.sampling_rate)
            x = np.asarray(source, np.float32)
            if x.ndim == 1:
                x = log_mel(x, self.features)
            want = (self.features.feature_size, self.features.frames)
            if x.shape != want:
                raise InputError(f"input features have shape {list(x.shape)}, the model takes {list(want)}")
            return {"input_features": x[None]}
        if isinstance(source, str):
            source = self.tokenizer().encode(source).ids
        ids = np.asarray(source)
        if ids.ndim != 1 or not ids.size or not np.issubdtype(ids.dtype, np.integer):
            raise InputError("input token ids must be a non-empty 1-D integer sequence, got "
                             f"{ids.dtype}{list(ids.shape)}")
        return {"input_ids": ids.astype(np.int64)[None], "attention_mask": np.ones((1, ids.size), np.int64)}

    # ---- plans ----------------------------------------------------------------------------
    def _encoder_plan(self, length: int) -> _Plan:
        """The encoder's plan: one for every input length, or, when the graph needs the length
        as a number (T5 slices its position bias by -length), one per length (a few kept)."""
        plan = self._encoders.get(None) or self._encoders.get(length)
        if plan is not None:
            return plan
        graph = load_model(self.layout.encoder)
        shape = graph.tensor(graph.inputs[0]).shape or ()
        batch, symbol = _symbol(shape, 0), None if self.is_speech else _symbol(shape, 1)
        ones = [batch] if batch else []
        try:
            plan = _Plan(self.runtime, self.layout.encoder, {symbol: length} if symbol else {}, ones, head=False)
            key = None
        except ValueRequiredError as exc:
            if symbol is None or symbol not in exc.symbols:
                raise
            plan = _Plan(self.runtime, self.layout.encoder, {}, ones, head=False, fixed={symbol: length})
            key = length
        if len(self._encoders) >= 4:
            self._encoders.pop(next(iter(self._encoders)))
        self._encoders[key] = plan
        return plan

    def _decoder(self, which: str, encoder_length: int) -> _Plan:
        plan = self._decoders.get(which)
        if plan is None:
            path = {"merged": self.layout.merged, "first": self.layout.first, "with_past": self.layout.with_past}[which]
            assert path is not None
            graph = load_model(path)
            ids = graph.tensor("input_ids").shape if "input_ids" in graph.inputs else None
            if ids is None:
                raise ConfigError(f"{path.name}: no input_ids input (optimum's decoders have one)")
            ones = [s for s in (_symbol(ids, 0), _symbol(ids, 1)) if s]
            caps = {}
            for tid in graph.inputs:
                shape = graph.tensor(tid).shape or ()
                if tid.startswith(PAST) and ".decoder." in tid and _symbol(shape, 2):
                    caps[_symbol(shape, 2)] = self.max_length  # every step's past fits: no buffer grows
                elif tid == "encoder_hidden_states" and _symbol(shape, 1):
                    caps[_symbol(shape, 1)] = encoder_length
                elif tid.startswith(PAST) and ".encoder." in tid and _symbol(shape, 2):
                    caps[_symbol(shape, 2)] = encoder_length
            plan = self._decoders[which] = _Plan(self.runtime, path, caps, ones, head=True)
            plan.past_symbol = next((k for k, v in caps.items() if v == self.max_length), None)  # type: ignore[attr-defined]
            plan.encoder_symbol = next((k for k, v in caps.items() if v == encoder_length and k != plan.past_symbol),
                                       None)  # type: ignore[attr-defined]
        return plan

    # ---- generation ------------------------------------------------------------------------
    def generate(self, source: Any, max_new_tokens: int = 32, *, task: str | None = None,
                 language: str | None = None, prompt: Sequence[int] | None = None) -> list[int]:
        """Greedy new tokens after the prompt (`prompt`, else `self.prompt(task, language)`),
        stopping before eos or after `max_new_tokens`."""
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise InputError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
        tokens = list(prompt) if prompt is not None else self.prompt(task, language)
        if not tokens:
            raise InputError("the decoder prompt is empty")
        if len(tokens) + max_new_tokens > self.max_length:
            raise InputError(f"a prompt of {len(tokens)} tokens and {max_new_tokens} new ones exceed "
                             f"max_length {self.max_length} (Seq2SeqSession(..., max_length=...))")
        feeds = self.encoder_feeds(source)
        length = feeds["input_features"].shape[2] // 2 if self.is_speech else feeds["input_ids"].shape[1]
        encoder = self._encoder_plan(length)
        encoded = encoder.run({s: length for s in encoder.symbols}, feeds, [], ["last_hidden_state"])
        states = encoded["last_hidden_state"]
        mask = None if self.is_speech else feeds["attention_mask"]
        length = states.shape[1]
        cross: dict[str, Any] = {}  # the cross-attention KV, from the first step on
        own: dict[str, Any] = {}  # the self-attention KV of the steps so far
        new: list[int] = []
        for step in range(len(tokens) + max_new_tokens - 1):
            first = step == 0
            which = "merged" if self.layout.merged else ("first" if first else "with_past")
            plan = self._decoder(which, length)
            out = self._step(plan, tokens[step] if step < len(tokens) else new[-1], step, first, states, mask,
                             cross, own)
            if step >= len(tokens) - 1:
                if out == self.eos:
                    break
                new.append(out)
                if len(new) == max_new_tokens:
                    break
        return new

    def _step(self, plan: _Plan, token: int, past: int, first: bool, states: Any, mask: np.ndarray | None,
              cross: dict[str, Any], own: dict[str, Any]) -> int:
        feeds: dict[str, Any] = {"input_ids": np.array([[token]], np.int64)}
        for name in plan.inputs:
            if name == "encoder_hidden_states":
                feeds[name] = states
            elif name == "encoder_attention_mask":
                feeds[name] = mask
            elif name == CACHE_BRANCH:
                feeds[name] = np.array([not first])
            elif name.startswith(PAST):
                store = cross if ".encoder." in name else own
                if name in store:
                    feeds[name] = store[name]
                else:  # the first merged step: the branch without a cache ignores these
                    dtype = np.float32
                    shape = plan.executor.model.tensors[name].shape
                    lengths = {plan.past_symbol: 0, plan.encoder_symbol: states.shape[1]}  # type: ignore[attr-defined]
                    feeds[name] = np.zeros([d if isinstance(d, int) else lengths[str(d)] for d in shape], dtype)
        keep = [n for n in plan.outputs if n.startswith(PRESENT) and (".decoder." in n or first)]
        dims = {plan.past_symbol: past, plan.encoder_symbol: states.shape[1]}  # type: ignore[attr-defined]
        out = plan.run({k: v for k, v in dims.items() if k}, feeds, [NEXT_TOKEN], keep)
        for name in keep:
            past_name = PAST + name[len(PRESENT):]
            (cross if ".encoder." in name else own)[past_name] = out[name]
        return int(np.asarray(out[NEXT_TOKEN]).reshape(-1)[0])

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer().decode(list(tokens))


__all__ = ["Seq2SeqLayout", "Seq2SeqSession"]
