"""transformers.js q8 and bnb4 decoders: their fused / packed kernels on and off, side by side in one run.

Run: python benchmarks/bench_q8.py [--prompt 16] [--new 64] [--repeat 5] [--big]

Decoders whose MatMuls onnxruntime's quantize_dynamic wrote as DynamicQuantizeLinear ->
MatMulInteger -> Cast -> Mul (transformers.js' "q8" files):
- tests/data/llm/transformersjs/llama, decoder q8 (the 2-layer fixture);
- with --big, benchmarks/bench_llm.py's ~32M-parameter Llama decoder (hidden 512, 8 layers, MLP
  1408, vocabulary 8000, random weights) quantized by onnxruntime.quantization.quantize_dynamic
  (int8 weights, per tensor: the q8 recipe).
Each is compiled twice in one process: as main compiled it before the pass (the chain expanded
op by op) and with the pass (one DynamicQuantMatMul per MatMul). Then the fixture's bnb4 decoder
(MatMulBnb4, NF4), twice: its weights dequantized to float at compile time as before (the op's
decomposition) and kept packed (the lookup-table kernel). For both of a pair: dispatches per
decode step (LlmSession.dispatches_per_step), the device bytes of the weights, prefill ms and
decode tokens/s (LlmSession.stats: medians of --repeat greedy generations, the two compiled plans
taking turns), and whether their tokens are equal. On lavapipe the "GPU" is the machine's CPU.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.llm_models
sys.path.insert(0, str(Path(__file__).resolve().parent))  # for bench_llm

from bench_llm import BENCH_SPEC, interleaved, onyxia_runs  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "data" / "llm" / "transformersjs" / "llama"


@contextmanager
def without_fusion():
    """CompilerPipeline's default passes without DynamicQuantFusionPass, as before it existed."""
    import onyxia.compiler.pipeline as pipeline

    default = pipeline.default_optimization_passes
    pipeline.default_optimization_passes = lambda: [p for p in default() if p.name != "dynamic-quant-fusion"]
    try:
        yield
    finally:
        pipeline.default_optimization_passes = default


@contextmanager
def bnb4_as_float():
    """MatMulBnb4 as its decomposition (weights folded to float), as before the packed kernel."""
    from onyxia.operators.quantized.matmul_bnb4 import MatMulBnb4

    packed = MatMulBnb4.runs_as_function
    MatMulBnb4.runs_as_function = lambda self, node: True
    try:
        yield
    finally:
        MatMulBnb4.runs_as_function = packed


def weight_bytes(session) -> int:
    """Bytes of the weights the plan holds on the device."""
    from onyxia.plan.cost import tensor_bytes

    env = dict(session.compiled.dims)
    return sum(tensor_bytes(t, env) for t in session.compiled.tensors.values() if t.kind == "weight")


def quantized_bench_decoder(tmp: Path) -> tuple[Path, str]:
    """bench_llm's decoder folder with a quantize_dynamic copy of its model, and that file's name."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from tests.llm_models import build_decoder

    folder = build_decoder(BENCH_SPEC, tmp / "decoder")
    quantize_dynamic(str(folder / "model.onnx"), str(folder / "model_q8.onnx"), weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": TensorProto.FLOAT})
    return folder, "model_q8.onnx"


def compare(folder: Path, decoder: str, prompt_len: int, new: int, repeat: int, before=without_fusion) -> None:
    """`before` (a context manager compiling as main did) beside the plan compiled as it is."""
    from onyxia.llm import LlmSession

    sessions = {}
    for label in ("before", "after"):
        start = time.perf_counter()
        if label == "before":
            with before():
                sessions[label] = LlmSession(folder, decoder=decoder, prefill_length=prompt_len)
        else:
            sessions[label] = LlmSession(folder, decoder=decoder, prefill_length=prompt_len)
        print(f"{label}: compile + load {time.perf_counter() - start:.1f} s")
    session = sessions["after"]
    vocab = session.config.vocab_size
    prompt = [int(t) for t in np.random.default_rng(0).integers(4, vocab, prompt_len)]
    new = min(new, session.max_length - len(prompt))
    runs = interleaved([onyxia_runs(s, prompt, new) for s in sessions.values()], repeat)
    print(f"\n{folder} ({decoder}): prompt {prompt_len} tokens, {new} new, median of {repeat} runs taking turns, "
          f"on {session.runtime.info.summary}")
    print(f"{'':28}{'before':>12}{'after':>12}{'ratio':>10}")
    dispatches = [s.dispatches_per_step for s in sessions.values()]
    print(f"{'dispatches per decode step':28}{dispatches[0]:12d}{dispatches[1]:12d}"
          f"{dispatches[0] / dispatches[1]:9.2f}x")
    weights = [weight_bytes(s) for s in sessions.values()]
    print(f"{'weights on the device (B)':28}{weights[0]:12d}{weights[1]:12d}{weights[0] / weights[1]:9.2f}x")
    prefill = [r[0] * 1e3 for r in runs]
    print(f"{'prefill (ms)':28}{prefill[0]:12.1f}{prefill[1]:12.1f}{prefill[0] / prefill[1]:9.2f}x")
    speed = [r[1] for r in runs]
    print(f"{'decode (tokens/s)':28}{speed[0]:12.1f}{speed[1]:12.1f}{speed[1] / speed[0]:9.2f}x")
    print(f"same tokens: {runs[0][2] == runs[1][2]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=16, help="prompt tokens (16)")
    parser.add_argument("--new", type=int, default=64, help="tokens to generate (64)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per plan (5)")
    parser.add_argument("--big", action="store_true", help="also bench_llm's 32M decoder, quantized dynamically")
    args = parser.parse_args()
    compare(FIXTURE, "q8", args.prompt, args.new, args.repeat)
    compare(FIXTURE, "bnb4", args.prompt, args.new, args.repeat, before=bnb4_as_float)
    if args.big:
        with tempfile.TemporaryDirectory() as tmp:
            folder, decoder = quantized_bench_decoder(Path(tmp))
            compare(folder, decoder, args.prompt, args.new, args.repeat)


if __name__ == "__main__":
    main()
