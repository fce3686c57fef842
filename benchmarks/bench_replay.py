"""Replay cost of the PlanExecutor: µs per dispatch for both immediates transports, and the
cost of update_dimensions. Run: python benchmarks/bench_replay.py [--dispatches 200]

Reported side by side in one run, as medians; lavapipe's numbers include its CPU execution of
the (tiny) kernels, so the encode-only column is the executor's own overhead.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import onyxia
from onyxia.runtime import Runtime


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


def median_us(fn, repeat: int) -> float:
    fn()
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dispatches", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()

    graph = onyxia.load_model(chain_model(args.dispatches))
    # Without the optimization passes: fusion would merge the chain into one dispatch, and this
    # benchmark measures the cost of replaying many.
    compiled = onyxia.CompilerPipeline(onyxia.core_operator_registry(), optimize=False).compile(
        graph, {"batch": 1, "seq": 8})
    runtime = Runtime()
    print(f"adapter: {runtime.info.summary}")
    print(f"plan: {compiled.num_dispatches} dispatches, {len(compiled.symbolic_bindings)} symbolic bindings")
    x = np.ones((1, 8, 16), np.float32)
    rows = []
    for transport in ("immediate", "uniform"):
        if transport == "immediate" and "immediates" not in runtime.features:
            continue
        exe = runtime.load_model(compiled, transport=transport)

        def encode_only():
            encoder = runtime.device.create_command_encoder()
            exe._encode(encoder)
            encoder.finish()

        run_us = median_us(lambda: exe.run({"x": x}), args.repeat)
        encode_us = median_us(encode_only, args.repeat)
        dims = [{"seq": 4}, {"seq": 8}]
        state = {"i": 0}

        def update():
            state["i"] ^= 1
            exe.update_dimensions(dims[state["i"]])

        update_us = median_us(update, args.repeat)
        rows.append((transport, run_us, encode_us, update_us))
    n = compiled.num_dispatches
    print(f"{'transport':<10} {'run() µs':>10} {'µs/dispatch':>12} {'encode µs/dispatch':>19} "
          f"{'update_dimensions µs':>21}")
    for transport, run_us, encode_us, update_us in rows:
        print(f"{transport:<10} {run_us:10.0f} {run_us / n:12.2f} {encode_us / n:19.2f} {update_us:21.0f}")
    if len(rows) == 2:
        print(f"uniform/immediate ratio: run {rows[1][1] / rows[0][1]:.2f}, encode {rows[1][2] / rows[0][2]:.2f}")
    print(f"update_dimensions: {len(compiled.symbolic_bindings)} bindings, "
          f"{rows[0][3] / max(len(compiled.symbolic_bindings), 1):.2f} µs per binding")


if __name__ == "__main__":
    main()
