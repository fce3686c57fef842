"""What host control flow costs: the GPU syncs of ReadSymbol, BranchStep and a LoopStep's
condition, against the same work planned without them.

    python benchmarks/bench_host_control.py [--repeat 30]

Pairs, each measured side by side in one run (median wall time of run()):

- `topk k`: TopK with k a constant (no data symbol) vs k fed as a graph input (a data symbol
  set from the host feed: no sync) vs k computed on the device (one ReadSymbol sync);
- `if`: an If on a constant condition (the taken branch inlined) vs on a fed condition (one
  BranchStep sync);
- `loop`: a 16-iteration Loop whose condition folds to true (no sync) vs one whose condition is
  computed in the body (a sync after every iteration but the last).
The differences are the syncs' cost on this adapter. Wall time on a shared machine includes
other processes: compare within one run only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as h

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.*

import onyxia  # noqa: E402
from onyxia.compiler import CompilerPipeline  # noqa: E402
from onyxia.operators import core_operator_registry  # noqa: E402
from tests.control_models import counting_loop, if_model  # noqa: E402
from tests.helpers import make_model  # noqa: E402


def topk(kind: str):
    x = ("x", np.float32, (4, 256))
    if kind == "constant":
        return make_model([h.make_node("TopK", ["x", "k"], ["v", "i"])], [x], ["v", "i"],
                          {"k": np.array([8], np.int64)})
    if kind == "fed":
        return make_model([h.make_node("TopK", ["x", "k"], ["v", "i"])], [x, ("k", np.int64, (1,))], ["v", "i"])
    # computed: k = ReduceMax(int(x > 0.99)) + 8, known only on the device
    nodes = [h.make_node("Greater", ["x", "c"], ["g"]), h.make_node("Cast", ["g"], ["gi"], to=TP.INT64),
             h.make_node("ReduceMax", ["gi"], ["m"], keepdims=0), h.make_node("Add", ["m", "eight"], ["k0"]),
             h.make_node("Reshape", ["k0", "one"], ["k"]), h.make_node("TopK", ["x", "k"], ["v", "i"])]
    return make_model(nodes, [x], ["v", "i"], {"c": np.array(0.99, np.float32), "eight": np.array(8, np.int64),
                                                "one": np.array([1], np.int64)})


def timed(exe, feeds, repeat: int) -> float:
    exe.run(feeds)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        exe.run(feeds)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    runtime = onyxia.Runtime()
    pipeline = CompilerPipeline(core_operator_registry())
    rng = np.random.default_rng(0)
    x = rng.random((4, 256)).astype(np.float32)
    v3 = rng.standard_normal(3).astype(np.float32)
    cases = {
        "topk k constant": (topk("constant"), {"x": x}),
        "topk k fed (host value)": (topk("fed"), {"x": x, "k": np.array([8], np.int64)}),
        "topk k computed (1 sync)": (topk("computed"), {"x": x}),
        "if constant cond": (if_model(True), {"x": v3, "y": v3}),
        "if device cond (1 sync)": (if_model(), {"x": v3, "y": v3, "s": np.ones(1, np.float32)}),
        "loop 16, static cond": (counting_loop(m=16), {"x": v3, "a0": v3}),
        "loop 16, device cond (15 syncs)": (counting_loop(m=16, while_limit=1e9), {"x": v3, "a0": v3}),
    }
    print(f"{runtime.info.summary}; median of {args.repeat} runs")
    for name, (model, feeds) in cases.items():
        exe = runtime.load_model(pipeline.compile(onyxia.load_model(model)))
        print(f"{name:<34} {timed(exe, feeds, args.repeat):9.1f} µs  ({exe.model.num_dispatches} dispatches)")


if __name__ == "__main__":
    main()
