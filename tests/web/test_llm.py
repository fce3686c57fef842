"""An LLM in JavaScript: `onyxia web FOLDER` and onyxia/web/llm.js, against `onyxia generate`.

For onnxruntime-genai fixture folders (tests/data/llm/, fp32 and int4; Node also an Optimum
folder, a windowed cache and float16 I/O), the folder `onyxia web`
writes generates 32 greedy tokens in Node (npm `webgpu`) and in headless Chromium (its page,
index.html) equal to `onyxia generate FOLDER --prompt ... --max-new-tokens 32` (ids from
LlmSession, which the command runs, and the text the command prints). Each decode step only
changes dims (no pipeline is created after the first decode step, no buffer reallocated) and reads
back one token id and the status word (8 bytes). The JS tokenizer matches `tokenizers` on the
fixtures' tokenizer.json files.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
from pathlib import Path

import pytest

from onyxia.cli import main as onyxia_main
from tests.llm_fixtures import DATA, PROMPT
from tests.web.harness import WEB_TESTS, node_command, run_node_script
from tests.web.test_browser import open_folder

pytestmark = pytest.mark.web
FOLDERS = ["genai/llama-cpu-fp32", "genai/llama-cpu-int4"]
# Node also runs: Optimum's growing cache (present copied back into past on the device), a
# window-sized cache (Gemma-2's sliding layers), float16 I/O (SwiftShader: packed words).
NODE_FOLDERS = FOLDERS + ["optimum/llama", "genai/gemma2-cpu-fp32", "genai/llama-webgpu-fp16"]
TOKENS = 32
STEP_READBACK = 8  # the next token id (int64 on the device: one 32-bit word) and the status word


@functools.lru_cache(maxsize=None)
def _reference(folder: str) -> tuple[tuple[int, ...], tuple[int, ...], str]:
    """(prompt ids, generated ids, printed text) of `onyxia generate` on `folder`."""
    from onyxia.llm.session import LlmSession

    session = LlmSession(DATA / folder)
    prompt = session.encode(PROMPT)
    ids = session.generate(prompt, max_new_tokens=TOKENS)
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        assert onyxia_main(["generate", str(DATA / folder), "--prompt", PROMPT, "--max-new-tokens", str(TOKENS)]) == 0
    return tuple(prompt), tuple(ids), stdout.getvalue().removesuffix("\n")


def _web_folder(folder: str, out: Path) -> Path:
    assert onyxia_main(["web", str(DATA / folder), "-o", str(out), "--prompt", PROMPT,
                        "--max-new-tokens", str(TOKENS)]) == 0
    assert {"model.json", "llm.json", "tokenizer.json", "onyxia.js", "llm.js", "tokenizer.js",
            "index.html"} <= {p.name for p in out.iterdir()}
    return out


def _check_run(run: dict, folder: str) -> None:
    prompt, ids, text = _reference(folder)
    assert run["ids"] == list(ids), (run["ids"], ids)
    assert len(run["ids"]) == TOKENS
    assert run["text"] == text
    stats = run["stats"]
    assert stats["promptTokens"] == len(prompt) and stats["decodeTokens"] == TOKENS - 1
    # Dims change every step; pipelines are created when a kernel is first chosen (the prefill,
    # the first decode step), never again, and no buffer is reallocated.
    assert stats["pipelinesAfterFirstDecode"] == stats["pipelines"], stats
    assert stats["reallocs"] == 0
    assert stats["readbackBytesPerStep"] == [STEP_READBACK] * TOKENS


@pytest.mark.parametrize("folder", NODE_FOLDERS)
def test_node_generates_what_onyxia_generate_does(folder: str, tmp_path: Path) -> None:
    out = _web_folder(folder, tmp_path / "site")
    # strict: safe WebGPU, as an ordinary page has it (every kernel passes Tint's uniformity analysis)
    report = run_node_script("run_llm.mjs", {"folder": str(out), "prompt": PROMPT, "maxNewTokens": TOKENS,
                                             "repeats": 2, "strict": True}, tmp_path)
    assert report["ok"], report.get("error")
    assert report["promptIds"] == list(_reference(folder)[0])
    for run in report["runs"]:
        _check_run(run, folder)
    # The second generation meets only dims seen before: no pipeline at all.
    second = report["runs"][1]["stats"]
    assert second["pipelinesBefore"] == second["pipelines"]
    print(f"{folder}: {second['decodeTokens'] / second['decodeMs'] * 1000:.1f} tokens/s in Node "
          f"({second['dispatchesPerStep']} dispatches a step, {report['adapter']})")


@pytest.mark.parametrize("folder", FOLDERS)
def test_page_streams_what_onyxia_generate_does(folder: str, tmp_path: Path) -> None:
    out = _web_folder(folder, tmp_path / "site")
    result = open_folder(out, tmp_path / "page.png")
    assert result["promptIds"] == list(_reference(folder)[0])
    _check_run(result, folder)


def _sentencepiece_style(path: Path, metaspace: bool) -> Path:
    """A small SentencePiece-style BPE tokenizer.json trained here (byte fallback): Llama 2's
    normalizer/decoder chain (Prepend, Replace; Replace, ByteFallback, Fuse, Strip) or a Metaspace
    pre-tokenizer and decoder."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    special = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tok.train_from_iterator([PROMPT] * 3 + ["Hello world, the quick brown fox."],
                            trainers.BpeTrainer(vocab_size=400, special_tokens=special))
    if not metaspace:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(str(path))
    return path


