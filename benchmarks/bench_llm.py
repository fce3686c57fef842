"""LLM decoding speed: onyxia's LlmSession vs onnxruntime (CPU), side by side in one run.

Run: python benchmarks/bench_llm.py [--prompt 64] [--new 64] [--int4] [--repeat 3] [--model-dir DIR ...]

Builds a Llama-style decoder of ~32M parameters with random weights (tests/llm_models.py:
hidden 512, 8 layers, 8 heads / 4 KV heads, MLP 1408, vocabulary 8000) in onnxruntime-genai's
layout, unless --model-dir points at folders (several may be given: one table each, in one run;
e.g. the ~30M-parameter webgpu-fp16 and cpu-int4 folders `tools/build_llm_fixtures.py --big DIR`
exports with onnxruntime-genai's builder). Then, for both engines:
- prefill: seconds to run the prompt and produce the first token (median of --repeat runs, the
  two engines' runs interleaved so that both meet the same moments of a noisy machine);
- decode: tokens per second over the following --new - 1 single-token steps, greedy.
The reference is onnxruntime-genai on its CPU provider when it is installed (greedy, its own KV
cache handling); otherwise a plain onnxruntime session loop feeding present → past (numpy, argmax
on the host), as onnxruntime-genai drives a decoder on CPU. Ratios are onyxia over onnxruntime for speed (> 1:
onyxia is faster) and onnxruntime over onyxia for prefill time (> 1: onyxia is faster). Also
printed: dispatches per decode step and whether both engines chose the same tokens. On lavapipe
the "GPU" is the same CPU, so the ratios say little about a real GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.llm_models

from onyxia.plan.cost import DecodeCost  # noqa: E402
from tests.llm_models import DecoderSpec, OrtDecoder, build_decoder, num_parameters  # noqa: E402

BENCH_SPEC = DecoderSpec(vocab_size=8000, hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=4,
                         intermediate_size=1408, context_length=1024, max_length=512, block_size=32, seed=0)


# Each engine's one greedy generation: (prefill seconds, decode tokens per second, tokens).
Run = tuple[float, float, list[int]]


def onyxia_runs(session, prompt: list[int], new: int):
    """Generations with onyxia's LlmSession."""
    while True:
        tokens = session.generate(prompt, max_new_tokens=new)
        yield session.stats.prefill_seconds, session.stats.decode_tokens_per_second, tokens


def onnxruntime_runs(ref: OrtDecoder, prompt: list[int], new: int):
    """Generations with a plain onnxruntime session loop (present fed back as past)."""
    while True:
        stamps: list[float] = []

        def choose(logits: np.ndarray) -> int:
            stamps.append(time.perf_counter())
            return int(np.argmax(logits))

        start = time.perf_counter()
        tokens, _ = ref.run(prompt, new, choose)
        yield stamps[0] - start, (len(stamps) - 1) / (stamps[-1] - stamps[0]), tokens


def genai_runs(model_dir: Path, prompt: list[int], new: int):
    """Generations with onnxruntime-genai on its CPU provider (the folder's provider options cleared)."""
    import onnxruntime_genai as og

    config = og.Config(str(model_dir))
    config.clear_providers()
    model = og.Model(config)
    while True:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt) + new, do_sample=False)
        generator = og.Generator(model, params)
        start = time.perf_counter()
        generator.append_tokens(prompt)
        generator.generate_next_token()
        first = time.perf_counter()
        tokens = [int(generator.get_next_tokens()[0])]
        while not generator.is_done():
            generator.generate_next_token()
            tokens.append(int(generator.get_next_tokens()[0]))
        end = time.perf_counter()
        yield first - start, (len(tokens) - 1) / (end - first), tokens


