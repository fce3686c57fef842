"""Real models, onyxia vs onnxruntime-WebGPU (same adapter) vs onnxruntime CPU, in one run.

Run: python benchmarks/bench_models.py [--dir DIR] [--models a,b] [--sizes 0,1] [--repeat 5]
                                       [--adapter mesa25|default] [--no-peer] [--json OUT]

The models are the set tools/export_bench_models.py writes (default ~/.cache/onyxia/bench-models:
torchvision, timm, transformers, diffusers, a YOLO-style net; each with a .json naming its inputs
and two sizes). Per model and size: median wall time of one inference call for each engine, the
engines alternating call by call (onyxia, onnxruntime-WebGPU, onnxruntime CPU, again...) so that
the machine's load hits them alike; the ratios onyxia/WebGPU and onyxia/CPU; correctness (max
|diff| over max |output| against onnxruntime CPU, for onyxia and for the WebGPU peer). Per model:
onyxia's cold load split (LoadReport: parse, compiler passes, WGSL, shader modules, pipelines,
uploads; nothing is tuned at load: later runs time kernels), its first run, the wait for the
kernels its quick first run stood in for (runtime/ahead.py: the helper threads compile them after
it), the same load and first run in a second process with the plan and tuning caches warm, the
time to the first result at
the second size (rebind) and the plans compiled (`sess.stats.compiles`). Last, the geometric mean of onyxia/WebGPU.

lavapipe compiles a kernel when it is first dispatched, not when its pipeline is made: on it the
first run, not the load's "pipelines", holds most of the driver's compile time, and Mesa's own
on-disk shader cache is what makes the warm process's first run fast. So the cold load and
first run are a process of their own per model, with a fresh MESA_SHADER_CACHE_DIR and onyxia
cache (kernels an earlier model compiled would otherwise count as cached: mobilenet_v3_large's
cold first run read 3.3 s after efficientnet_b0's against 5.2-6.7 s alone), and the warm
process a second on the same caches.

The WebGPU peer is onnxruntime's WebGpuExecutionProvider in its own environment, driven as a
long-lived worker over a pipe (benchmarks/ort_webgpu_worker.py): ONYXIA_ORTWEB_PYTHON (default
/tmp/ortweb/bin/python) run after sourcing ONYXIA_MESA25_ENV (default /tmp/mesa25/env.sh, Mesa 25
lavapipe). `--adapter mesa25` (default) runs onyxia under the same env (this script re-executes
itself after sourcing it); `--adapter default` leaves onyxia on the default adapter. The caches
live in a fresh ONYXIA_CACHE_DIR for the run, so the first load is cold. On lavapipe every engine
runs on the same CPU cores: the ratios compare kernels and replay, not GPU speed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.builders.families import ModelInfo, models  # noqa: E402

DEFAULT_DIR = Path.home() / ".cache" / "onyxia" / "bench-models"
ORTWEB_PYTHON = os.environ.get("ONYXIA_ORTWEB_PYTHON", "/tmp/ortweb/bin/python")
MESA25_ENV = os.environ.get("ONYXIA_MESA25_ENV", "/tmp/mesa25/env.sh")
WORKER = Path(__file__).resolve().parent / "ort_webgpu_worker.py"
REEXEC_FLAG = "_ONYXIA_BENCH_MODELS_ENV"


class Peer:
    """onnxruntime-WebGPU in its own process: one JSON request a line, one reply a line."""

    def __init__(self, python: str, env_script: str, shader_cache: str):
        missing = [p for p in (python, env_script) if not Path(p).exists()]
        if missing:
            raise FileNotFoundError(f"the WebGPU peer needs {', '.join(missing)} (set ONYXIA_ORTWEB_PYTHON to a "
                                    "python with onnxruntime-webgpu, ONYXIA_MESA25_ENV to the script selecting "
                                    "its Vulkan driver), or pass --no-peer")
        cmd = f". {shlex.quote(env_script)}; exec {shlex.quote(python)} {shlex.quote(str(WORKER))}"
        self.proc = subprocess.Popen(["bash", "-c", cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     bufsize=1, env={**os.environ, "MESA_SHADER_CACHE_DIR": shader_cache})

    def ask(self, **req) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(req) + "\n")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the WebGPU worker exited (status {self.proc.poll()})")
        reply = json.loads(line)
        if not reply["ok"]:
            raise RuntimeError(reply["error"])
        return reply

    def close(self) -> None:
        try:
            self.ask(op="quit")
        except (RuntimeError, BrokenPipeError, json.JSONDecodeError):
            pass
        self.proc.wait(timeout=30)


@dataclass
class SizeRow:
    size: dict[str, int]
    onyxia_ms: float | None = None
    webgpu_ms: float | None = None
    cpu_ms: float | None = None
    onyxia_err: float | None = None  # max |diff| / max |output| vs onnxruntime CPU
    webgpu_err: float | None = None
    error: str = ""


@dataclass
class ModelRow:
    name: str
    sizes: list[SizeRow] = field(default_factory=list)
    load: dict[str, float] = field(default_factory=dict)  # LoadReport rows, ms
    load_ms: float | None = None
    first_run_ms: float | None = None
    warm_load_ms: float | None = None  # a second process, plan + tuning caches warm
    warm_first_run_ms: float | None = None
    warm_cache: str = ""
    # After the first run: the wait for the helper threads to compile the kernel choices its quick
    # variants stood in for (runtime/ahead.py), before the second process and the timed runs.
    tier_up_ms: float | None = None
    rebind_ms: float | None = None  # the first call at the second size, to its result
    compiles: int | None = None
    webgpu_load_ms: float | None = None
    error: str = ""


def rel_err(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    return max(float(np.abs(np.asarray(a, np.float64) - b).max()) / max(float(np.abs(b).max()), 1e-30)
               for a, b in zip(got, want))


def load_split(report) -> dict[str, float]:
    """The LoadReport in the parts the table shows (ms)."""
    rt = report.runtime
    return {"parse": report.parse_s * 1e3, "passes": report.compile_s * 1e3, "wgsl": rt.render_s * 1e3,
            "modules": rt.shader_modules_s * 1e3, "pipelines": rt.pipelines_s * 1e3,
            "uploads": rt.buffers_s * 1e3, "cache": report.cache_s * 1e3}


LOAD_SCRIPT = """
import json, sys, time
import numpy as np, onyxia
sys.path.insert(0, sys.argv[3])
from benchmarks.bench_models import load_split
sess = onyxia.InferenceSession(sys.argv[1])
with np.load(sys.argv[2]) as d:
    feeds = {k: d[k] for k in d.files}
