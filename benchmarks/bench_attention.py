"""GroupQueryAttention's dispatches alone, timed with GPU timestamps, kernels side by side.

Run: python benchmarks/bench_attention.py [--seq 14 64 1] [--past 0] [--capacity 1024] [--repeat 7]
     python benchmarks/bench_attention.py --model-dir DIR [--seq 14 64] [--repeat 5]

One GQA node shaped like an LLM layer (default: the ~30M Llama onnxruntime-genai exports, 8 query
heads, 4 KV heads, head size 64, packed QKV, rotary inside GQA, the shared-buffer cache of
capacity --capacity), compiled once; for each sequence length (prefill rows; 1 is a decode step
after --past + 64 cached tokens) and each attention kernel that applies, the median over --repeat
timed runs of each dispatch the node runs (microseconds). Kernels are picked through the
operator's `flash` option (None: the plan's choice) and the plan's adapter symbol, so the old and
new prefill kernels run in one process on the same adapter.

With --model-dir (an LLM folder), its prompt of each --seq length instead: the whole prefill's
dispatches timed, summed per op type and for the attention kernels, with either prompt kernel.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from onnx import helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.helpers

import onyxia  # noqa: E402
from onyxia.compiler import CompilerPipeline  # noqa: E402
from onyxia.operators import core_operator_registry  # noqa: E402
from onyxia.operators.attention.gqa import SHARE_BUFFER_ATTR, GroupQueryAttention  # noqa: E402
from onyxia.runtime.profile import time_dispatches  # noqa: E402
from tests.helpers import make_model  # noqa: E402


def gqa_layer(heads: int, kv_heads: int, head: int, capacity: int, max_pos: int) -> object:
    width = (heads + 2 * kv_heads) * head
    angles = np.random.default_rng(0).random((max_pos, head // 2)).astype(np.float32) * 3
    node = helper.make_node("GroupQueryAttention", ["qkv", "", "", "pk", "pv", "sl", "tl", "cos", "sin"],
                            ["o", "prk", "prv"], domain="com.microsoft", num_heads=heads, kv_num_heads=kv_heads,
                            do_rotary=1, scale=1.0 / head ** 0.5)
    cache = [1, kv_heads, capacity, head]
    return make_model([node], [("qkv", np.float32, [1, "S", width]), ("pk", np.float32, cache),
                               ("pv", np.float32, cache), ("sl", np.int32, [1]), ("tl", np.int32, [])],
                      ["o", "prk", "prv"], {"cos": np.cos(angles), "sin": np.sin(angles)},
                      extra_opsets={"com.microsoft": 1})


def compile_layer(model, seq: int, flash: bool | None):
    graph = onyxia.load_model(model)
    for node in graph.nodes:
        node.attributes[SHARE_BUFFER_ATTR] = 1
    registry = core_operator_registry().copy()
    if flash is not None:
        registry.register(GroupQueryAttention(flash=flash))
    return CompilerPipeline(registry).compile(graph, {"S": seq})


def profile_folder(model_dir: str, seqs: list[int], repeat: int) -> None:
    from onyxia.llm import LlmSession

    runtime = onyxia.Runtime()
    sessions = {}
    for name, flash in (("current", False), ("flash", True)):
        registry = core_operator_registry().copy().register(GroupQueryAttention(flash=flash))
        sessions[name] = LlmSession(model_dir, runtime=runtime, registry=registry, prefill_length=max(seqs))
    print(f"adapter: {runtime.info.summary}; {model_dir}")
    for seq in seqs:
        prompt = list(np.random.default_rng(seq).integers(4, 1000, seq))
        feeds = {}
        for session in sessions.values():  # the feeds a prompt's forward pass gives the executor
            exe, run = session.executor, session.executor.run
            exe.run = lambda f, **kw: (feeds.update(f), run(f, **kw))[1]  # type: ignore[method-assign]
            session.reset()
            session.forward(prompt)
            exe.run = run  # type: ignore[method-assign]
        totals: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in sessions}
        for _ in range(repeat):
            for name, session in sessions.items():
                per: dict[str, float] = defaultdict(float)
                for t in time_dispatches(session.executor, feeds):
                    per["all"] += t.nanoseconds / 1e6
                    per[t.op_type] += t.nanoseconds / 1e6
                    if t.op_type == "GroupQueryAttention":
                        per[t.shader] += t.nanoseconds / 1e6
                for key, ms in per.items():
                    totals[name][key].append(ms)
        for name, per_key in totals.items():
            gqa = {k: v for k, v in per_key.items() if k.startswith(("gqa", "attention"))}
            cells = "  ".join(f"{k} {statistics.median(v):6.2f}" for k, v in gqa.items() if max(v) > 0.05)
            print(f"prompt {seq:4d} {name:8s}: all dispatches {statistics.median(per_key['all']):7.2f} ms (min "
                  f"{min(per_key['all']):7.2f}), GroupQueryAttention "
                  f"{statistics.median(per_key['GroupQueryAttention']):6.2f}"
                  f" ms: {cells}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, nargs="+", default=[14, 64, 1])
    ap.add_argument("--past", type=int, default=0, help="cached tokens before a prefill")
    ap.add_argument("--capacity", type=int, default=1024)
    ap.add_argument("--heads", type=int, nargs=3, default=[8, 4, 64], metavar=("H", "KVH", "D"))
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--model-dir", help="an LLM folder: profile its prefill instead (the prompt lengths of --seq)")
    args = ap.parse_args()
    if args.model_dir:
        return profile_folder(args.model_dir, [s for s in args.seq if s > 1], args.repeat)
    heads, kv_heads, head = args.heads
    model = gqa_layer(heads, kv_heads, head, args.capacity, args.capacity)
    runtime = onyxia.Runtime()
    print(f"adapter: {runtime.info.summary}; H={heads} KVH={kv_heads} D={head} capacity={args.capacity}")
    rng = np.random.default_rng(1)
    cache = rng.standard_normal((1, kv_heads, args.capacity, head)).astype(np.float32)
    variants = {"current": False, "flash": True}
    exes = {name: runtime.load_model(compile_layer(model, max(args.seq), flash)) for name, flash in variants.items()}
    for seq in args.seq:
        past = args.past + (64 if seq == 1 else 0)
        feeds = {"qkv": rng.standard_normal((1, seq, (heads + 2 * kv_heads) * head)).astype(np.float32),
                 "pk": cache, "pv": cache, "sl": np.array([past + seq - 1], np.int32),
                 "tl": np.array(past + seq, np.int32)}
        for name, exe in exes.items():
            for cpu in (1, 0):
                exe.update_dimensions({"S": seq})
                exe.assume_adapter("cpu" if cpu else "gpu")
                times: dict[tuple[int, str], list[float]] = defaultdict(list)
                for _ in range(args.repeat):
                    for i, t in enumerate(time_dispatches(exe, feeds)):
                        times[i, t.shader].append(t.nanoseconds / 1e3)
                # a variant's dispatch with an empty grid still shows a few µs: only the one that ran
                live = {}
                for (_, label), v in times.items():
                    if statistics.median(v) > statistics.median(live.get(label, [0.0])):
                        live[label] = v
                cells = "  ".join(f"{label} {statistics.median(v):8.1f} (min {min(v):8.1f})"
                                  for label, v in live.items())
                kind = "cpu-type" if cpu else "gpu-type"
                print(f"S={seq:4d} past={past:5d} {name:8s} {kind}: {cells}")


if __name__ == "__main__":
    main()
