"""Soak: 10,000 run/update_dimensions cycles on an LLM folder; memory and wgpu objects must stay flat.

Run: python benchmarks/soak_llm.py [--cycles 10000] [--warmup 500] [--model-dir DIR]

Builds a tiny Llama-style decoder in onnxruntime-genai's layout (tests/llm_models.py) unless
--model-dir points at one. One cycle is one LlmSession.forward: update_dimensions for the new
sequence/past lengths, then a run whose KV cache stays on the GPU. Generations restart when the
cache is full, with prompts of 1 to 8 tokens, so prefill and decode shapes alternate throughout.

Reported at the end of warm-up and at the end: RSS (from /proc/self/statm), wgpu-py's live object
counts per type and resource bytes (wgpu.diagnostics.object_counts), and the executor's
recompiles and reallocations. Passes when RSS grew less than 5% after warm-up and
every object count is unchanged; the exit status says which.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.llm_models

from tests.llm_models import DecoderSpec, build_decoder  # noqa: E402


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def object_counts() -> dict[str, int]:
    """Live wgpu objects per type, and the bytes of GPU resources they hold (wgpu-py's
    diagnostics; this wgpu-native reports no counts of its own)."""
    import wgpu

    table = wgpu.diagnostics.object_counts.get_dict()
    counts = {kind: v["count"] for kind, v in table.items() if kind != "total" and v["count"]}
    counts["resource bytes"] = table["total"].get("resource_mem", 0)
    return counts


def soak(model_dir: Path, cycles: int, warmup: int) -> bool:
    from onyxia.llm import LlmSession

    session = LlmSession(model_dir)
    executor = session.executor
    prompt_lengths = [1, 3, 8, 2, 5]
    done, generation = 0, 0
    marks: dict[str, tuple[int, dict[str, int], int, int, float]] = {}
    rss_start, objects_start = rss_bytes(), object_counts()
    start = time.perf_counter()
    while done < cycles:
        session.reset()
        n = prompt_lengths[generation % len(prompt_lengths)]
        ids = [(generation * 7 + i) % session.config.vocab_size for i in range(n)]
        out = session.forward(ids)
        done += 1
        while done < cycles and session.cache_length < session.max_length:
            out = session.forward([out.token])
            done += 1
            if done == warmup:
                marks["warm"] = (rss_bytes(), object_counts(), executor.stats.recompiles,
                                 executor.stats.reallocs, time.perf_counter() - start)
        generation += 1
    marks["end"] = (rss_bytes(), object_counts(), executor.stats.recompiles, executor.stats.reallocs,
                    time.perf_counter() - start)

    (rss0, objs0, rec0, real0, t0), (rss1, objs1, rec1, real1, t1) = marks["warm"], marks["end"]
    growth = (rss1 - rss0) / rss0
    print(f"model: {model_dir} (max_length {session.max_length}, {session.dispatches_per_step} dispatches/step)")
    print(f"cycles: {cycles} forward passes (update_dimensions + run) in {generation} generations, "
          f"{t1:.1f} s ({(t1 - t0) / max(cycles - warmup, 1) * 1e3:.2f} ms/cycle after warm-up)")
    print(f"at the start (session loaded, nothing run): RSS {rss_start / 2**20:.1f} MiB; wgpu objects "
          + ", ".join(f"{k}={v}" for k, v in sorted(objects_start.items())))
    print(f"RSS after {warmup} warm-up cycles: {rss0 / 2**20:.1f} MiB; at the end: {rss1 / 2**20:.1f} MiB "
          f"(growth {growth * 100:+.2f}%)")
    print(f"recompiles / reallocations: {rec0} / {real0} after warm-up, {rec1} / {real1} at the end")
    print("wgpu objects after warm-up: " + ", ".join(f"{k}={v}" for k, v in sorted(objs0.items())))
    changed = {k: (objs0.get(k, 0), objs1.get(k, 0)) for k in set(objs0) | set(objs1)
               if objs0.get(k, 0) != objs1.get(k, 0)}
    print("wgpu objects at the end:   " + ("unchanged" if not changed else
                                          ", ".join(f"{k}: {a} -> {b}" for k, (a, b) in sorted(changed.items()))))
    ok = growth < 0.05 and not changed and rec1 == rec0 and real1 == real0
    print("soak: OK" if ok else "soak: FAILED")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--model-dir", type=Path, help="an onnxruntime-genai folder (default: build a tiny one)")
    args = parser.parse_args()
    if not 0 < args.warmup < args.cycles:
        parser.error("need 0 < --warmup < --cycles")
    if args.model_dir:
        return 0 if soak(args.model_dir, args.cycles, args.warmup) else 1
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_decoder(DecoderSpec(), Path(tmp) / "tiny-llama")
        return 0 if soak(folder, args.cycles, args.warmup) else 1


if __name__ == "__main__":
    sys.exit(main())
