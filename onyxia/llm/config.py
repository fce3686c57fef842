"""A model folder in onnxruntime-genai's layout: genai_config.json, the decoder, tokenizer.json.

`load_genai_config` reads the fields a decoder-only session needs; every problem (missing
file, invalid JSON, missing or mistyped field) is a ConfigError naming the file and the field.
`load_tokenizer` opens tokenizer.json with the `tokenizers` library.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onyxia.errors import ConfigError
from onyxia.paths import resolve_inside

CONFIG_FILE = "genai_config.json"
TOKENIZER_FILE = "tokenizer.json"


@dataclass(frozen=True)
class SearchConfig:
    """genai_config.json `search`: generation defaults."""

    max_length: int | None = None
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    past_present_share_buffer: bool = False


@dataclass(frozen=True)
class SlidingWindowConfig:
    """genai_config.json `model.decoder.sliding_window`: local attention over the last tokens."""

    window_size: int
    layers: tuple[int, ...] = ()
    cache_slack: int = 0  # positions kept beyond the window (0: the runtime chooses)
    slide_key_value_cache: bool = False


@dataclass(frozen=True)
class DecoderConfig:
    """genai_config.json `model.decoder`: the ONNX file and its input/output names."""

    filename: str
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_size: int
    hidden_size: int
    input_ids: str = "input_ids"
    attention_mask: str | None = "attention_mask"
    position_ids: str | None = None
    past_key_names: str = "past_key_values.%d.key"
    past_value_names: str = "past_key_values.%d.value"
    logits: str = "logits"
    present_key_names: str = "present.%d.key"
    present_value_names: str = "present.%d.value"
    sliding_window: SlidingWindowConfig | None = None

    def past_names(self, layer: int) -> tuple[str, str]:
        return self.past_key_names % layer, self.past_value_names % layer

    def present_names(self, layer: int) -> tuple[str, str]:
        return self.present_key_names % layer, self.present_value_names % layer


@dataclass(frozen=True)
class GenaiConfig:
    path: Path  # the genai_config.json file
    type: str
    decoder: DecoderConfig
    search: SearchConfig
    context_length: int
    vocab_size: int
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None = None
    pad_token_id: int | None = None

    @property
    def model_path(self) -> Path:
        return self.path.parent / self.decoder.filename


class _Reader:
    """Typed access to one JSON object, with errors naming file and dotted field path."""

    def __init__(self, path: Path, data: Any, where: str = ""):
        self.path, self.where = path, where
        if not isinstance(data, dict):
            raise self.error(f"must be a JSON object, got {type(data).__name__}")
        self.data = data

    def error(self, message: str, key: str | None = None) -> ConfigError:
        field = ".".join(p for p in (self.where, key) if p)
        return ConfigError(f"{self.path}: {'field ' + repr(field) + ' ' if field else ''}{message}")

    def child(self, key: str, required: bool = True) -> _Reader:
        if key not in self.data:
            if required:
                raise self.error("is missing", key)
            return _Reader(self.path, {}, ".".join(p for p in (self.where, key) if p))
        return _Reader(self.path, self.data[key], ".".join(p for p in (self.where, key) if p))

    def get(self, key: str, types: type | tuple[type, ...], default: Any = ..., *, positive: bool = False) -> Any:
        if key not in self.data or self.data[key] is None:
            if default is ...:
                raise self.error("is missing", key)
            return default
        value = self.data[key]
        # JSON true/false must not pass as the integers 1/0.
        if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
            raise self.error(f"must be {_names(types)}, got {value!r}", key)
        if float in (types if isinstance(types, tuple) else (types,)) and isinstance(value, int):
            value = float(value)
        if not isinstance(value, types):
            raise self.error(f"must be {_names(types)}, got {value!r}", key)
        if positive and value <= 0:
            raise self.error(f"must be positive, got {value!r}", key)
        return value


def _names(types: type | tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "a list"}
    return " or ".join(names.get(t, t.__name__) for t in (types if isinstance(types, tuple) else (types,)))


def load_genai_config(model_dir: str | Path) -> GenaiConfig:
    """Parse `model_dir/genai_config.json` (or a path to the file itself)."""
    path = Path(model_dir)
    if path.is_dir() or not path.name.endswith(".json"):
        path = path / CONFIG_FILE
    if not path.is_file():
        raise ConfigError(f"{path}: not found (an LLM folder needs genai_config.json, as onnxruntime-genai's "
                          "model builder writes it, or config.json with model.onnx, as Optimum exports it)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None
    root = _Reader(path, raw)
    model = root.child("model")
    dec = model.child("decoder")
    inputs, outputs = dec.child("inputs", required=False), dec.child("outputs", required=False)
    num_heads = dec.get("num_attention_heads", int, positive=True)
    hidden = dec.get("hidden_size", int, positive=True)
    decoder = DecoderConfig(
        filename=dec.get("filename", str),
        num_hidden_layers=dec.get("num_hidden_layers", int, positive=True),
        num_attention_heads=num_heads,
        num_key_value_heads=dec.get("num_key_value_heads", int, num_heads, positive=True),
        head_size=dec.get("head_size", int, hidden // num_heads, positive=True),
        hidden_size=hidden,
        input_ids=inputs.get("input_ids", str, "input_ids"),
        attention_mask=inputs.get("attention_mask", str, "attention_mask"),
        position_ids=inputs.get("position_ids", str, None),
        past_key_names=_pattern(inputs, "past_key_names", "past_key_values.%d.key"),
        past_value_names=_pattern(inputs, "past_value_names", "past_key_values.%d.value"),
        logits=outputs.get("logits", str, "logits"),
        present_key_names=_pattern(outputs, "present_key_names", "present.%d.key"),
        present_value_names=_pattern(outputs, "present_value_names", "present.%d.value"),
        sliding_window=_sliding_window(dec),
    )
    eos = model.get("eos_token_id", (int, list))
    eos_ids = tuple(eos) if isinstance(eos, list) else (eos,)
    if not eos_ids or not all(isinstance(e, int) and not isinstance(e, bool) and e >= 0 for e in eos_ids):
        raise model.error(f"must be a token id or a non-empty list of token ids, got {eos!r}", "eos_token_id")
    search = root.child("search", required=False)
    context_length = model.get("context_length", int, positive=True)
    cfg = GenaiConfig(
        path=path,
        type=model.get("type", str, "decoder"),
        decoder=decoder,
        search=SearchConfig(
            max_length=search.get("max_length", int, None, positive=True),
            do_sample=search.get("do_sample", bool, False),
            temperature=search.get("temperature", float, 1.0),
            top_k=search.get("top_k", int, 0),
            top_p=search.get("top_p", float, 1.0),
            past_present_share_buffer=search.get("past_present_share_buffer", bool, False),
        ),
        context_length=context_length,
        vocab_size=model.get("vocab_size", int, positive=True),
        eos_token_ids=eos_ids,
        bos_token_id=model.get("bos_token_id", int, None),
        pad_token_id=model.get("pad_token_id", int, None),
    )
    # The decoder must be a file of the model folder: no '..', absolute path or symlink out.
    resolve_inside(path.parent, decoder.filename, f"{path}: field 'model.decoder.filename'", ConfigError)
    if not cfg.model_path.is_file():
        raise dec.error(f"names '{decoder.filename}', which does not exist in {path.parent}", "filename")
    return cfg


def _sliding_window(dec: _Reader) -> SlidingWindowConfig | None:
    if dec.data.get("sliding_window") is None:
        return None
    sw = dec.child("sliding_window")
    layers = sw.get("layers", list, [])
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers):
        raise sw.error(f"must be a list of layer indices, got {layers!r}", "layers")
    slack = sw.get("cache_slack", int, 0)
    if slack < 0:
        raise sw.error(f"must be >= 0, got {slack}", "cache_slack")
    return SlidingWindowConfig(window_size=sw.get("window_size", int, positive=True), layers=tuple(layers),
                               cache_slack=slack, slide_key_value_cache=sw.get("slide_key_value_cache", bool, False))


# Exactly one %d and no other conversion ("%%" is a literal percent sign): "past_%" or
# "%.999999999d" must be a config error, not a ValueError or a gigabyte string.
_LAYER_PATTERN = re.compile(r"(?:[^%]|%%)*%d(?:[^%]|%%)*")


def _pattern(reader: _Reader, key: str, default: str) -> str:
    value = reader.get(key, str, default)
    if not _LAYER_PATTERN.fullmatch(value):
        raise reader.error(f"must contain one %d for the layer index, got {value!r}", key)
    return value


def load_tokenizer(model_dir: str | Path):
    """`tokenizers.Tokenizer` from `model_dir/tokenizer.json`."""
    path = resolve_inside(model_dir, TOKENIZER_FILE, f"{model_dir}: {TOKENIZER_FILE}", ConfigError)
    if not path.is_file():
        raise ConfigError(f"{path}: not found (the model folder needs a Hugging Face tokenizer.json)")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ConfigError("reading tokenizer.json needs the `tokenizers` package "
                          "(pip install 'onyxia[llm]')") from None
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for any parse failure
        raise ConfigError(f"{path}: not a valid tokenizer file ({exc})") from None
