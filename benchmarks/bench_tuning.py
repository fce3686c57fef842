"""The autotuner against the heuristic, side by side in one run: for a weight product y = a @ W
(K x N, M = rows symbolic) at several row counts, the median run() time with the heuristic's
kernel choice (ONYXIA_TUNE=0) and with the tuned choice, the ratio, the choices, and what the
tuning cost (alternatives timed, seconds) — plus the cost of a second load with the cache warm.

Run: python benchmarks/bench_tuning.py [--k 512] [--n 1408] [--rows 1,8,32,256] [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onyxia  # noqa: E402
from onyxia.runtime import Runtime  # noqa: E402
from onyxia.runtime.select import SelectCommand
from onyxia.runtime.tuner import TuneSettings  # noqa: E402


def product_model(k: int, n: int):
    w = numpy_helper.from_array((np.random.default_rng(0).standard_normal((k, n)) / 32).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "product",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["m", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", n])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def median_run(exe, feeds, repeat: int) -> float:
    exe.run(feeds)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        exe.run(feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--n", type=int, default=1408)
    ap.add_argument("--rows", default="1,8,32,256")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    graph = onyxia.load_model(product_model(args.k, args.n))
    compiled = onyxia.CompilerPipeline(onyxia.core_operator_registry()).compile(graph, {"m": max(rows)})
    runtime = Runtime()
    print(f"{runtime.info.summary}; y = a[M, {args.k}] @ W[{args.k}, {args.n}]; medians of {args.repeat} runs")
    with tempfile.TemporaryDirectory() as cache:
        tuned_settings = TuneSettings(enabled=True, cache_dir=Path(cache))
        heuristic = runtime.load_model(compiled, tuning=TuneSettings(enabled=False))
        start = time.perf_counter()
        tuned = runtime.load_model(compiled, tuning=tuned_settings)
        load_s = time.perf_counter() - start
        print(f"{'M':>5} {'heuristic':>10} {'ms':>9} {'tuned':>10} {'ms':>9} {'tuned/heur':>10}  timed")
        for m in rows:
            feeds = {"a": np.random.default_rng(m).standard_normal((m, args.k)).astype(np.float32)}
            picks = []
            for exe in (heuristic, tuned):
                exe.update_dimensions({"m": m})
                before = exe.stats.tuning_timings
                exe.run(feeds)  # the first run at a new shape class: the heuristic's choice, untimed
                exe.run(feeds)  # the tuned executor times the class here
                picks.append((next(c for c in exe.commands if isinstance(c, SelectCommand) and c.tuned),
                              exe.stats.tuning_timings - before))
            h_ms, t_ms = (median_run(exe, feeds, args.repeat) * 1e3 for exe in (heuristic, tuned))
            (hc, _), (tc, timed) = picks
            print(f"{m:>5} {hc.step.labels[hc.chosen]:>10} {h_ms:9.3f} {tc.step.labels[tc.chosen]:>10} "
                  f"{t_ms:9.3f} {t_ms / h_ms:10.2f}  {timed}")
        start = time.perf_counter()
        again = runtime.load_model(compiled, tuning=tuned_settings)
        print(f"load (nothing timed): {load_s:.2f} s; second load (cache warm): {time.perf_counter() - start:.2f} s, "
              f"{again.stats.tuning_timings} alternatives timed")


if __name__ == "__main__":
    main()
