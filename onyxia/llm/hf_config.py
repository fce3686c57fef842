"""A model folder in Optimum / transformers.js layout: config.json, the decoder, tokenizer.json.

`optimum-cli export onnx --task text-generation-with-past` writes config.json,
generation_config.json, tokenizer.json and model.onnx; transformers.js repositories keep the
decoder under onnx/ (onnx/model.onnx). There is no genai_config.json: the decoder's shape comes from
config.json, its input/output names from the graph (the Hugging Face names, `past_key_values.N.key`
→ `present.N.key`, which are also genai's defaults). `load_hf_config` returns the same
`GenaiConfig` record a genai folder gives, so the session treats both alike.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from onyxia.errors import ConfigError
from onyxia.llm.config import CONFIG_FILE, DecoderConfig, GenaiConfig, SearchConfig, _Reader, load_genai_config
from onyxia.paths import resolve_inside

HF_CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
# Where the exporters put the decoder with a KV cache, in the order a folder is searched.
DECODER_FILES = ("model.onnx", "onnx/model.onnx", "decoder_model_merged.onnx", "onnx/decoder_model_merged.onnx")
# transformers.js' dtype names and the suffix its quantize script gives each file (onnx/model_q4f16.onnx).
VARIANTS = {"fp32": "", "fp16": "_fp16", "q8": "_quantized", "int8": "_int8", "uint8": "_uint8", "q4": "_q4",
            "q4f16": "_q4f16", "bnb4": "_bnb4"}


def _variants(folder: Path) -> list[str]:
    """The decoder files of `folder` in transformers.js' layout (model*.onnx, decoder_model_merged*.onnx)."""
    found = []
    for sub in ("", "onnx/"):
        for stem in ("model", "decoder_model_merged"):
            found += sorted(f"{sub}{p.name}" for p in (folder / sub).glob(f"{stem}*.onnx") if p.is_file()
                            and (p.stem == stem or p.stem[len(stem)] == "_"))
    return found


def decoder_file(folder: Path, decoder: str | None = None) -> str:
    """The decoder ONNX file of an Optimum / transformers.js folder, relative to it.

    `decoder`: a file inside the folder, or one of transformers.js' dtype names (fp32, fp16, q8,
    int8, uint8, q4, q4f16, bnb4: onnx/model_q4f16.onnx ...). Without it: model.onnx (or
    onnx/model.onnx, decoder_model_merged.onnx) if present, else the only model_*.onnx there is."""
    if decoder:
        if decoder.endswith(".onnx"):
            wanted = [decoder]
        elif decoder in VARIANTS:
            wanted = [f"{sub}{stem}{VARIANTS[decoder]}.onnx" for stem in ("model", "decoder_model_merged")
                      for sub in ("onnx/", "")]
        else:
            raise ConfigError(f"decoder '{decoder}': not an .onnx file nor one of {', '.join(VARIANTS)}")
        found = next((name for name in wanted if (folder / name).is_file()), None)
        if found is None:
            raise ConfigError(f"{folder}: no decoder '{decoder}' (looked for {', '.join(wanted)}); the folder has "
                              f"{', '.join(_variants(folder)) or 'no decoder file'}")
        return found
    found = next((name for name in DECODER_FILES if (folder / name).is_file()), None)
    if found is not None:
        return found
    available = _variants(folder)
    if len(available) == 1:
        return available[0]
    if not available:
        raise ConfigError(f"{folder}: config.json is there, but no decoder ONNX file "
                          f"(looked for {', '.join(DECODER_FILES)} and their model_*.onnx variants)")
    raise ConfigError(f"{folder}: several decoders ({', '.join(available)}) and no model.onnx; choose one with "
                      f"--decoder FILE or a dtype name ({', '.join(VARIANTS)})")


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None


def _token_ids(reader: _Reader, key: str) -> tuple[int, ...] | None:
    value = reader.data.get(key)
    if value is None:
        return None
    ids = tuple(value) if isinstance(value, list) else (value,)
    if not ids or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise reader.error(f"must be a token id or a non-empty list of token ids, got {value!r}", key)
    return ids


def load_hf_config(model_dir: str | Path, decoder: str | None = None) -> GenaiConfig:
    """Read `model_dir/config.json` (+ generation_config.json) of an Optimum-exported decoder;
    `decoder` picks the ONNX file (decoder_file)."""
    folder = Path(model_dir)
    path = folder / HF_CONFIG_FILE
    if not path.is_file():
        raise ConfigError(f"{folder}: no genai_config.json (onnxruntime-genai's layout) and no config.json "
                          "(Optimum's layout); an LLM folder needs one of them")
    root = _Reader(path, _read_json(path))
    # Multimodal checkpoints (Gemma 3, Mistral 3) keep the decoder's fields in text_config.
    text = root.child("text_config") if "num_hidden_layers" not in root.data and "text_config" in root.data else root
    heads = text.get("num_attention_heads", int, positive=True)
    hidden = text.get("hidden_size", int, positive=True)
    filename = decoder_file(folder, decoder)
    resolve_inside(folder, filename, f"{folder}: {filename}", ConfigError)  # no symlink out of the folder
    decoder = DecoderConfig(
        filename=filename,
        num_hidden_layers=text.get("num_hidden_layers", int, positive=True),
        num_attention_heads=heads,
        num_key_value_heads=text.get("num_key_value_heads", int, heads, positive=True),
        head_size=text.get("head_dim", int, hidden // heads, positive=True),
        hidden_size=hidden,
        position_ids="position_ids",
    )
    generation = folder / GENERATION_CONFIG_FILE
    gen = _Reader(generation, _read_json(generation)) if generation.is_file() else _Reader(generation, {})
    eos = _token_ids(gen, "eos_token_id") or _token_ids(text, "eos_token_id") or _token_ids(root, "eos_token_id")
    if eos is None:
        raise root.error("is missing (and generation_config.json gives none)", "eos_token_id")
    bos = gen.data.get("bos_token_id", text.data.get("bos_token_id"))
    pad = gen.data.get("pad_token_id", text.data.get("pad_token_id"))
    return GenaiConfig(
        path=path,
        type=str(root.data.get("model_type", "decoder")),
        decoder=decoder,
        search=SearchConfig(),  # generation_config's max_length (20 by default) is no cache size
        context_length=text.get("max_position_embeddings", int, positive=True),
        vocab_size=text.get("vocab_size", int, positive=True),
        eos_token_ids=eos,
        bos_token_id=bos if isinstance(bos, int) and not isinstance(bos, bool) else None,
        pad_token_id=pad if isinstance(pad, int) and not isinstance(pad, bool) else None,
    )


def load_model_config(model_dir: str | Path, decoder: str | None = None) -> GenaiConfig:
    """The folder's config: genai_config.json (onnxruntime-genai) if present, else config.json
    (Optimum). `decoder`: another ONNX file of the folder than the config names (see decoder_file)."""
    folder = Path(model_dir)
    if folder.is_dir() and not (folder / CONFIG_FILE).is_file() and (folder / HF_CONFIG_FILE).is_file():
        return load_hf_config(folder, decoder)
    config = load_genai_config(folder)
    if not decoder:
        return config
    filename = decoder_file(config.path.parent, decoder)
    resolve_inside(config.path.parent, filename, f"{config.path.parent}: {filename}", ConfigError)
    return dataclasses.replace(config, decoder=dataclasses.replace(config.decoder, filename=filename))
