"""Export the benchmark's model set (tools/model_zoo.py) with the real exporters and random seeded
weights, or (`--fixtures`) its reduced-width members as the committed test fixtures.

    /tmp/torchenv/bin/python tools/export_bench_models.py [--out DIR] [--models a,b] [--fixtures]

- default: every model at its benchmark size into ~/.cache/onyxia/bench-models (not committed),
  read by benchmarks/bench_models.py;
- `--fixtures`: the small members into tests/data/exported/families/ with a README listing each
  (tests/gpu/test_exported_models.py runs them).

Every model goes through `torch.onnx.export(dynamo=False)` (the TorchScript exporter: what
optimum's and diffusers' ONNX exports call; optimum's own exporter is not in this environment's
optimum 2.3, so its axis names are given here), opset 17, constant folding on, with the dynamic
axes of the builder (batch, height/width or sequence). Each file gets a `<name>.json`: its inputs
(dtype, shape with symbols, value kind) and two sizes (tests/builders/families.py makes feeds from
it). Each export is then checked: onnxruntime (CPU) on the file against torch at both sizes. A
model that fails to build, export or check is reported and the run goes on.

torch, torchvision, timm, transformers and diffusers are NOT dependencies of onyxia or its tests:
this runs in a separate environment (e.g. /tmp/torchenv). torchvision's C ops do not load there;
model_zoo.patch_register_fake is the stub that lets it import (see its docstring).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from model_zoo import MODELS, Export  # noqa: E402

from tests.builders.families import FIXTURES, load_info  # noqa: E402

DEFAULT_OUT = Path.home() / ".cache" / "onyxia" / "bench-models"
OPSET = 17
SEED = 0


def export(name: str, small: bool, out: Path) -> str:
    """Build, export, write the sidecar, check against torch; returns the check's summary."""
    torch.manual_seed(SEED)
    spec: Export = MODELS[name](small)
    # torch.onnx.export restores the module's training flag afterwards, recursively: a wrapper
    # left in training mode would switch its library model's dropout on for the check.
    spec.module.eval()
    path = out / f"{name}.onnx"
    names = list(spec.inputs)
    with torch.no_grad(), warnings.catch_warnings(), redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(spec.module, tuple(spec.inputs.values()), str(path), dynamo=False, opset_version=OPSET,
                          input_names=names, output_names=spec.outputs, dynamic_axes=spec.axes,
                          do_constant_folding=True)
    inputs = []
    for n, t in spec.inputs.items():
        shape = [spec.axes.get(n, {}).get(axis, int(d)) for axis, d in enumerate(t.shape)]
        inputs.append({"name": n, "dtype": str(t.numpy().dtype), "shape": shape, "kind": spec.feeds.get(n, "normal")})
    meta = {"inputs": inputs, "outputs": spec.outputs, "sizes": spec.sizes, "source": MODELS[name].__doc__ or "",
            "exporter": f"torch {torch.__version__} torch.onnx.export(dynamo=False), opset {OPSET}", "seed": SEED}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")
    return check(spec.module, path)


def check(module: torch.nn.Module, path: Path) -> str:
    """onnxruntime CPU on the file vs torch, at both sizes: max abs diff (or the failure)."""
    info = load_info(path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    parts = []
    for k, size in enumerate(info.sizes):
        feeds = info.feeds(size, seed=k)
        try:
            got = sess.run(None, feeds)
            with torch.no_grad():
                want = module(*(torch.from_numpy(v) for v in feeds.values()))
            want = want if isinstance(want, (tuple, list)) else [want]
            diff = max(float(np.abs(g - w.numpy()).max()) for g, w in zip(got, want))
            scale = max(float(np.abs(w.numpy()).max()) for w in want)
            parts.append(f"{size}: max abs diff {diff:.1e} (max |output| {scale:.2g})")
        except Exception as exc:  # noqa: BLE001 - the check reports, it does not stop the run
            parts.append(f"{size}: fails ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})")
    return "; ".join(parts)


def ops(path: Path) -> str:
    return ", ".join(sorted({n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}))


def write_readme(out: Path, rows: list[tuple[str, str, str]]) -> None:
    lines = ["# Exported model families (reduced width)", "",
             "Written by `tools/export_bench_models.py --fixtures` (do not edit by hand; rerun it in a torch",
             "environment). Reduced-width members of the benchmark's model set (tools/model_zoo.py:",
             "torchvision, timm, transformers, diffusers, a YOLO-style net), random weights (seed 0),",
             f"exported by torch {torch.__version__}'s TorchScript exporter (`dynamo=False`), opset {OPSET}, with",
             "the builders' dynamic axes. `<name>.json` names the inputs and the two sizes",
             "tests/gpu/test_exported_models.py runs each file at against onnxruntime. Check: onnxruntime",
             "(CPU) on the file vs torch at both sizes.", ""]
    for name, size, result in rows:
        doc = (MODELS[name].__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        lines.append(f"- `{name}.onnx` ({size}): {doc + ' ' if doc else ''}Check: {result}. "
                     f"ONNX ops: {ops(out / f'{name}.onnx')}.")
    (out / "README.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help=f"output folder (default {DEFAULT_OUT}; with --fixtures {FIXTURES})")
    parser.add_argument("--models", help="comma-separated subset of: " + ", ".join(MODELS))
    parser.add_argument("--fixtures", action="store_true", help="the reduced-width members, for the tests")
    args = parser.parse_args()
    out = args.out or (FIXTURES if args.fixtures else DEFAULT_OUT)
    out.mkdir(parents=True, exist_ok=True)
    chosen = args.models.split(",") if args.models else list(MODELS)
    unknown = [m for m in chosen if m not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    rows, failed = [], []
    for name in chosen:
        try:
            result = export(name, args.fixtures, out)
            size = f"{(out / f'{name}.onnx').stat().st_size / 1024:.1f} KB"
            rows.append((name, size, result))
            print(f"{name:22} {size:>10}  {result}", flush=True)
        except Exception as exc:  # noqa: BLE001 - one failed export must not stop the others
            failed.append(name)
            print(f"{name:22} FAILED: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", flush=True)
    if args.fixtures and not args.models:
        write_readme(out, rows)
    print(f"{len(rows)} exported to {out}" + (f"; failed: {', '.join(failed)}" if failed else ""))


if __name__ == "__main__":
    main()