sess.run(None, feeds)
start = time.perf_counter()
sess.executor.finish_quick()
tier_up = time.perf_counter() - start
r = sess.load_report
print(json.dumps({"load_ms": (r.total_s - r.device_s) * 1e3, "first_run_ms": r.first_run_s * 1e3, "cache": r.cache,
                  "split": load_split(r), "tier_up_ms": tier_up * 1e3}))
"""


def load_in_process(path: Path, feeds_npz: str, caches: Path) -> dict:
    """Load `path` and run it once in a new process whose plan, tuning and Mesa shader caches
    live under `caches`: cold the first time, warm the next."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ONYXIA_CACHE_DIR": str(caches / "onyxia"),
           "MESA_SHADER_CACHE_DIR": str(caches / "mesa")}
    out = subprocess.run([sys.executable, "-c", LOAD_SCRIPT, str(path), feeds_npz, str(ROOT)], capture_output=True,
                         text=True, env=env, timeout=1800)
    if out.returncode:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"status {out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_model(info: ModelInfo, args, runtime, peer: Peer | None, tmp: Path) -> ModelRow:
    import onnxruntime as ort

    import onyxia

    row = ModelRow(info.name)
    # onnxruntime's pool threads spin for a while after each run by default: on lavapipe (the
    # same 2 cores) that took the CPU from the next engine's run (mobilenet_v3_large: onyxia
    # 80 ms a call right after onnxruntime CPU, 5.5 ms alone).
    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    cpu = ort.InferenceSession(str(info.path), options, providers=["CPUExecutionProvider"])
    sess = onyxia.InferenceSession(str(info.path), runtime=runtime)
    if peer is not None:
        try:
            row.webgpu_load_ms = peer.ask(op="load", path=str(info.path))["load_s"] * 1e3
        except RuntimeError as exc:
            row.error = f"webgpu load: {exc}"
    use_peer = peer is not None and row.webgpu_load_ms is not None
    for k in args.sizes:
        size = info.sizes[k]
        srow = SizeRow(size)
        row.sizes.append(srow)
        feeds = info.feeds(size, seed=k)
        npz = str(tmp / f"{info.name}.{k}.npz")
        np.savez(npz, **feeds)
        want = cpu.run(None, feeds)
        start = time.perf_counter()
        try:
            got = sess.run(None, feeds)
        except Exception as exc:  # noqa: BLE001 - a model onyxia cannot run is a finding, not the end
            srow.error = f"onyxia: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            got = None
        first = time.perf_counter() - start
        if got is None:
            continue
        srow.onyxia_err = rel_err(got, want)
        if k == args.sizes[0]:
            # This process's caches hold what earlier models compiled (kernels they share): the
            # cold load is a process of its own with fresh caches, the warm one a second on them.
            sess.executor.finish_quick()  # the timed runs below replay the choices
            caches = tmp / f"{info.name}.caches"
            try:
                cold = load_in_process(info.path, npz, caches)
                row.load, row.load_ms, row.first_run_ms = cold["split"], cold["load_ms"], cold["first_run_ms"]
                row.tier_up_ms = cold["tier_up_ms"]
                if not args.no_second_process:
                    warm = load_in_process(info.path, npz, caches)
                    row.warm_load_ms, row.warm_first_run_ms = warm["load_ms"], warm["first_run_ms"]
                    row.warm_cache = warm["cache"]
            except Exception as exc:  # noqa: BLE001
                row.error += f" load process: {exc}"
        else:
            row.rebind_ms = first * 1e3
        if use_peer:
            try:
                peer.ask(op="run", feeds=npz, out=npz + ".out.npz")
                with np.load(npz + ".out.npz") as data:
                    srow.webgpu_err = rel_err([data[f"arr_{i}"] for i in range(len(data.files))], want)
            except RuntimeError as exc:
                srow.error += f" webgpu: {str(exc).splitlines()[0][:300]}"
        peer_ok = use_peer and srow.webgpu_err is not None
        times: dict[str, list[float]] = {"onyxia": [], "webgpu": [], "cpu": []}
        for _ in range(args.repeat):  # alternate: each engine sees the same machine load
            start = time.perf_counter()
            sess.run(None, feeds)
            times["onyxia"].append(time.perf_counter() - start)
            if peer_ok:
                times["webgpu"].append(peer.ask(op="run", feeds=npz, out=None)["run_s"])
            start = time.perf_counter()
            cpu.run(None, feeds)
            times["cpu"].append(time.perf_counter() - start)
        srow.onyxia_ms = statistics.median(times["onyxia"]) * 1e3
        srow.cpu_ms = statistics.median(times["cpu"]) * 1e3
        srow.webgpu_ms = statistics.median(times["webgpu"]) * 1e3 if times["webgpu"] else None
    row.compiles = sess.stats.compiles
    return row


