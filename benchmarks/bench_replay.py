"""Replay cost of the PlanExecutor: run() and encode-only µs per dispatch for both immediates
transports, and the cost of update_dimensions, on two plans:

- `chain`: N elementwise ops compiled without fusion (N dispatches of ~2 bindings each);
- `gpt2`: a 4-layer GPT-2 block (tests/models.py), the default pipeline — hundreds of symbolic
  bindings over a few dozen distinct expressions, as in LLM decode.

Run: python benchmarks/bench_replay.py [--dispatches 200] [--repeat 50]

Reported side by side in one run, as medians. run() wall time on lavapipe includes its CPU
execution of the (tiny) kernels on lavapipe's own threads; "run() host" is the calling thread's
CPU time in run() (feeds, encoding, submit, readback: the executor's overhead). Encode-only and
update_dimensions are the executor's own single-threaded work, also timed in CPU time of the
calling thread: on a shared machine wall time mostly measures how long other processes held
the core.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.models

import onyxia  # noqa: E402
from onyxia.runtime import Runtime  # noqa: E402
from tests.models import gpt2_block, gpt2_feeds  # noqa: E402


def chain_model(length: int):
    """`length` elementwise ops over x[batch, seq, 16] (each one dispatch, ~2 bindings each)."""
    nodes, prev = [], "x"
    ops = ["Add", "Mul", "Sub"]
    for i in range(length):
        out = "y" if i == length - 1 else f"t{i}"
        nodes.append(helper.make_node(ops[i % 3], [prev, "c"], [out], name=f"op{i}"))
        prev = out
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16])
    graph = helper.make_graph(nodes, "chain", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.full((16,), 0.5, np.float32), "c")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def median_us(fn, repeat: int, clock=time.perf_counter) -> float:
    fn()
    samples = []
    for _ in range(repeat):
        t = clock()
        fn()
        samples.append(clock() - t)
    return statistics.median(samples) * 1e6


def encode_only(runtime, exe) -> None:
    """Encode every step into a fresh encoder without submitting: the executor's own cost."""
    encoder = runtime.device.create_command_encoder()
    if hasattr(exe, "backend"):
        exe.backend.encode(encoder, exe.commands)
    else:  # an executor from before the replay split (compare_replay.py measures old revisions)
        exe._encode(encoder)
    encoder.finish()


def cases(dispatches: int):
    chain = onyxia.load_model(chain_model(dispatches))
    # Without the optimization passes: fusion would merge the chain into one dispatch, and this
    # case measures the cost of replaying many.
    yield "chain", onyxia.CompilerPipeline(onyxia.core_operator_registry(), optimize=False).compile(
        chain, {"batch": 1, "seq": 8}), {"x": np.ones((1, 8, 16), np.float32)}
    gpt2 = onyxia.load_model(gpt2_block(layers=4))
    yield "gpt2", onyxia.CompilerPipeline(onyxia.core_operator_registry()).compile(
        gpt2, {"batch": 1, "seq": 8}), gpt2_feeds({"batch": 1, "seq": 8})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dispatches", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()

    runtime = Runtime()
    print(f"adapter: {runtime.info.summary}")
    print(f"{'plan':<6} {'transport':<10} {'dispatches':>10} {'bindings':>9} {'exprs':>6} {'run() µs':>10} "
          f"{'µs/dispatch':>12} {'run() host µs':>14} {'encode µs/dispatch':>19} {'update_dimensions µs':>21}")
    for name, compiled, feeds in cases(args.dispatches):
        n = compiled.num_dispatches
        bindings = compiled.symbolic_bindings
        exprs = len({b.expr for b in bindings})
        for transport in ("immediate", "uniform"):
            if transport == "immediate" and "immediates" not in runtime.features:
                continue
            exe = runtime.load_model(compiled, transport=transport)
            run_us = median_us(lambda: exe.run(feeds), args.repeat)
            host_us = median_us(lambda: exe.run(feeds), args.repeat, time.thread_time)
            encode_us = median_us(lambda: encode_only(runtime, exe), args.repeat, time.thread_time)
            # seq 8 <-> 4: every seq-dependent binding changes, nothing reallocates.
            dims = [{"seq": 4}, {"seq": 8}]
            state = {"i": 0}

            def update():
                state["i"] ^= 1
                exe.update_dimensions(dims[state["i"]])

            update_us = median_us(update, args.repeat, time.thread_time)
            print(f"{name:<6} {transport:<10} {n:10d} {len(bindings):9d} {exprs:6d} {run_us:10.0f} "
                  f"{run_us / n:12.2f} {host_us:14.0f} {encode_us / n:19.2f} {update_us:21.1f}")


if __name__ == "__main__":
    main()
