"""Recurrent and control-flow models exported by torch (tests/data/control, written by
tools/export_control_flow_models.py) against onnxruntime: nn.LSTM and nn.GRU through the
TorchScript and dynamo exporters, torch.cond (an ONNX If on a device condition) and a
TorchScript-scripted loop (an ONNX Loop with a fed trip count and an early exit)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import onyxia
from onyxia.plan import BranchStep, LoopStep, ReadSymbol
from tests.helpers import run_ort

DATA = Path(__file__).resolve().parents[1] / "data" / "control"
RNG = np.random.default_rng(11)


def f32(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {
    "lstm": [{"x": f32(b, s, 6)} for b, s in ((2, 5), (3, 9), (1, 1))],
    "gru": [{"x": f32(s, b, 5), "h0": f32(1, b, 7)} for s, b in ((6, 3), (2, 1), (10, 4))],
    "rnn_dynamo": [{"x": f32(6, 3, 5), "h0": f32(1, 3, 7)}],
    "cond": [{"x": np.abs(f32(4))}, {"x": -np.abs(f32(4))}],
    "loop": [{"x": 3 * f32(4), "steps": np.array(n, np.int64)} for n in (6, 0, 1, 20)],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_exported_model_matches_ort(runtime, name):
    model = onnx.load(str(DATA / f"{name}.onnx"))
    sess = onyxia.InferenceSession(model, runtime=runtime)
    for feeds in CASES[name]:
        ours, ref = sess.run(None, feeds), run_ort(model, feeds)
        for a, b in zip(ours, ref):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=name)
    assert sess.executor.stats.recompiles == 0


def test_exported_control_flow_plans_as_designed(runtime):
    """torch.cond's If reads its condition back. The scripted loop comes out as a while loop
    (M = INT64_MAX, the condition `i + 1 < steps and not break` computed in the body, its
    initial value `steps > 0` on the device, the `break` an If inside the body): it reads the
    initial condition once and the condition after each iteration. LSTM/GRU loop over the
    sequence without a readback."""
    def steps(name, feeds):
        sess = onyxia.InferenceSession(onnx.load(str(DATA / f"{name}.onnx")), runtime=runtime)
        sess.run(None, feeds)
        return sess.executor.model.steps

    assert any(isinstance(s, BranchStep) for s in steps("cond", CASES["cond"][0]))
    loop_steps = steps("loop", CASES["loop"][0])
    (loop,) = [s for s in loop_steps if isinstance(s, LoopStep)]
    assert loop.cond is not None and loop.first is not None and loop.iterations is not None
    assert any(isinstance(s, BranchStep) for s in loop.body) and not any(isinstance(s, ReadSymbol) for s in loop_steps)
    for name in ("lstm", "gru"):
        loops = [s for s in steps(name, CASES[name][0]) if isinstance(s, LoopStep)]
        assert loops and all(s.cond is None and s.first is None for s in loops)
