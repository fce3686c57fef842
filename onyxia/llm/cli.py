"""`onyxia generate MODEL_DIR --prompt ...`: stream text from an LLM folder.

The lead's onyxia/cli.py wires this in with `add_generate_parser(subparsers)`; errors are
OnyxiaErrors that the main command reports without a traceback.
"""

from __future__ import annotations

import argparse
import sys


def add_generate_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "generate", help="generate text with a decoder-only LLM (onnxruntime-genai folder)",
        description="Stream generated text to stdout, then print the prefill time and decode speed "
                    "to stderr. MODEL_DIR holds genai_config.json, the ONNX decoder and tokenizer.json.")
    p.add_argument("model_dir", metavar="MODEL_DIR", help="folder in onnxruntime-genai's layout")
    p.add_argument("--prompt", required=True, help="the text to continue")
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="N", help="tokens to generate at most (128)")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T",
                   help="sampling temperature; 0 (the default) decodes greedily on the GPU")
    p.add_argument("--top-k", type=int, default=0, metavar="K", help="sample among the K most likely tokens (0: all)")
    p.add_argument("--top-p", type=float, default=1.0, metavar="P", help="nucleus sampling mass (1.0: off)")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="random seed for sampling")
    p.add_argument("--max-length", type=int, default=None, metavar="L",
                   help="prompt + generated tokens at most (default: genai_config search.max_length)")
    p.add_argument("--adapter", help="adapter index or name substring (default: best; or ONYXIA_ADAPTER)")
    p.set_defaults(func=run_generate)
    return p


def run_generate(args: argparse.Namespace) -> int:
    from onyxia.llm.session import LlmSession
    from onyxia.runtime import Runtime

    runtime = Runtime(args.adapter) if getattr(args, "adapter", None) else None
    session = LlmSession(args.model_dir, max_length=args.max_length, runtime=runtime)
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
    return 0