def _ms(v: float | None, width: int = 8) -> str:
    return f"{v:{width}.1f}" if v is not None else f"{'-':>{width}}"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:7.2f}" if a is not None and b else f"{'-':>7}"


def _err(v: float | None) -> str:
    return f"{v:8.1e}" if v is not None else f"{'-':>8}"


def _past_run(r: ModelRow) -> float | None:
    """What the first call at the second size took beyond that size's median call."""
    if r.rebind_ms is None or len(r.sizes) < 2 or r.sizes[1].onyxia_ms is None:
        return None
    return r.rebind_ms - r.sizes[1].onyxia_ms


def report(rows: list[ModelRow]) -> float | None:
    print(f"\n{'model':22} {'size':>18} {'onyxia':>8} {'webgpu':>8} {'cpu':>8} {'ony/web':>7} {'ony/cpu':>7} "
          f"{'err ony':>8} {'err web':>8}")
    ratios = []
    for r in rows:
        for s in r.sizes:
            size = "x".join(str(v) for v in s.size.values())
            print(f"{r.name[:22]:22} {size:>18} {_ms(s.onyxia_ms)} {_ms(s.webgpu_ms)} {_ms(s.cpu_ms)} "
                  f"{_ratio(s.onyxia_ms, s.webgpu_ms)} {_ratio(s.onyxia_ms, s.cpu_ms)} {_err(s.onyxia_err)} "
                  f"{_err(s.webgpu_err)}" + (f"  {s.error.strip()}" if s.error else ""))
            if s.onyxia_ms and s.webgpu_ms:
                ratios.append(s.onyxia_ms / s.webgpu_ms)
    geo = math.exp(statistics.fmean(math.log(x) for x in ratios)) if ratios else None
    print("times: median ms per call; err: max |diff| / max |output| vs onnxruntime CPU. size: the .json's symbol "
          "values in order.")
    if geo is not None:
        print(f"geometric mean of onyxia/webgpu over {len(ratios)} rows: {geo:.2f}")
    parts = ("parse", "passes", "wgsl", "modules", "pipelines", "uploads", "cache")
    print(f"\n{'model':22} {'load':>8} " + " ".join(f"{p:>9}" for p in parts) +
          f" {'other':>8} {'1st run':>8} {'tier-up':>8} {'warm ld':>8} {'warm 1st':>8} {'rebind':>8} {'past run':>8}"
          f" {'plans':>5} {'web load':>8}")
    for r in rows:
        print(f"{r.name[:22]:22} {_ms(r.load_ms)} " + " ".join(_ms(r.load.get(p), 9) for p in parts) +
              f" {_ms(r.load_ms - sum(r.load.get(p, 0.0) for p in parts) if r.load_ms is not None else None)}"
              f" {_ms(r.first_run_ms)} {_ms(r.tier_up_ms)} {_ms(r.warm_load_ms)} {_ms(r.warm_first_run_ms)} "
              f"{_ms(r.rebind_ms)} "
              f"{_ms(_past_run(r))} {r.compiles if r.compiles is not None else '-':>5} {_ms(r.webgpu_load_ms)}"
              + (f"  {r.error.strip()}" if r.error else ""))
    print("load: onyxia's cold load (a process of its own, no plan, tuning or Mesa shader cache; the device's "
          "opening aside), ms, split as LoadReport (cache: hashing the model, the plan-cache entry written on a "
          "thread; other: the runtime setup left); tier-up: after that first run, the wait for the kernels its "
          "quick variants stood in for; warm: a second process with those caches (load, first run); rebind: "
          "the first call at the second "
          "size, to its result; past run: rebind minus that size's median call; plans: compiled by the session "
          "over both sizes.")
    return geo


