"""Export small recurrent and control-flow torch models to ONNX, for tests/gpu/test_control_exported.py.

torch is not a dependency of onyxia or its tests; run this in an environment that has it:

    /work/exporters/venv/bin/python tools/export_control_flow_models.py

It writes tests/data/control/*.onnx and a README recording the exporter versions, the ONNX ops of
each file and a check of each file against torch with onnxruntime. Models:

- lstm: nn.LSTM (2 layers, bidirectional, batch_first) + Linear, TorchScript exporter (ONNX LSTM).
- gru: nn.GRU (1 layer) with an initial state input + Linear, TorchScript exporter (ONNX GRU).
- rnn_dynamo: the GRU model through the dynamo exporter (whatever it emits for nn.GRU).
- cond: torch.cond on a data-dependent predicate (x.sum() > 0), dynamo exporter (ONNX If).
- loop: a TorchScript-scripted loop whose trip count comes from an input's value and a
  while-style early exit, TorchScript exporter (ONNX Loop).
Weights are seeded; every file stays small.
"""

from __future__ import annotations

import io
import traceback
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "control"
torch.manual_seed(0)


class LstmTagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(input_size=6, hidden_size=8, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out)


class GruEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(input_size=5, hidden_size=7)
        self.head = nn.Linear(7, 2)

    def forward(self, x: torch.Tensor, h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, hn = self.gru(x, h0)
        return self.head(out), hn


class CondModel(nn.Module):
    """y = (x * w).sin() if x.sum() > 0 else (x - w).cos(), as a torch.cond (two traced branches)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def positive(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return (x * w).sin()

        def negative(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return (x - w).cos()

        return torch.cond(x.sum() > 0, positive, negative, (x, self.w)) + 1.0


@torch.jit.script
def _accumulate(x: torch.Tensor, steps: torch.Tensor, limit: float) -> torch.Tensor:
    acc = torch.zeros_like(x)
    for i in range(int(steps.item())):
        acc = acc * 0.5 + x * float(i)
        if bool(acc.sum() > limit):
            break
    return acc


class LoopModel(nn.Module):
    def forward(self, x: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        return _accumulate(x, steps, 50.0) + 1.0


def _export(name: str, model: nn.Module, args: tuple, *, dynamo: bool, input_names: list[str],
            output_names: list[str], dynamic_axes: dict | None = None, dynamic_shapes=None) -> str:
    path = OUT / f"{name}.onnx"
    model.eval()
    log = io.StringIO()
    with redirect_stdout(log), redirect_stderr(log), torch.no_grad():
        if dynamo:
            program = torch.onnx.export(model, args, dynamo=True, input_names=input_names, output_names=output_names,
                                        dynamic_shapes=dynamic_shapes)
            program.save(str(path))
        else:
            torch.onnx.export(model, args, str(path), dynamo=False, input_names=input_names,
                              output_names=output_names, dynamic_axes=dynamic_axes)
    onnx.checker.check_model(onnx.load(str(path)))
    return str(path)


def _check(path: str, model: nn.Module, feeds: dict[str, np.ndarray]) -> str:
    """Max abs difference between onnxruntime on the file and torch itself."""
    with torch.no_grad():
        ref = model(*(torch.from_numpy(v) for v in feeds.values()))
    ref = [ref] if isinstance(ref, torch.Tensor) else list(ref)
    got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    return f"{max(float(np.abs(g - r.numpy()).max()) for g, r in zip(got, ref)):.1e}"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    rows = []
    x_lstm = rng.standard_normal((2, 5, 6)).astype(np.float32)
    x_gru, h_gru = rng.standard_normal((6, 3, 5)).astype(np.float32), rng.standard_normal((1, 3, 7)).astype(np.float32)
    x_cond = rng.standard_normal(4).astype(np.float32)
    jobs = [
        ("lstm", LstmTagger(), {"x": x_lstm}, False, ["logits"], {"x": {0: "batch", 1: "seq"}}, None),
        ("gru", GruEncoder(), {"x": x_gru, "h0": h_gru}, False, ["y", "hn"], {"x": {0: "seq", 1: "batch"},
                                                                          "h0": {1: "batch"}}, None),
        ("rnn_dynamo", GruEncoder(), {"x": x_gru, "h0": h_gru}, True, ["y", "hn"], None, None),
        ("cond", CondModel(), {"x": x_cond}, True, ["y"], None, None),
        ("loop", LoopModel(), {"x": x_cond, "steps": np.array(6, np.int64)}, False, ["y"], None, None),
    ]
    for name, model, feeds, dynamo, outputs, axes, shapes in jobs:
        args = tuple(torch.from_numpy(v) for v in feeds.values())
        try:
            path = _export(name, model, args, dynamo=dynamo, input_names=list(feeds), output_names=outputs,
                           dynamic_axes=axes, dynamic_shapes=shapes)
            proto = onnx.load(path)
            ops = sorted({n.op_type for n in proto.graph.node})
            rows.append((name, "dynamo" if dynamo else "torchscript", proto.opset_import[0].version,
                         f"{Path(path).stat().st_size / 1024:.1f} KB", _check(path, model, feeds), ", ".join(ops)))
        except Exception as exc:  # noqa: BLE001 - an exporter gap is a result, recorded in the README
            traceback.print_exc()
            rows.append((name, "dynamo" if dynamo else "torchscript", "-", "-", f"export failed: {exc}", "-"))
    lines = ["# Recurrent and control-flow models exported by torch", "",
             "Written by `tools/export_control_flow_models.py` (rerun it; do not edit by hand). Tested by",
             "`tests/gpu/test_control_exported.py` against onnxruntime. torch is not a test dependency.", "",
             f"- torch {torch.__version__}, onnx {onnx.__version__}, onnxruntime {ort.__version__}; seed 0", "",
             "| file | exporter | opset | size | onnxruntime vs torch | ONNX ops |", "|---|---|---|---|---|---|"]
    lines += [f"| `{n}.onnx` | {e} | {o} | {s} | {c} | {ops} |" for n, e, o, s, c, ops in rows]
    (OUT / "README.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
