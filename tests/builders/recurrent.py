"""Builders shared by tests/gpu/test_recurrent.py and tests/gpu/test_shader_validation.py's table."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from tests.helpers import make_model

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def rnn_model(op, *, seq, batch, inputs, hidden, direction="forward", layout=0, bias=True, lens=False,
              initial=False, peep=False, outputs=("Y", "Y_h", "Y_c"), **attrs):
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op] * hidden
    rng = np.random.default_rng(seq * 7 + hidden)
    x_shape = [batch, seq, inputs] if layout else [seq, batch, inputs]
    state = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    spec = [("X", np.float32, x_shape)]
    inits = {"W": (rng.standard_normal((dirs, g, inputs)) * 0.5).astype(np.float32),
             "R": (rng.standard_normal((dirs, g, hidden)) * 0.5).astype(np.float32)}
    names = ["X", "W", "R"]
    if bias:
        inits["B"] = (rng.standard_normal((dirs, 2 * g)) * 0.3).astype(np.float32)
    names.append("B" if bias else "")
    if lens:
        spec.append(("lens", np.int32, [batch]))
    names.append("lens" if lens else "")
    if initial:
        spec.append(("h0", np.float32, state))
    names.append("h0" if initial else "")
    if op == "LSTM":
        if initial:
            spec.append(("c0", np.float32, state))
        names.append("c0" if initial else "")
        if peep:
            inits["P"] = (rng.standard_normal((dirs, 3 * hidden)) * 0.3).astype(np.float32)
        names.append("P" if peep else "")
    while names[-1] == "":
        names.pop()
    outs = list(outputs[:2] if op != "LSTM" else outputs)
    node = h.make_node(op, names, outs, hidden_size=hidden, direction=direction,
                       **({"layout": layout} if layout else {}), **attrs)
    return make_model([node], spec, outs, inits, opset=14 if layout else 18)


def validation_models() -> list:
    """(model, dims) for tests/gpu/test_shader_validation.py, with a dynamic sequence dim `n`."""
    out = []
    for op, attrs in (("RNN", {}), ("GRU", {}), ("GRU", {"linear_before_reset": 1}),
                      ("LSTM", {"clip": 1.5, "activations": ["HardSigmoid", "Elu", "Softsign"]})):
        model = rnn_model(op, seq=2, batch=2, inputs=3, hidden=3, lens=True, initial=True, peep=True, **attrs)
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
        out.append((model, {"n": 3}))
    model = rnn_model("LSTM", seq=2, batch=2, inputs=3, hidden=3, layout=1, direction="bidirectional")
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "n"
    out.append((model, {"n": 3}))
    return out
