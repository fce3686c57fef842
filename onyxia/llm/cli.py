"""`onyxia generate MODEL_DIR --prompt ...`: stream text from an LLM folder; for an optimum
encoder-decoder export (encoder_model.onnx), greedy Seq2SeqSession output (`--audio` for Whisper).

The lead's onyxia/cli.py wires this in with `add_generate_parser(subparsers)`; errors are
OnyxiaErrors that the main command reports without a traceback.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from onyxia.errors import CliError, ConfigError


def add_generate_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "generate", help="generate text with an LLM (onnxruntime-genai or Optimum folder) or an Optimum "
                         "encoder-decoder export (Whisper, T5, BART; greedy)",
        description="Stream generated text to stdout, then print the prefill time and decode speed "
                    "to stderr. MODEL_DIR holds genai_config.json (onnxruntime-genai's builder) or "
                    "config.json (optimum-cli export onnx), the ONNX decoder and tokenizer.json.")
    p.add_argument("model_dir", metavar="MODEL_DIR", help="folder in onnxruntime-genai's or Optimum's layout")
    p.add_argument("--prompt", help="the text to continue (an encoder-decoder: the text to encode)")
    p.add_argument("--audio", metavar="WAV", help="Whisper folders: the audio to transcribe (PCM WAV)")
    p.add_argument("--task", choices=("transcribe", "translate"), default=None,
                   help="Whisper folders: the task token of the decoder prompt (default: transcribe)")
    p.add_argument("--language", metavar="CODE", help="Whisper folders: the language token (default: en)")
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="N", help="tokens to generate at most (128)")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T",
                   help="sampling temperature; 0 (the default) decodes greedily on the GPU")
    p.add_argument("--top-k", type=int, default=0, metavar="K", help="sample among the K most likely tokens (0: all)")
    p.add_argument("--top-p", type=float, default=1.0, metavar="P", help="nucleus sampling mass (1.0: off)")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="random seed for sampling")
    p.add_argument("--max-length", type=int, default=None, metavar="L",
                   help="prompt + generated tokens at most; the KV cache grows up to it as needed (default: "
                        "genai_config search.max_length, else the model's context length)")
    p.add_argument("--prefill-chunk", type=int, default=None, metavar="N",
                   help="tokens per prefill step: a longer prompt runs in chunks (default: 512)")
    p.add_argument("--decoder", metavar="FILE|DTYPE",
                   help="the ONNX file when the folder has several, as transformers.js repositories do: a "
                        "file inside MODEL_DIR (onnx/model_q4f16.onnx) or a dtype name (fp32, fp16, q8, int8, "
                        "uint8, q4, q4f16, bnb4); default: model.onnx, else the only model*.onnx")
    p.add_argument("--adapter", help="adapter index or name substring (default: best; or ONYXIA_ADAPTER)")
    p.set_defaults(func=run_generate)
    return p


class TerminalProgress:
    """Draws `phase [####....] done/total  3.1 s` on a terminal once a phase has run for `delay` s.

    Phases without intermediate steps (reading the model, uploading weights) are still shown,
    with their elapsed time, by a ticker thread: a 1 GB folder must not sit silent.
    """

    def __init__(self, stream: TextIO | None = None, delay: float = 1.0, interval: float = 0.2):
        stream = sys.stderr if stream is None else stream  # looked up now: tests swap sys.stderr
        self.stream, self.delay, self.interval = stream, delay, interval
        self.enabled = stream.isatty()
        self.phase, self.done, self.total, self.started = "", 0, 1, 0.0
        self.drawn = False
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._tick, daemon=True) if self.enabled else None
        if self.thread:
            self.thread.start()

    def __call__(self, phase: str, done: int, total: int) -> None:
        with self.lock:
            if phase != self.phase:
                self.phase, self.started = phase, time.perf_counter()
            self.done, self.total = done, max(total, 1)
            self._draw()

    def _tick(self) -> None:
        while not self.stop.wait(self.interval):
            with self.lock:
                self._draw()

    def _draw(self) -> None:
        if not self.enabled or not self.phase:
            return
        elapsed = time.perf_counter() - self.started
        if elapsed < self.delay or self.done >= self.total:
            if self.drawn and self.done >= self.total:
                self.stream.write("\r\033[K")
                self.stream.flush()
                self.drawn = False
            return
        width = 24
        filled = width * self.done // self.total
        steps = f" {self.done}/{self.total}" if self.total > 1 else ""
        self.stream.write(f"\r\033[K{self.phase:<18} [{'#' * filled}{'.' * (width - filled)}]{steps}  {elapsed:.1f} s")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        self.stop.set()
        with self.lock:
            if self.drawn:
                self.stream.write("\r\033[K")
                self.stream.flush()
                self.drawn = False


def run_generate(args: argparse.Namespace) -> int:
    from onyxia.llm.session import LlmSession
    from onyxia.runtime import Runtime

    runtime = Runtime(args.adapter) if getattr(args, "adapter", None) else None
    if is_seq2seq_folder(args.model_dir):
        return run_seq2seq(args, runtime)
    for flag in ("audio", "task", "language"):
        if getattr(args, flag) is not None:
            raise CliError(f"--{flag} is for encoder-decoder folders (encoder_model.onnx); {args.model_dir} "
                           "holds a decoder-only model")
    if args.prompt is None:
        raise CliError("--prompt is required")
    progress = TerminalProgress()
    try:
        session = LlmSession(args.model_dir, max_length=args.max_length, runtime=runtime, progress=progress,
                             decoder=args.decoder, prefill_length=getattr(args, "prefill_chunk", None))
    finally:
        progress.close()
    loaded = session.device_bytes
    out = sys.stdout
    for piece in session.stream_text(args.prompt, args.max_new_tokens, temperature=args.temperature,
                                     top_k=args.top_k, top_p=args.top_p, seed=args.seed):
        out.write(piece)
        out.flush()
    out.write("\n")
    out.flush()
    s = session.stats
    print(f"prompt: {s.prompt_tokens} tokens, prefill {s.prefill_seconds * 1e3:.1f} ms; "
          f"decode: {s.decode_tokens} tokens, {s.decode_tokens_per_second:.1f} tokens/s "
          f"({session.dispatches_per_step} dispatches per step; {session.runtime.info.summary})", file=sys.stderr)
    mib = 1 << 20
    print(f"device memory: {loaded / mib:.1f} MiB after load, {session.device_bytes / mib:.1f} MiB after "
          f"{session.cache_length} cached tokens (KV cache: {session.cache_rows} of max_length "
          f"{session.max_length} rows)", file=sys.stderr)
    return 0


def is_seq2seq_folder(folder: str) -> bool:
    """Whether `folder` holds optimum's encoder-decoder export (encoder_model.onnx, or onnx/ of it)."""
    return any((Path(folder) / sub / "encoder_model.onnx").is_file() for sub in ("", "onnx"))


