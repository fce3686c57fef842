"""The fixed host cost of a run: onyxia.InferenceSession.run and PlanExecutor.run per call.

    python benchmarks/bench_host_cost.py [--repeat 200] [--before REV [--rounds 3]] [--profile MODEL]

Models: `add` (one Add of two float[4]), `chain100` (100 tiny elementwise ops compiled without
fusion: 100 dispatches), and the committed torch exports small_cnn, text_encoder and
causal_block (dynamo) at batch 1, seq 8. For each, medians over `--repeat` calls of:

- `total`: wall time of one call;
- `host`: the calling thread's CPU time in that call (feed checks, uploads, dims, encoding,
  submission, mapping, decoding). lavapipe runs the kernels on its own threads, so what the
  calling thread does not spend is the device's time (and the wait for it);
- per dispatch: total / the dispatches the run encodes;
- for the executor path, `null`: the same replay on the NullBackend (runtime/null.py), which
  has no device calls at all: the replay's own Python cost;
- `ort`: onnxruntime's CPU InferenceSession.run on the same model, for reference.

`--before REV` also runs this script on an older revision (exported with `git archive`), round
after round alternating with the working tree so both see the same machine load, and prints
both tables' medians side by side. `--profile MODEL` prints cProfile's top functions of the
session path's calls instead. Wall time on a shared machine includes other processes: compare
within one run only.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[1]
EXPORTED = ROOT / "tests" / "data" / "exported"
MODELS = ["add", "chain100", "small_cnn", "text_encoder", "causal_block"]
COLUMNS = ["session µs", "session host µs", "executor µs", "executor host µs", "null µs",
           "µs/dispatch", "host µs/dispatch", "ort µs"]


def _add_model() -> onnx.ModelProto:
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in ("a", "b")]
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "add", vis,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def _chain_model(length: int) -> onnx.ModelProto:
    nodes, prev = [], "x"
    for i in range(length):
        out = "y" if i == length - 1 else f"t{i}"
        nodes.append(helper.make_node(["Add", "Mul", "Sub"][i % 3], [prev, "c"], [out], name=f"op{i}"))
        prev = out
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor("c", TensorProto.FLOAT, [1], [0.5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def case(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], bool]:
    """(model, feeds, optimize) of a benchmark model."""
    rng = np.random.default_rng(0)
    if name == "add":
        return _add_model(), {"a": rng.standard_normal(4).astype(np.float32),
                              "b": rng.standard_normal(4).astype(np.float32)}, True
    if name == "chain100":  # unfused: the case measures the cost of replaying many dispatches
        return _chain_model(100), {"x": rng.standard_normal(4).astype(np.float32)}, False
    model = onnx.load(str(EXPORTED / f"{name}.dynamo.onnx"))
    feeds = {}
    for vi in model.graph.input:
        shape = [{"batch": 1, "seq": 8}[d.dim_param] if d.dim_param else d.dim_value
                 for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == TensorProto.INT64:
            feeds[vi.name] = (np.ones(shape, np.int64) if "mask" in vi.name
                              else rng.integers(0, 64, shape).astype(np.int64))
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return model, feeds, True


def median_us(fn, repeat: int, clock=time.perf_counter) -> float:
    fn()
    samples = []
    for _ in range(repeat):
        start = clock()
        fn()
        samples.append(clock() - start)
    return statistics.median(samples) * 1e6


def measure(name: str, runtime, repeat: int) -> dict[str, float]:
    import onnxruntime as ort

    import onyxia
    from onyxia.runtime.null import null_executor

    model, feeds, optimize = case(name)
    symbols = {d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
    dims = {k: v for k, v in {"n": 4, "batch": 1, "seq": 8}.items() if k in symbols}
    compiled = onyxia.CompilerPipeline(onyxia.core_operator_registry(), optimize=optimize).compile(
        onyxia.load_model(model), dims)
    # The session path from the ONNX file (dims bound from the feeds), except for the chain,
    # which the session takes as its unfused plan.
    sess = onyxia.InferenceSession(compiled if not optimize else model.SerializeToString(), runtime=runtime)
    sess.run(None, feeds)
    exe = runtime.load_model(compiled)
    null = null_executor(compiled)
    peer = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rows = {
        "session µs": median_us(lambda: sess.run(None, feeds), repeat),
        "session host µs": median_us(lambda: sess.run(None, feeds), repeat, time.thread_time),
        "executor µs": median_us(lambda: exe.run(feeds), repeat),
        "executor host µs": median_us(lambda: exe.run(feeds), repeat, time.thread_time),
        "null µs": median_us(lambda: null.run(feeds), repeat, time.thread_time),
        "ort µs": median_us(lambda: peer.run(None, feeds), repeat),
    }
    dispatches = max(exe.dispatches_per_run, 1)
    rows["µs/dispatch"] = rows["executor µs"] / dispatches
    rows["host µs/dispatch"] = rows["executor host µs"] / dispatches
    rows["dispatches"] = exe.dispatches_per_run
    return rows


def profile(name: str, runtime, repeat: int) -> None:
    import onyxia

    model, feeds, optimize = case(name)
    source = model.SerializeToString() if optimize else onyxia.CompilerPipeline(
        onyxia.core_operator_registry(), optimize=False).compile(onyxia.load_model(model), {"n": 4})
    sess = onyxia.InferenceSession(source, runtime=runtime)
    sess.run(None, feeds)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(repeat):
        sess.run(None, feeds)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def table(results: dict[str, dict[str, float]]) -> None:
    print(f"{'model':<13} {'disp':>5} " + " ".join(f"{c:>16}" for c in COLUMNS))
    for name, row in results.items():
        print(f"{name:<13} {int(row['dispatches']):5d} " + " ".join(f"{row[c]:16.1f}" for c in COLUMNS))


def run_tree(tree: Path, repeat: int) -> dict[str, dict[str, float]]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, str(tree / "benchmarks" / "bench_host_cost.py"), "--repeat", str(repeat),
                          "--json"], cwd=tree, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def compare(before: str, rounds: int, repeat: int) -> None:
    samples: dict[str, list[dict[str, dict[str, float]]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="onyxia-before-") as tmp:
        old = Path(tmp)
        archive = subprocess.run(["git", "archive", before], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        (old / "benchmarks").mkdir(exist_ok=True)
        shutil.copy(Path(__file__), old / "benchmarks" / "bench_host_cost.py")
        for _ in range(rounds):
            for label, tree in (("before", old), ("after", ROOT)):
                samples[label].append(run_tree(tree, repeat))
    print(f"{rounds} rounds x {repeat} calls, medians of the per-round medians; before = {before}, "
          "after = working tree")
    for label in ("before", "after"):
        print(f"\n{label}:")
        table({name: {c: statistics.median(r[name][c] for r in samples[label]) for c in [*COLUMNS, "dispatches"]}
               for name in samples[label][0]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--models", nargs="*", default=MODELS, choices=MODELS)
    parser.add_argument("--before", help="git revision to compare with (run round after round)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", choices=MODELS, help="cProfile the session path of one model")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # --before's child runs
    args = parser.parse_args()
    if args.before:
        compare(args.before, args.rounds, args.repeat)
        return
    from onyxia.runtime import Runtime

    runtime = Runtime()
    if args.profile:
        profile(args.profile, runtime, args.repeat)
        return
    results = {name: measure(name, runtime, args.repeat) for name in args.models}
    if args.json:
        print(json.dumps(results))
        return
    print(f"adapter: {runtime.info.summary}; medians of {args.repeat} calls")
    table(results)


if __name__ == "__main__":
    main()
