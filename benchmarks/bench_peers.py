"""onyxia vs wonnx vs onnxruntime (CPU), side by side in one run, on three GEMM-bound and
bandwidth-bound graphs.

Run: python benchmarks/bench_peers.py [--repeat 7] [--cases matmul,mlp,unary]
                                      [--wonnx-python /path/to/venv/bin/python]

Cases (the same model file and feeds for every engine):
- `matmul`: one MatMul 1024 x 1024 x 1024, both operands graph inputs (uploaded every run);
- `mlp`: 4 x (MatMul [64, 1024] by a constant [1024, 1024] weight + Add constant bias + Relu),
  the input a graph input;
- `unary`: 8 unary ops chained (Abs, Neg, Exp, Sqrt, Sin, Cos, Tanh, Sigmoid) on 4M floats.

Times are medians over `--repeat` runs after one warm-up, each the wall time of one inference
call: onyxia `PlanExecutor.run` (numpy in, numpy out), onnxruntime `InferenceSession.run`, wonnx
`Session.run`, which takes flat Python lists (made before timing) and returns lists (their
conversion is part of its API, so it is timed). wonnx 0.5.1 is not a dependency of onyxia: it
runs in a subprocess from the interpreter given by --wonnx-python (or $WONNX_PYTHON; a venv with
`pip install wonnx==0.5.1 onnx numpy`), or in this process when it can be imported here. Models
are shape-inferred (wonnx needs every intermediate's shape). On lavapipe onyxia and wonnx run on
the same CPU cores as onnxruntime: the ratios compare kernels and replay, not GPU speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

UNARY_CHAIN = ("Abs", "Neg", "Exp", "Sqrt", "Sin", "Cos", "Tanh", "Sigmoid")
UNARY_SHAPE = (1024, 4096)  # 4M floats


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    value = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "bench", [value(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [value(n, TensorProto.FLOAT, None) for n in outputs],
                              [numpy_helper.from_array(v, n) for n, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)


def build(case: str, rng: np.random.Generator) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    if case == "matmul":
        n = 1024
        model = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", [n, n]), ("b", [n, n])], ["y"])
        return model, {"a": rng.standard_normal((n, n), np.float32), "b": rng.standard_normal((n, n), np.float32)}
    if case == "mlp":
        nodes, inits, x = [], [], "x"
        for layer in range(4):
            w = (rng.standard_normal((1024, 1024), np.float32) / 32).astype(np.float32)
            inits += [(f"w{layer}", w), (f"b{layer}", rng.standard_normal(1024, np.float32) * 0.1)]
            nodes += [helper.make_node("MatMul", [x, f"w{layer}"], [f"m{layer}"]),
                      helper.make_node("Add", [f"m{layer}", f"b{layer}"], [f"s{layer}"]),
                      helper.make_node("Relu", [f"s{layer}"], [f"h{layer}"])]
            x = f"h{layer}"
        return _model(nodes, [("x", [64, 1024])], [x], inits), {"x": rng.standard_normal((64, 1024), np.float32)}
    if case == "unary":
        nodes, x = [], "x"
        for i, op in enumerate(UNARY_CHAIN):
            nodes.append(helper.make_node(op, [x], [f"u{i}"]))
            x = f"u{i}"
        return _model(nodes, [("x", list(UNARY_SHAPE))], [x]), {"x": rng.standard_normal(UNARY_SHAPE, np.float32)}
    raise SystemExit(f"unknown case {case!r}")


def median_s(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    out = fn()  # warm-up: pipelines, staging buffers, caches
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples), out


def time_onyxia(model, feeds, repeat: int):
    import onyxia
    from onyxia.runtime import Runtime

    compiled = onyxia.CompilerPipeline(onyxia.core_operator_registry()).compile(onyxia.load_model(model), {})
    exe = Runtime().load_model(compiled)
    name = compiled.outputs[0]
    return median_s(lambda: exe.run(feeds)[name], repeat), len(compiled.steps)


def time_ort(model, feeds, repeat: int):
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return median_s(lambda: sess.run(None, feeds)[0], repeat)


# Runs where wonnx is importable: argv = model path, feeds .npz, repeat; prints JSON.
WONNX_WORKER = r"""
import json, statistics, sys, time
import numpy as np, wonnx
model, feeds_path, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
feeds = dict(np.load(feeds_path))
lists = {k: v.ravel().tolist() for k, v in feeds.items()}
sess = wonnx.Session.from_path(model)
out = sess.run(lists)
samples = []
for _ in range(repeat):
    t = time.perf_counter()
    sess.run(lists)
    samples.append(time.perf_counter() - t)
name = next(iter(out))
np.save(feeds_path + ".out.npy", np.asarray(out[name], np.float32))
print(json.dumps({"median_s": statistics.median(samples)}))
"""


def time_wonnx(model, feeds, repeat: int, python: str | None) -> tuple[float | None, np.ndarray | None, str]:
    with tempfile.TemporaryDirectory(prefix="onyxia-peers-") as tmp:
        path = Path(tmp) / "model.onnx"
        onnx.save(model, path)
        np.savez(Path(tmp) / "feeds.npz", **feeds)
        cmd = [python or sys.executable, "-c", WONNX_WORKER, str(path), str(Path(tmp) / "feeds.npz"), str(repeat)]
        # wonnx gets the user's environment: not the lavapipe thread count onyxia set for itself
        from onyxia.runtime.device import DRIVER_ENV_SET

        env = {k: v for k, v in os.environ.items() if k not in DRIVER_ENV_SET}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
        if proc.returncode != 0:
            return None, None, (proc.stderr.strip().splitlines() or ["failed"])[-1][:120]
        out = np.load(Path(tmp) / "feeds.npz.out.npy")
        return json.loads(proc.stdout.strip().splitlines()[-1])["median_s"], out, ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--cases", default="matmul,mlp,unary")
    parser.add_argument("--wonnx-python", default=os.environ.get("WONNX_PYTHON"),
                        help="interpreter with wonnx==0.5.1 installed (default: this one)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for case in args.cases.split(","):
        model, feeds = build(case, rng)
        t_ort, ref = time_ort(model, feeds, args.repeat)
        (t_ony, ours), steps = time_onyxia(model, feeds, args.repeat)
        t_won, theirs, why = time_wonnx(model, feeds, args.repeat, args.wonnx_python)
        err_ony = float(np.abs(np.asarray(ours) - ref).max())
        err_won = float(np.abs(theirs.reshape(ref.shape) - ref).max()) if theirs is not None else None
        rows.append((case, steps, t_ony, t_won, t_ort, err_ony, err_won, why))
    print(f"{'case':8} {'steps':>5} {'onyxia ms':>10} {'wonnx ms':>10} {'ort ms':>9} {'ony/wonnx':>10} "
          f"{'ony/ort':>8}  max|diff| vs ort (onyxia, wonnx)")
    for case, steps, t_ony, t_won, t_ort, err_ony, err_won, why in rows:
        won = f"{t_won * 1e3:10.1f}" if t_won is not None else f"{'n/a':>10}"
        ratio = f"{t_ony / t_won:10.2f}" if t_won is not None else f"{'n/a':>10}"
        errs = f"{err_ony:.2g}, " + (f"{err_won:.2g}" if err_won is not None else f"wonnx failed: {why}")
        print(f"{case:8} {steps:5d} {t_ony * 1e3:10.1f} {won} {t_ort * 1e3:9.1f} {ratio} {t_ony / t_ort:8.2f}  {errs}")


if __name__ == "__main__":
    main()
