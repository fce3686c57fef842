"""The JavaScript runtime (onyxia/web/onyxia.js, in Node on Dawn) beside the Python replay on the
same adapter: are the outputs bit for bit equal, and what does encoding a run cost per dispatch.

Run under Mesa 25's lavapipe, which both wgpu-native and Dawn accept:
    (. /tmp/mesa25/env.sh; ONYXIA_WEB_ICD=$VK_ICD_FILENAMES python benchmarks/bench_web.py)

Both replays use the uniform parameter transport (browsers have no immediates) and no 64-bit
"wide" reads (WebGPU has no shader-int64). Encode cost: building one run's command encoder
without submitting (Python: PlanExecutor's backend.encode; JS: Session.encode), medians of
--repeat, wall clock on the calling thread for both. Also the runtime's size.

--llm FOLDER ...: greedy decode speed of an LLM folder, LlmSession (Python, its default
transport) beside onyxia/web/llm.js in Node (`onyxia web FOLDER`), on the same adapter: median
tokens/s of 32-token generations in --llm-rounds alternating rounds (after a first generation
that creates the pipelines), and whether the two generated the same ids.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.*

import onyxia  # noqa: E402
from onyxia.runtime import Runtime  # noqa: E402
from onyxia.web.bundle import RUNTIME_FILE, RUNTIME_FILES, write_bundle  # noqa: E402
from tests.models import bert_encoder, bert_feeds, cnn_feeds, gpt2_block, gpt2_feeds, small_cnn  # noqa: E402
from tests.web.harness import as_array, run_node, run_node_script  # noqa: E402

CASES = {
    "small_cnn": (small_cnn, cnn_feeds, {"batch": 1, "height": 32, "width": 32}),
    "bert_encoder": (bert_encoder, bert_feeds, {"batch": 2, "seq": 16}),
    "gpt2_4layers": (lambda: gpt2_block(layers=4), gpt2_feeds, {"batch": 1, "seq": 8}),
}


def python_side(runtime, compiled, feeds, repeat: int):
    exe = runtime.load_model(compiled, transport="uniform")
    outputs = exe.run(feeds)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        encoder = runtime.device.create_command_encoder()
        exe.backend.encode(encoder, exe._run_commands)  # what run() encodes
        encoder.finish()
        samples.append(time.perf_counter() - start)
    dispatches = sum(1 for d in exe.dispatch_commands() if all(d.workgroups))
    return outputs, statistics.median(samples) * 1e3, dispatches


def llm_side_by_side(folder: str, runtime, rounds: int, tokens: int = 32) -> None:
    """Rounds alternate Python and JS (a loaded machine drifts): each round, three generations in
    each after a warm one; the medians over all rounds."""
    from onyxia.llm.session import LlmSession
    from onyxia.web.llm_bundle import write_llm_demo
    from tests.llm_fixtures import PROMPT

    session = LlmSession(folder, runtime=runtime)
    prompt = session.encode(PROMPT)
    py_ids = session.generate(prompt, max_new_tokens=tokens)
    py_rates: list[float] = []
    js_rates: list[float] = []
    py_cpu: list[float] = []  # CPU ms a generation, all threads (lavapipe's included): robust to a loaded machine
    js_cpu: list[float] = []
    same = True
    with tempfile.TemporaryDirectory() as tmp:
        out = write_llm_demo(folder, Path(tmp) / "site", prompt=PROMPT, max_new_tokens=tokens)
        for _ in range(rounds):
            for _ in range(3):
                before = resource.getrusage(resource.RUSAGE_SELF)
                same &= session.generate(prompt, max_new_tokens=tokens) == py_ids
                after = resource.getrusage(resource.RUSAGE_SELF)
                py_cpu.append(1000 * (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime))
                py_rates.append(session.stats.decode_tokens_per_second)
            report = run_node_script("run_llm.mjs", {"folder": str(out), "prompt": PROMPT, "maxNewTokens": tokens,
                                                     "repeats": 4}, Path(tmp), timeout=600)
            if not report["ok"]:
                print(f"{folder}: node failed: {report['error']}")
                return
            js_rates += [1000 * r["stats"]["decodeTokens"] / r["stats"]["decodeMs"] for r in report["runs"][1:]]
            js_cpu += [r["cpuMs"] for r in report["runs"][1:]]
            same &= all(r["ids"] == py_ids for r in report["runs"])
    last = report["runs"][-1]["stats"]
    print(f"{Path(folder).name:<22} python {statistics.median(py_rates):7.1f} tok/s   "
          f"js {statistics.median(js_rates):7.1f} tok/s   CPU ms a generation (all threads) python "
          f"{statistics.median(py_cpu):.0f} js {statistics.median(js_cpu):.0f}   same ids {same}   "
          f"({last['dispatchesPerStep']} dispatches a step in JS, {last['readbackBytesPerStep'][-1]} bytes read back; "
          f"node: {report['adapter']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--llm", nargs="*", default=[], metavar="FOLDER",
                        help="LLM folders: decode speed, Python vs JS")
    parser.add_argument("--llm-rounds", type=int, default=3)
    args = parser.parse_args()
    if args.llm:
        runtime = Runtime()
        print(f"python adapter: {runtime.info.summary}")
        for folder in args.llm:
            llm_side_by_side(folder, runtime, args.llm_rounds)
        return
    for name in (*RUNTIME_FILES, "llm.js", "tokenizer.js"):
        text = RUNTIME_FILE.with_name(name).read_text()
        print(f"{name}: {len(text.splitlines())} lines, {len(text.encode())} bytes")
    runtime = Runtime(wide_reads=False)
    print(f"python adapter: {runtime.info.summary}")
    print(f"{'model':<14} {'dispatches py/js':>16} {'bitwise equal':>14} {'max |diff|':>11} "
          f"{'py encode µs/disp':>18} {'js encode µs/disp':>18}")
    for name, (build, feeds_of, dims) in CASES.items():
        model = build()
        compiled = onyxia.CompilerPipeline(onyxia.core_operator_registry()).compile(onyxia.load_model(model), dims)
        feeds = feeds_of(dims, 0)
        py_out, py_ms, py_n = python_side(runtime, compiled, feeds, args.repeat)
        with tempfile.TemporaryDirectory() as tmp:
            write_bundle(compiled, Path(tmp) / "bundle")
            np.savez(Path(tmp) / "in.npz", **feeds)
            runs = [{"dims": None, "inputs": str(Path(tmp) / "in.npz")}]
            report = run_node({"bundle": str(Path(tmp) / "bundle"), "runs": runs, "encodeRepeats": args.repeat},
                              Path(tmp))
        if not report["ok"]:
            print(f"{name:<14} node failed: {report['error']}")
            continue
        js_out = {k: as_array(v) for k, v in report["runs"][0]["outputs"].items()}
        equal = all(np.array_equal(js_out[k].view(np.uint8), np.asarray(py_out[k]).view(np.uint8)) for k in py_out)
        diff = max(float(np.max(np.abs(js_out[k].astype(np.float64) - py_out[k]))) if py_out[k].size else 0.0
                   for k in py_out)
        js_n = report["dispatches"]
        print(f"{name:<14} {f'{py_n}/{js_n}':>16} {str(equal):>14} {diff:11.2e} "
              f"{1000 * py_ms / py_n:18.2f} {1000 * report['encodeMedianMs'] / js_n:18.2f}")
    print(f"node adapter: {report.get('adapter')}")


if __name__ == "__main__":
    main()