def test_tokenizer_matches_tokenizers(tmp_path: Path) -> None:
    """tokenizer.js encodes and decodes as Hugging Face `tokenizers` does, for every distinct
    tokenizer.json of the fixtures (byte-level BPE: ByteLevel, Split with (?i:...) and NFC) and
    two SentencePiece-style ones (byte fallback: 東京 and 🙂 are not in their vocabularies)."""
    from tokenizers import Tokenizer

    texts = [PROMPT, "Hello, world!  It's 2026\n\nnew   line\r\n", "ÜBER café naïve — 東京 🙂 x²", "  lead and trail  ",
             "I'LL we've THEY'RE don't", "a</s>b<s>c<pad>", "123456 7.5e-3 $%&*()", "\ttabs\tand\u00a0nbsp"]
    files = sorted({p.read_bytes(): p for p in DATA.rglob("tokenizer.json")}.values())
    assert len(files) >= 2
    files += [_sentencepiece_style(tmp_path / "sp.json", False), _sentencepiece_style(tmp_path / "meta.json", True)]
    unsupported = tmp_path / "wordpiece.json"
    unsupported.write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {"a": 0}}}))
    script = tmp_path / "tok.mjs"
    module = json.dumps(str(WEB_TESTS.parents[1] / "onyxia" / "web" / "tokenizer.js"))
    script.write_text(f"import {{Tokenizer}} from {module};\n"
                      "import {readFileSync} from 'node:fs';\n"
                      f"const texts = {json.dumps(texts)}, out = {{}};\n"
                      f"for (const f of {json.dumps([str(f) for f in [*files, unsupported]])}) {{\n"
                      "  try { const t = new Tokenizer(JSON.parse(readFileSync(f, 'utf8')));\n"
                      "    out[f] = texts.map((x) => { const ids = t.encode(x); return [ids, t.decode(ids)]; });\n"
                      "  } catch (err) { out[f] = `${err.name}: ${err.message}`; } }\n"
                      "console.log(JSON.stringify(out));\n")
    got = json.loads(node_command([str(script)]).stdout)
    for f in files:
        ref = Tokenizer.from_file(str(f))
        want = [[ref.encode(x).ids, ref.decode(ref.encode(x).ids)] for x in texts]
        assert got[str(f)] == want, f
    # A component it does not implement is refused at load, by name.
    assert got[str(unsupported)] == "TokenizerError: model type 'WordPiece' is not supported by tokenizer.js (BPE only)"