def _reexec_under(env_script: str) -> None:
    """Run this script again after sourcing the Mesa 25 env, so onyxia shares the peer's driver."""
    if not Path(env_script).exists():
        sys.exit(f"--adapter mesa25 needs {env_script} (set ONYXIA_MESA25_ENV), or pass --adapter default")
    cmd = f". {shlex.quote(env_script)}; exec {shlex.quote(sys.executable)} " + " ".join(
        shlex.quote(a) for a in [__file__, *sys.argv[1:]])
    os.execvpe("bash", ["bash", "-c", cmd], {**os.environ, REEXEC_FLAG: "1"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"exported models (default {DEFAULT_DIR})")
    parser.add_argument("--models", help="comma-separated model names (default: every model in --dir)")
    parser.add_argument("--sizes", default="0,1", help="which of each model's two sizes to run (default 0,1)")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per engine and size (5)")
    parser.add_argument("--adapter", choices=("mesa25", "default"), default="mesa25",
                        help="onyxia's adapter: the peer's Mesa 25 lavapipe (default) or the default one")
    parser.add_argument("--no-peer", action="store_true", help="skip onnxruntime-WebGPU")
    parser.add_argument("--no-second-process", action="store_true", help="skip the warm-cache second process")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--report", type=Path, nargs="+", help="only print the tables of earlier --json files")
    args = parser.parse_args()
    if args.report:
        report([read_row(r) for path in args.report for r in json.loads(path.read_text())["rows"]])
        return
    args.sizes = [int(k) for k in args.sizes.split(",")]
    if args.adapter == "mesa25" and os.environ.get(REEXEC_FLAG) != "1":
        _reexec_under(MESA25_ENV)
    infos = models(args.dir)
    if args.models:
        wanted = args.models.split(",")
        unknown = sorted(set(wanted) - {i.name for i in infos})
        if unknown:
            sys.exit(f"not in {args.dir}: {unknown} (run tools/export_bench_models.py)")
        infos = [i for i in infos if i.name in wanted]
    if not infos:
        sys.exit(f"no exported models in {args.dir}: run /tmp/torchenv/bin/python tools/export_bench_models.py")
    with tempfile.TemporaryDirectory(prefix="onyxia-bench-models-") as tmp:
        # A fresh plan + tuning cache for this run (set before onyxia reads it): first loads are cold.
        os.environ["ONYXIA_CACHE_DIR"] = str(Path(tmp) / "cache")
        # Mesa keeps compiled shaders on disk too (~/.cache/mesa_shader_cache): a fresh one, or a
        # "cold" load would reuse kernels an earlier run compiled. lavapipe compiles a kernel at its
        # first dispatch, so this mostly moves time between the first run and the warm process's.
        os.environ["MESA_SHADER_CACHE_DIR"] = str(Path(tmp) / "mesa")
        from onyxia.runtime import Runtime

        runtime = Runtime()
        try:
            peer = None if args.no_peer else Peer(ORTWEB_PYTHON, MESA25_ENV, str(Path(tmp) / "mesa-peer"))
        except FileNotFoundError as exc:
            sys.exit(str(exc))
        print(f"onyxia adapter: {runtime.info.summary}, {runtime.info.driver}; peer: "
              f"{'none' if peer is None else 'onnxruntime WebGpuExecutionProvider (' + MESA25_ENV + ')'}; "
              f"repeat {args.repeat}; tuning {'off' if os.environ.get('ONYXIA_TUNE') == '0' else 'on'}", flush=True)
        rows = []
        try:
            for info in infos:
                try:
                    row = bench_model(info, args, runtime, peer, Path(tmp))
                except Exception as exc:  # noqa: BLE001 - one model's failure is reported, the rest run
                    row = ModelRow(info.name, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
                rows.append(row)
                print(f"  {info.name}: done" + (f" ({row.error.strip()})" if row.error else ""), flush=True)
                if args.json:  # after every model: a long run that is cut short keeps what it measured
                    write_json(args.json, rows, runtime, args.repeat)
        finally:
            if peer is not None:
                peer.close()
    report(rows)


def read_row(data: dict) -> ModelRow:
    return ModelRow(**{**data, "sizes": [SizeRow(**s) for s in data["sizes"]]})


def write_json(path: Path, rows: list[ModelRow], runtime, repeat: int) -> None:
    ratios = [s.onyxia_ms / s.webgpu_ms for r in rows for s in r.sizes if s.onyxia_ms and s.webgpu_ms]
    geo = math.exp(statistics.fmean(math.log(x) for x in ratios)) if ratios else None
    path.write_text(json.dumps({"rows": [asdict(r) for r in rows], "geomean_onyxia_over_webgpu": geo,
                                "adapter": f"{runtime.info.summary}; {runtime.info.driver}", "repeat": repeat},
                               indent=1))


if __name__ == "__main__":
    main()