def run_seq2seq(args: argparse.Namespace, runtime) -> int:
    """Greedy generation with Seq2SeqSession: the tokens as text (tokenizer.json) or as ids."""
    from onyxia.llm.seq2seq import Seq2SeqSession

    if args.temperature != 0.0 or args.top_k or args.top_p != 1.0 or args.decoder is not None:
        raise CliError("encoder-decoder folders generate greedily: --temperature, --top-k, --top-p and --decoder "
                       "do not apply")
    probe = Seq2SeqSession(args.model_dir, runtime=runtime, max_length=2)
    if probe.is_speech:
        if args.audio is None:
            raise CliError("a Whisper folder transcribes --audio WAV")
        source, prompt = args.audio, probe.prompt(args.task, args.language)
    else:
        if args.prompt is None or args.audio is not None:
            raise CliError(f"a {probe.model_type or 'text-to-text'} folder encodes --prompt TEXT (no --audio)")
        source, prompt = args.prompt, probe.prompt(args.task, args.language)
    max_length = args.max_length or len(prompt) + args.max_new_tokens
    session = Seq2SeqSession(args.model_dir, runtime=probe.runtime, max_length=max_length)
    start = time.perf_counter()
    tokens = session.generate(source, args.max_new_tokens, prompt=prompt)
    seconds = time.perf_counter() - start
    try:
        text = session.decode(tokens)
    except ConfigError:  # no tokenizer.json: the ids
        text = " ".join(map(str, tokens))
    print(text)
    print(f"{len(tokens)} tokens in {seconds * 1e3:.1f} ms ({session.runtime.info.summary})", file=sys.stderr)
    return 0
