"""onyxia's speed in one run, side by side with its peers, as ratios (issue 9's report).

Run: python benchmarks/bench_speed.py [--repeat 7] [--wonnx-python PY]
                                      [--llm-dir DIR ...] [--prompt 14] [--new 33] [--llm-repeat 3]
                                      [--skip-peers] [--skip-llm]

1. The adapter's roof (runtime/peaks.py): measured copy bandwidth and FMA peak.
2. GEMM- and bandwidth-bound graphs (benchmarks/bench_peers.py): onyxia vs wonnx 0.5.1 on the
   same adapter vs onnxruntime (CPU): MatMul 1024^3, an MLP of 4 x (MatMul 64x1024x1024 + Add +
   Relu), 8 unary ops on 4M floats; median wall time per inference, onyxia/wonnx and onyxia/ort.
3. LLM folders (benchmarks/bench_llm.py; default: the ~32M-parameter Llama in onnxruntime-genai's
   layout built by tests/llm_models.py, fp32 and int4 with accuracy_level 4; `--llm-dir` takes
   folders exported by the real builder, e.g. `tools/build_llm_fixtures.py --big DIR`): onyxia vs
   onnxruntime-genai (CPU): prefill ms, decode tokens/s, both as ratios, and decode speed as a
   fraction of the memory-bandwidth bound: the memory's streaming bandwidth (numpy's gemv over
   256 MB, the rate at which this machine's memory feeds one matrix-vector product) over the
   bytes a decode step cannot avoid (weights + the KV cache read, onyxia/plan/cost.py); on a GPU
   read the adapter's measured bandwidth instead (printed first). Also the plan's
   traffic per decode step over those bytes, dispatches per step, and recompiles/reallocations
   over a further generation.

Medians of several runs; the machine is noisy, so read the ratios (every engine runs in the same
process, one after the other). On lavapipe the "GPU" is the same CPU as onnxruntime's.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.llm_models and the sibling benchmarks
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_llm  # noqa: E402
import bench_peers  # noqa: E402

TARGETS = {"matmul": 1 / 3, "mlp": 1 / 3, "unary": 1 / 4}  # onyxia time over wonnx's, at most


def host_bandwidth(repeat: int = 5) -> float:
    """Bytes per second numpy's matrix-vector product streams from memory (256 MB of weights)."""
    w = np.ones((8192, 8192), np.float32)
    x = np.ones(8192, np.float32)
    seconds, _ = bench_peers.median_s(lambda: w @ x, repeat)
    return w.nbytes / seconds


def peers(repeat: int, wonnx_python: str | None) -> None:
    rng = np.random.default_rng(0)
    print(f"\n{'case':8} {'onyxia ms':>10} {'wonnx ms':>10} {'ort ms':>9} {'ony/wonnx':>10} {'target':>7} "
          f"{'ony/ort':>8}  max|diff| vs ort")
    for case in TARGETS:
        model, feeds = bench_peers.build(case, rng)
        t_ort, ref = bench_peers.time_ort(model, feeds, repeat)
        (t_ony, ours), _ = bench_peers.time_onyxia(model, feeds, repeat)
        t_won, _, why = bench_peers.time_wonnx(model, feeds, repeat, wonnx_python)
        won = f"{t_won * 1e3:10.1f}" if t_won is not None else f"{'n/a':>10}"
        ratio = f"{t_ony / t_won:10.2f}" if t_won is not None else f"{'n/a':>10}"
        err = float(np.abs(np.asarray(ours) - ref).max())
        print(f"{case:8} {t_ony * 1e3:10.1f} {won} {t_ort * 1e3:9.1f} {ratio} {'<=' + format(TARGETS[case], '.2f'):>7} "
              f"{t_ony / t_ort:8.2f}  {err:.2g}" + (f"  (wonnx: {why})" if why else ""))


def llm(dirs: list[Path], prompt: int, new: int, repeat: int, bandwidth: float) -> None:
    rows = []
    for d in dirs:
        r = bench_llm.measure(d, prompt, new, repeat)
        bench_llm.report(r, repeat)
        rows.append(r)
    print(f"\n{'folder':34} {'params':>7} {'prefill ms':>17} {'ratio':>6} {'decode tok/s':>15} {'ratio':>6} "
          f"{'% of bound':>12} {'traffic':>8} {'disp':>5} {'rebuilt':>8}")
    for r in rows:
        unavoidable = r.decode.required_bytes if r.decode else 0
        bound = bandwidth / unavoidable if unavoidable else float("nan")  # tokens/s if bytes were all
        traffic = f"{r.decode.ratio:8.3f}" if r.decode else f"{'n/a':>8}"
        print(f"{r.model_dir.name[:34]:34} {r.parameters / 1e6:6.1f}M "
              f"{r.prefill_s[0] * 1e3:8.1f}/{r.prefill_s[1] * 1e3:<8.1f} {r.prefill_ratio:5.2f}x "
              f"{r.decode_tok_s[0]:7.1f}/{r.decode_tok_s[1]:<7.1f} {r.decode_ratio:5.2f}x "
              f"{100 * r.decode_tok_s[0] / bound:5.1f}/{100 * r.decode_tok_s[1] / bound:<5.1f}% "
              f"{traffic} {r.dispatches:5d} {r.rebuilt[0]:3d}/{r.rebuilt[1]:<3d}")
    print("prefill and decode: onyxia/reference; ratio > 1: onyxia faster. % of bound: decode tokens/s over "
          f"{bandwidth / 1e9:.2f} GB/s / (weights read + KV bytes per step), onyxia/reference. traffic: the "
          "plan's bytes per decode step over those bytes. rebuilt: recompiles/reallocations over a further generation.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per engine, graphs (7)")
    parser.add_argument("--wonnx-python", default=os.environ.get("WONNX_PYTHON"),
                        help="interpreter with wonnx==0.5.1 installed (default: this one)")
    parser.add_argument("--llm-dir", type=Path, action="append", help="an LLM folder (repeatable)")
    parser.add_argument("--prompt", type=int, default=14, help="prompt tokens (14)")
    parser.add_argument("--new", type=int, default=33, help="tokens to generate (33: 32 decode steps)")
    parser.add_argument("--llm-repeat", type=int, default=3, help="timed generations per engine (3)")
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--skip-llm", action="store_true")
    args = parser.parse_args()

    from onyxia.runtime import Runtime
    from onyxia.runtime.peaks import adapter_peaks

    runtime = Runtime()
    roof = adapter_peaks(runtime)
    memory = host_bandwidth()
    print(f"adapter: {runtime.info.summary}; measured roof {roof.bandwidth / 1e9:.2f} GB/s copy bandwidth, "
          f"{roof.flops / 1e9:.1f} GF/s FMA; tuning {'off' if os.environ.get('ONYXIA_TUNE') == '0' else 'on'}; "
          f"host memory streams {memory / 1e9:.1f} GB/s (numpy gemv)")
    if not args.skip_peers:
        peers(args.repeat, args.wonnx_python)
    if args.skip_llm:
        return
    with tempfile.TemporaryDirectory(prefix="onyxia-bench-speed-") as tmp:
        dirs = args.llm_dir
        if not dirs:
            spec = bench_llm.BENCH_SPEC
            dirs = [bench_llm.build_decoder(spec, Path(tmp) / "fp32"),
                    bench_llm.build_decoder(spec.with_(int4=True, accuracy_level=4), Path(tmp) / "int4")]
        llm(dirs, args.prompt, args.new, args.llm_repeat, memory)


if __name__ == "__main__":
    main()
