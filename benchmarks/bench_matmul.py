"""MatMul speed: onyxia vs numpy vs onnxruntime (CPU), side by side in one run.

Run: python benchmarks/bench_matmul.py [--repeat 20] [--shapes decode,...]

For each shape a one-node MatMul model is compiled (2-D products take B as a constant weight,
as in a transformer layer; the batched one takes both operands as inputs, as attention does).
Times are medians over `--repeat` runs:
- `onyxia run`: wall time of `PlanExecutor.run` (upload A, dispatch, read back Y);
- `onyxia gpu`: the GPU time of the matmul dispatches alone, from timestamp queries (when the
  adapter has them);
- numpy `a @ b` and an onnxruntime CPU session on the same model.
Ratios are onyxia's run time over the other's (> 1: onyxia is slower). On lavapipe the "GPU" is
the same CPU, so these ratios only indicate relative kernel quality, not GPU speed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import onyxia
from onyxia.runtime import Runtime

# name -> (A shape, B shape, B is a constant weight); "seq" is a symbolic dim, run at seq = 1: the
# plan a model with prefill and decode shares (both kernels, the tiled one skipped at run time).
SEQ = 1
SHAPES = {
    "decode": ((1, 512), (512, 2048), True),
    "decode-sym": (("seq", 512), (512, 2048), True),
    "small-batch": ((64, 512), (512, 512), True),
    "prefill": ((256, 1024), (1024, 1024), True),
    "attention": ((8, 64, 64), (8, 64, 64), False),
}


def matmul_model(a_shape, b_shape, b_value: np.ndarray | None):
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape))]
    inits = []
    if b_value is None:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b_shape)))
    else:
        inits.append(numpy_helper.from_array(b_value, "b"))
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"], name="matmul")], "matmul", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def median_s(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up: pipelines, staging buffers, caches
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def gpu_time_s(exe, feeds, repeat: int) -> float | None:
    """Median GPU time of all dispatches of one run, from timestamp queries; None without them."""
    from onyxia.runtime.profile import time_dispatches

    try:
        return statistics.median(sum(t.nanoseconds for t in time_dispatches(exe, feeds)) * 1e-9
                                 for _ in range(max(repeat // 2, 3)))
    except Exception:  # noqa: BLE001 - no timestamp queries on this adapter: column stays empty
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated subset of {', '.join(SHAPES)}")
    args = parser.parse_args()
    import onnxruntime as ort

    runtime = Runtime()
    print(f"adapter: {runtime.info.summary}")
    rng = np.random.default_rng(0)
    header = (f"{'shape':<12} {'A @ B':<26} {'kernels':<22} {'onyxia run':>11} {'onyxia gpu':>11} "
              f"{'numpy':>9} {'ort':>9} {'GFLOP/s':>8} {'vs numpy':>9} {'vs ort':>7}")
    print(header)
    print("-" * len(header))
    for name in args.shapes.split(","):
        sym_shape, b_shape, weight = SHAPES[name]
        a_shape = tuple(SEQ if d == "seq" else d for d in sym_shape)
        a = rng.standard_normal(a_shape, dtype=np.float32)
        b = rng.standard_normal(b_shape, dtype=np.float32)
        model = matmul_model(sym_shape, b_shape, b if weight else None)
        feeds = {"a": a} if weight else {"a": a, "b": b}

        dims = {"seq": SEQ} if "seq" in sym_shape else {}
        compiled = onyxia.CompilerPipeline(onyxia.core_operator_registry()).compile(onyxia.load_model(model), dims)
        exe = runtime.load_model(compiled)
        np.testing.assert_allclose(exe.run(feeds)["y"], a @ b, rtol=1e-3, atol=1e-3)
        t_run = median_s(lambda: exe.run(feeds), args.repeat)
        t_gpu = gpu_time_s(exe, feeds, args.repeat)
        t_np = median_s(lambda: a @ b, args.repeat)
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        t_ort = median_s(lambda: sess.run(None, feeds), args.repeat)

        flops = 2 * np.prod(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]), dtype=np.int64) \
            * a_shape[-2] * a_shape[-1] * b_shape[-1]
        kernels = "+".join(s.label.removeprefix("matmul/") for s in compiled.shaders)
        gpu = f"{t_gpu * 1e6:9.0f}us" if t_gpu is not None else f"{'-':>11}"
        print(f"{name:<12} {f'{list(sym_shape)}x{list(b_shape)}':<26} {kernels:<22} {t_run * 1e6:9.0f}us {gpu} "
              f"{t_np * 1e6:7.0f}us {t_ort * 1e6:7.0f}us {flops / (t_gpu or t_run) / 1e9:8.1f} "
              f"{t_run / t_np:9.2f} {t_run / t_ort:7.2f}")


if __name__ == "__main__":
    main()
