"""The web folder of an LLM: the decoder plan LlmSession runs, and a page that streams text.

`onyxia web FOLDER -o DIR` on an onnxruntime-genai (or Optimum) folder compiles the decoder as
LlmSession compiles it (onyxia/llm/compile.py: the last-token head picks the next token on the
device, the lm_head projects only the last row) and writes

  model.json, weights_N.bin   the web bundle (onyxia/web/bundle.py)
  llm.json                    what onyxia/web/llm.js needs to drive the plan: the decoder's input
                              and output names, its session symbols (sequence, past, total), the
                              cache layout, EOS ids, max_length and the prefill chunk, the default
                              prompt and token budget of the page
  tokenizer.json              the folder's, read by onyxia/web/tokenizer.js
  onyxia.js, data.js, llm.js, tokenizer.js, index.html   the runtime and the streaming page

The KV cache is sized for max_length on load (the JS session never regrows it: a growth would
need the cache read back and padded, as LlmSession._grow_cache does), so pick --max-length for
the page; the default is the folder's, as `onyxia generate` uses.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from onyxia.errors import InputError
from onyxia.llm.compile import PREFILL_CHUNK, compile_decoder, max_length_for
from onyxia.llm.config import TOKENIZER_FILE
from onyxia.llm.hf_config import load_model_config
from onyxia.llm.ops import LOGITS_GATE, NEXT_TOKEN
from onyxia.web.bundle import RUNTIME_FILES, copy_runtime, write_bundle

LLM_MANIFEST = "llm.json"
LLM_FORMAT = "onyxia-web-llm"
WEB_DIR = Path(__file__).parent
DEFAULT_PROMPT = "Once upon a time"


def llm_manifest(config, io, *, max_length: int, prefill_length: int, logits_gate: bool,
                 prompt: str, max_new_tokens: int) -> dict:
    """llm.json: names and symbols llm.js feeds, as LlmSession._step feeds them."""
    return {
        "format": LLM_FORMAT, "version": 1,
        "input_ids": io.input_ids, "mask": io.mask, "positions": io.positions,
        "kv": [list(pair) for pair in io.kv], "windowed": sorted(io.windowed),
        "dtypes": {name: str(dtype) for name, dtype in io.dtypes.items()},
        "sequence": io.sequence, "past": io.past, "total": io.total,
        "share_buffer": bool(config.search.past_present_share_buffer),
        "logits_gate": LOGITS_GATE if logits_gate else None, "next_token": NEXT_TOKEN,
        "max_length": max_length, "prefill_length": prefill_length, "cache_rows": max_length,
        "eos_token_ids": list(config.eos_token_ids), "vocab_size": config.vocab_size,
        "prompt": prompt, "max_new_tokens": max_new_tokens,
    }


def write_llm_demo(model_dir: str | Path, out_dir: str | Path, *, prompt: str | None = None,
                   max_new_tokens: int = 32, max_length: int | None = None, decoder: str | None = None,
                   prefill_length: int | None = None) -> Path:
    """The whole web folder of the LLM in `model_dir` (see the module docstring); returns it."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise InputError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    config = load_model_config(model_dir, decoder)
    tokenizer = Path(model_dir) / TOKENIZER_FILE
    if not tokenizer.is_file():
        raise InputError(f"{tokenizer}: not found (the page tokenizes with the folder's tokenizer.json)")
    length = max_length_for(config, max_length)
    chunk = min(prefill_length or PREFILL_CHUNK, length)
    # cache_rows = max_length: the JS session never grows the cache (see the module docstring).
    compiled = compile_decoder(config, length, prefill_length=chunk, cache_rows=length)
    out = Path(out_dir)
    write_bundle(compiled.compiled, out)
    manifest = llm_manifest(config, compiled.io, max_length=length, prefill_length=chunk,
                            logits_gate=compiled.logits_gate, prompt=DEFAULT_PROMPT if prompt is None else prompt,
                            max_new_tokens=max_new_tokens)
    (out / LLM_MANIFEST).write_text(json.dumps(manifest, indent=1))
    shutil.copyfile(tokenizer, out / "tokenizer.json")
    copy_runtime(out, (*RUNTIME_FILES, "llm.js", "tokenizer.js"))
    (out / "index.html").write_text((WEB_DIR / "llm.html").read_text())
    return out