def interleaved(engines: list, repeat: int) -> list[Run]:
    """Each engine's medians over `repeat` rounds that run every engine once in turn (after one
    warm-up run each), so both engines sample the same moments of a noisy machine."""
    for runs in engines:
        next(runs)  # warms pipelines, staging buffers, the reference's arenas
    rounds = [[next(runs) for runs in engines] for _ in range(repeat)]
    return [(statistics.median(r[i][0] for r in rounds), statistics.median(r[i][1] for r in rounds),
             rounds[-1][i][2]) for i in range(len(engines))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens (64)")
    parser.add_argument("--new", type=int, default=64, help="tokens to generate (64)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per engine (3)")
    parser.add_argument("--int4", action="store_true",
                        help="int4 weights (MatMulNBits with accuracy_level 4, GatherBlockQuantized)")
    parser.add_argument("--model-dir", type=Path, action="append",
                        help="an existing model folder instead of building one (repeatable)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="onyxia-bench-llm-") as tmp:
        model_dirs = args.model_dir
        if not model_dirs:
            start = time.perf_counter()
            spec = BENCH_SPEC.with_(int4=True, accuracy_level=4) if args.int4 else BENCH_SPEC
            model_dirs = [build_decoder(spec, Path(tmp) / "decoder")]
            print(f"built the decoder in {time.perf_counter() - start:.1f} s")
        for model_dir in model_dirs:
            run(model_dir, args)


@dataclass(frozen=True)
class LlmBench:
    """One folder's figures: onyxia beside the reference engine, medians of `repeat` interleaved runs."""

    model_dir: Path
    parameters: int
    family: str
    adapter: str
    load_s: float
    prompt: int
    new: int
    reference: str
    prefill_s: tuple[float, float]  # (onyxia, reference)
    decode_tok_s: tuple[float, float]
    dispatches: int  # per decode step
    same_tokens: bool
    rebuilt: tuple[int, int]  # recompiles, reallocations over one more generation
    decode: DecodeCost | None  # the plan's traffic for one decode step

    @property
    def prefill_ratio(self) -> float:
        """Reference time over onyxia's (> 1: onyxia is faster)."""
        return self.prefill_s[1] / self.prefill_s[0]

    @property
    def decode_ratio(self) -> float:
        return self.decode_tok_s[0] / self.decode_tok_s[1]


def measure(model_dir: Path, prompt_len: int, new: int, repeat: int) -> LlmBench:
    """Load `model_dir` in LlmSession, generate greedily with both engines, and compare."""
    from onyxia.llm import LlmSession
    from onyxia.plan.cost import decode_cost

    start = time.perf_counter()
    session = LlmSession(model_dir, prefill_length=prompt_len)
    load_s = time.perf_counter() - start
    vocab = session.config.vocab_size
    prompt = [int(t) for t in np.random.default_rng(0).integers(4, vocab, prompt_len)]
    new = min(new, session.max_length - len(prompt))

    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError:
        reference, reference_runs = "onnxruntime", onnxruntime_runs(OrtDecoder(model_dir), prompt, new)
    else:
        reference, reference_runs = "genai (CPU)", genai_runs(model_dir, prompt, new)
    (o_prefill, o_speed, o_tokens), (r_prefill, r_speed, r_tokens) = interleaved(
        [onyxia_runs(session, prompt, new), reference_runs], repeat)
    before = (session.executor.stats.recompiles, session.executor.stats.reallocs)
    session.generate(prompt, max_new_tokens=new)  # one more generation: its decode steps must not rebuild
    rebuilt = (session.executor.stats.recompiles - before[0], session.executor.stats.reallocs - before[1])
    return LlmBench(model_dir, num_parameters(model_dir), session.config.type, session.runtime.info.summary, load_s,
                    len(prompt), new, reference, (o_prefill, r_prefill), (o_speed, r_speed),
                    session.dispatches_per_step, o_tokens == r_tokens, rebuilt, decode_cost(session.compiled))


def report(r: LlmBench, repeat: int) -> None:
    print(f"model: {r.model_dir} ({r.parameters / 1e6:.1f}M parameters, {r.family}); "
          f"onyxia compile + load {r.load_s:.1f} s on {r.adapter}")
    print(f"\nprompt {r.prompt} tokens, {r.new} new tokens, median of {repeat} runs, the engines taking turns")
    print(f"{'':24}{'onyxia':>14}{r.reference:>14}{'ratio':>10}")
    print(f"{'prefill (ms)':24}{r.prefill_s[0] * 1e3:14.1f}{r.prefill_s[1] * 1e3:14.1f}{r.prefill_ratio:9.2f}x")
    print(f"{'decode (tokens/s)':24}{r.decode_tok_s[0]:14.1f}{r.decode_tok_s[1]:14.1f}{r.decode_ratio:9.2f}x")
    print(f"dispatches per decode step: {r.dispatches}; same tokens as {r.reference}: {r.same_tokens}")
    print(f"recompiles / reallocations over a generation of {r.new} tokens ({r.new - 1} decode steps): "
          f"{r.rebuilt[0]} / {r.rebuilt[1]}")


def run(model_dir: Path, args: argparse.Namespace) -> None:
    report(measure(model_dir, args.prompt, args.new, args.repeat), args.repeat)


if __name__ == "__main__":
    main()
