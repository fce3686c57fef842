"""Generate text with an LLM folder exported by onnxruntime-genai's builder or by Optimum.

    python examples/generate.py                                  # a tiny exported Llama (random weights)
    python examples/generate.py tests/data/llm/optimum/qwen3 --prompt "Once upon a time"
    python examples/generate.py /path/to/Phi-3-mini-4k-instruct-onnx/cpu-int4 --prompt "Hello"

The default folder is one of the test fixtures (tests/data/llm/, written by
tools/build_llm_fixtures.py): its weights are random, so the text is gibberish, but it is the
same gibberish onnxruntime-genai produces. With onnxruntime-genai installed, `--check` runs it
too and compares the tokens.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from onyxia.llm import LlmSession

DEFAULT = Path(__file__).resolve().parent.parent / "tests" / "data" / "llm" / "genai" / "llama-cpu-int4"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", nargs="?", type=Path, default=DEFAULT, help=f"LLM folder (default: {DEFAULT})")
    parser.add_argument("--prompt", default="The river ran past the old stone mill, and the children")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--check", action="store_true", help="compare the tokens with onnxruntime-genai (CPU)")
    args = parser.parse_args()

    start = time.perf_counter()
    session = LlmSession(args.model_dir, max_length=256)
    print(f"loaded {args.model_dir} in {time.perf_counter() - start:.1f} s on {session.runtime.info.summary}",
          file=sys.stderr)
    prompt = session.encode(args.prompt)
    tokens = []
    sys.stdout.write(args.prompt)
    for piece_tokens in session.stream(prompt, args.max_new_tokens):
        tokens.append(piece_tokens)
        sys.stdout.write(session.decode([piece_tokens]))
        sys.stdout.flush()
    print()
    print(f"{session.stats.decode_tokens_per_second:.1f} tokens/s", file=sys.stderr)
    if args.check:
        import onnxruntime_genai as og

        config = og.Config(str(args.model_dir))
        config.clear_providers()
        model = og.Model(config)
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt) + len(tokens), do_sample=False)
        generator = og.Generator(model, params)
        generator.append_tokens(prompt)
        reference = []
        while not generator.is_done():
            generator.generate_next_token()
            reference.append(int(generator.get_next_tokens()[0]))
        print("same tokens as onnxruntime-genai:", reference[:len(tokens)] == tokens, file=sys.stderr)


if __name__ == "__main__":
    main()
