"""How closely does the oracle agree with itself? onnxruntime-genai (CPU) computes the logits
before each greedy token of an LLM fixture two ways: its decode loop (one token a step, the
MatMulNBits M = 1 path) and a fresh generator given the whole sequence at once (a prefill, the
M > 1 path). For accuracy_level 4 folders the two paths quantize last-bit-different activations
to int8, so they can differ by whole int8 steps, exactly as onyxia and onnxruntime can.

    .venv/bin/python tools/oracle_consistency.py [genai/llama-cpu-int4 ...]   (default: every
    genai folder with MatMulNBits accuracy_level 4 whose graph onnxruntime's CPU kernels run)

Prints, per folder, the largest max |prefill - decode| / max |decode| over the 48 steps of
tests/gpu/test_llm_fixtures.py, the steps past its tolerance (1e-3, fp16 folders 1e-2) and the
steps whose argmax differs. Needs onnxruntime-genai (a test dependency), not a GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.llm_fixtures import PROMPT, fixtures, genai_greedy  # noqa: E402

STEPS = 48


def prefill_logits(folder: Path, tokens: list[int], max_length: int) -> np.ndarray:
    """The last position's logits of one generator fed `tokens` at once."""
    import onnxruntime_genai as og

    config = og.Config(str(folder))
    config.clear_providers()
    model = og.Model(config)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=max_length, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(tokens)
    return np.array(generator.get_logits())[0, -1].astype(np.float32)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", help="fixture names (default: the accuracy_level 4 genai folders)")
    args = parser.parse_args(argv)

    from onyxia.llm import LlmSession

    known = {f.name: f for f in fixtures()}
    chosen = args.folders or [f.name for f in known.values()
                              if f.is_genai and int8_activations(f) and not uses_qk_norm(f)]
    for name in chosen:
        fixture = known[name]
        prompt = LlmSession(fixture.path, max_length=128).encode(PROMPT)
        tokens, logits = genai_greedy(fixture.path, prompt, STEPS)
        tol = 1e-2 if fixture.fp16 else 1e-3
        worst, over, flips = 0.0, 0, 0
        for i in range(STEPS):
            other = prefill_logits(fixture.path, list(prompt) + tokens[:i], len(prompt) + STEPS + 1)
            rel = float(np.abs(other - logits[i]).max() / np.abs(logits[i]).max())
            worst, over, flips = max(worst, rel), over + (rel > tol), flips + (int(np.argmax(other)) != tokens[i])
        print(f"{name:26s} prefill vs decode: worst {worst:.2e} of the logits' scale, {over}/{STEPS} steps "
              f"over {tol:g}, argmax differs at {flips}/{STEPS}", flush=True)
    return 0


def int8_activations(fixture) -> bool:
    """Whether the folder's MatMulNBits quantize their activation to int8 (accuracy_level 4)."""
    import onnx

    model = onnx.load(str(fixture.path / "model.onnx"), load_external_data=False)
    return any(n.op_type == "MatMulNBits" and any(a.name == "accuracy_level" and a.i == 4 for a in n.attribute)
               for n in model.graph.node)


def uses_qk_norm(fixture) -> bool:
    """GroupQueryAttention with q/k norm inputs: onnxruntime's CPU kernel refuses them."""
    import onnx

    model = onnx.load(str(fixture.path / "model.onnx"), load_external_data=False)
    return any(n.op_type == "GroupQueryAttention" and len(n.input) > 14 and n.input[14] for n in model.graph.node)


if __name__ == "__main__":
    raise SystemExit(main())
