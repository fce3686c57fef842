"""Load latency of a model through InferenceSession, each phase a fresh process (issue 24):

- cold: fresh onyxia caches (plan cache, tuning cache): `InferenceSession(path)` then one run,
  with the load report's split (parse, compile, plan cache, device, buffers, render, modules,
  pipelines, first run);
- warm: a second process on those caches, then the state later runs leave (waiting kernel
  choices timed, pipelines built ahead) and a run at a second input shape: its time beyond a
  settled run there, and what it built, timed and recompiled on the way (all should be 0).

Mesa's own shader cache (lavapipe compiles each kernel with LLVM at its first dispatch) is
whatever MESA_SHADER_CACHE_DIR says; `--mesa-cold` gives each process an empty one.

Run: python benchmarks/bench_load_latency.py MODEL.onnx [--input pixel_values] [--shape 1,3,224,224]
     [--shape2 2,3,160,160] [--mesa-cold]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(path: str, name: str, shape: tuple[int, ...], shape2: tuple[int, ...] | None) -> dict:
    """One process's measurement (see the module doc)."""
    start = time.perf_counter()
    import numpy as np

    import onyxia
    out: dict = {"import_s": time.perf_counter() - start}
    rng = np.random.default_rng(0)
    feed = {name: rng.standard_normal(shape, dtype=np.float32)}
    start = time.perf_counter()
    sess = onyxia.InferenceSession(path)
    sess.run(None, feed)
    out["first_result_s"] = time.perf_counter() - start
    out["split_ms"] = {row: round(s * 1e3, 1) for row, s in sess.load_report.rows()}
    exe = sess.executor
    if shape2 is None:
        return out
    exe.tune()  # as later runs leave it: every waiting choice timed, pipelines built ahead
    while getattr(exe, "_ahead", None):
        exe._ahead_slice()
    feed2 = {name: rng.standard_normal(shape2, dtype=np.float32)}
    st = exe.stats
    before = (st.load.pipelines, st.tuning_timings, st.recompiles)
    start = time.perf_counter()
    sess.run(None, feed2)
    first = time.perf_counter() - start
    out["shape2_built_timed_recompiled"] = [a - b for a, b in zip((st.load.pipelines, st.tuning_timings,
                                                                    st.recompiles), before)]
    exe.tune()
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        sess.run(None, feed2)
        runs.append(time.perf_counter() - start)
    out["shape2_first_s"], out["shape2_over_settled_s"] = first, first - min(runs)
    out["plans_compiled"] = sess.stats.compiles
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--input", default="pixel_values")
    p.add_argument("--shape", default="1,3,224,224")
    p.add_argument("--shape2", default="2,3,160,160")
    p.add_argument("--mesa-cold", action="store_true", help="an empty Mesa shader cache per process")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    shape = tuple(int(x) for x in args.shape.split(","))
    if args.child:
        shape2 = tuple(int(x) for x in args.shape2.split(",")) if args.child == "warm" else None
        print(json.dumps(child(args.model, args.input, shape, shape2)))
        return
    with tempfile.TemporaryDirectory(prefix="onyxia-load-") as tmp:
        env = {**os.environ, "ONYXIA_CACHE_DIR": str(Path(tmp) / "onyxia"),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        for phase in ("cold", "warm"):
            if args.mesa_cold:
                env["MESA_SHADER_CACHE_DIR"] = tempfile.mkdtemp(dir=tmp, prefix="mesa-")
            done = subprocess.run([sys.executable, __file__, args.model, "--input", args.input, "--shape", args.shape,
                                   "--shape2", args.shape2, "--child", phase], env=env, capture_output=True, text=True)
            if done.returncode:
                sys.exit(done.stderr)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{phase}: first result {result.pop('first_result_s'):.2f} s (import {result.pop('import_s'):.2f} s "
                  "before it)")
            for row, ms in result.pop("split_ms").items():
                print(f"  {row:<28} {ms:10.1f} ms")
            for key, value in result.items():
                print(f"  {key}: {round(value, 3) if isinstance(value, float) else value}")


if __name__ == "__main__":
    main()
