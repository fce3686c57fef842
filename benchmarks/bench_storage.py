"""Device memory and bytes moved per decode step with native storage vs the f32-widened plan.

Run: python benchmarks/bench_storage.py [--model-dir DIR ...] [--prompt 64] [--new 32]

For each LLM folder (default: the webgpu-fp16 fixtures under tests/data/llm/genai; e.g. the
~30M-parameter folder `tools/build_llm_fixtures.py --big DIR` writes), one LlmSession compiles
the plan, then:
- device weights against the folder's data file, and the KV cache's bytes per element;
- bytes moved per decode step, estimated from the plan: every dispatch a one-token step runs
  (kernels whose grid is empty at one token are skipped) counted with the full size of every
  buffer it binds at the decode dims, except a gather's table, counted as the rows it gathers.
  The same sum with each float16 tensor at 4 bytes an element is what the f32-widened storage
  (float16 held as f32 words, onyxia before native storage) moved for the same dispatches;
- decode tokens per second on this adapter (lavapipe: the "GPU" is the CPU, a relative number).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from onyxia.ir.dtypes import from_name  # noqa: E402
from onyxia.ir.shapes import SymDim  # noqa: E402
from onyxia.llm import LlmSession  # noqa: E402

GATHERS = ("gather_Gather", "gather_block_quantized")


def _value(d, dims):
    return d.evaluate(dims) if isinstance(d, SymDim) else d


def bytes_moved(compiled, dims: dict[str, int], widen_f16: bool = False) -> int:
    """Bytes the dispatches of one run at `dims` read and write (see the module docstring)."""
    def nbytes(name: str) -> int:
        t = compiled.tensors[name]
        count = math.prod(int(_value(d, dims)) for d in t.shape)
        dtype = from_name(t.dtype)
        return 4 * count if widen_f16 and dtype.name == "float16" else int(dtype.nbytes(count))

    total = 0
    for step in compiled.steps:
        for d in step.dispatches():
            if not all(_value(w, dims) for w in d.workgroups):
                continue  # the kernel this M does not run (gemv vs tiled)
            spec = compiled.shaders[d.shader]
            writes = [b.tensor for b in d.bindings if not b.read_only]
            for buf, b in zip(spec.buffers, d.bindings):
                gathered = spec.label.startswith(GATHERS) and buf.name in ("x", "b")
                total += sum(nbytes(w) for w in writes[:1]) if gathered else nbytes(b.tensor)
    return total


def decode_dims(session: LlmSession, cached: int) -> dict[str, int]:
    io = session.io
    dims = {**session.executor.dims, io.sequence: 1}
    if io.past:
        dims[io.past] = session.max_length if session.share_buffer else cached
    if io.total:
        dims[io.total] = cached + 1
    return dims


def mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def report(model_dir: Path, prompt_len: int, new: int) -> list[str]:
    session = LlmSession(model_dir, max_length=prompt_len + new + 8)
    compiled = session.compiled
    data = sum(p.stat().st_size for p in model_dir.glob("*.onnx.data")) or sum(
        p.stat().st_size for p in model_dir.glob("*.onnx"))
    weights = sum(int(t.nbytes) for t in compiled.tensors.values() if t.data is not None)
    caches = [compiled.tensors[p] for _, p in session.io.kv]
    cache_bytes = {from_name(t.dtype).bits // 8 for t in caches}
    dims = decode_dims(session, prompt_len + new // 2)
    native, widened = bytes_moved(compiled, dims), bytes_moved(compiled, dims, widen_f16=True)
    prompt = [(7 * i + 3) % 100 + 4 for i in range(prompt_len)]
    session.generate(prompt, max_new_tokens=4)  # warm-up: pipelines, staging buffers
    session.generate(prompt, max_new_tokens=new)
    speed = session.stats.decode_tokens_per_second
    return [
        f"{model_dir.name}: device weights {mib(weights)} for a {mib(data)} data file "
        f"(ratio {weights / data:.3f}); KV cache {sorted(cache_bytes)} byte(s) per element",
        f"  bytes moved per decode step: native {mib(native)}, f32-widened {mib(widened)} "
        f"(native / widened {native / widened:.3f}); {session.dispatches_per_step} dispatches",
        f"  decode on {session.executor.runtime.info.name}: {speed:.1f} tok/s",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", action="append", type=Path, help="LLM folder (repeatable)")
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=32)
    args = parser.parse_args()
    dirs = args.model_dir or sorted((ROOT / "tests" / "data" / "llm" / "genai").glob("*-webgpu-fp16"))
    for d in dirs:
        for line in report(d, args.prompt, args.new):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
