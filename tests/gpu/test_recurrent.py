"""RNN, GRU and LSTM on the GPU against onnxruntime: directions, activations with alpha/beta,
clip, sequence lengths, initial states, peepholes, layout, linear_before_reset, input_forget,
and a symbolic sequence length that update_dimensions changes without recompiling."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st
from onnx import helper as h

from onyxia.errors import ShapeInferenceError
from onyxia.plan import LoopStep
from tests.builders.recurrent import rnn_model
from tests.helpers import compile_model, make_model, run_ort

PER_DIR = {"RNN": 1, "GRU": 2, "LSTM": 3}
FUNCS = ["Tanh", "Sigmoid", "Relu", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid", "Elu",
         "Softsign", "Softplus"]


def feeds_for(model, rng) -> dict[str, np.ndarray]:
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "lens":
            seq = next(d.dim_value for i, d in enumerate(model.graph.input[0].type.tensor_type.shape.dim)
                       if i == (1 if any(a.name == "layout" and a.i for a in model.graph.node[0].attribute) else 0))
            out[vi.name] = rng.integers(0, seq + 1, shape).astype(np.int32)
        else:
            out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def oracle(model, feeds, twin=None) -> list[np.ndarray]:
    """onnxruntime's outputs. Its CPU kernels refuse layout=1 (batch first): for such a model it
    runs `twin`, the same op with layout=0, on the inputs transposed to time first, and the
    outputs are transposed back."""
    if twin is None:
        return run_ort(model, feeds)
    swapped = {k: (v.transpose(1, 0, 2) if k in ("X", "h0", "c0") else v) for k, v in feeds.items()}
    outs = run_ort(twin, swapped)
    return [o.transpose(2, 0, 1, 3) if o.ndim == 4 else o.transpose(1, 0, 2) for o in outs]


def assert_matches(runtime, model, feeds, atol=2e-5, twin=None, finite_oracle=False):
    exe = runtime.load_model(compile_model(model))
    ours = exe.run(feeds)
    refs = oracle(model, feeds, twin)
    if finite_oracle and not all(np.isfinite(ref).all() for ref in refs):
        # Unbounded activations (Affine with alpha 2, ...) can overflow onnxruntime's float32
        # exp inside Softplus where the value is finite (onyxia computes it stably): no oracle.
        reject()
    for name, ref in zip(exe.model.outputs, refs):
        assert ours[name].shape == ref.shape, (name, ours[name].shape, ref.shape)
        np.testing.assert_allclose(ours[name], ref, rtol=1e-4, atol=atol, err_msg=name)


@settings(max_examples=15, deadline=None)
@given(op=st.sampled_from(["RNN", "GRU", "LSTM"]), direction=st.sampled_from(["forward", "reverse", "bidirectional"]),
       seq=st.integers(1, 5), batch=st.integers(1, 3), hidden=st.integers(1, 6), layout=st.sampled_from([0, 1]),
       bias=st.booleans(), lens=st.booleans(), initial=st.booleans(), peep=st.booleans(), seed=st.integers(0, 99))
def test_recurrent_matches_ort(runtime, op, direction, seq, batch, hidden, layout, bias, lens, initial, peep, seed):
    args = dict(seq=seq, batch=batch, inputs=3, hidden=hidden, direction=direction, bias=bias, lens=lens,
                initial=initial, peep=peep)
    model = rnn_model(op, layout=layout, **args)
    twin = rnn_model(op, layout=0, **args) if layout else None
    assert_matches(runtime, model, feeds_for(model, np.random.default_rng(seed)), twin=twin)


@settings(max_examples=10, deadline=None)
@given(op=st.sampled_from(["RNN", "GRU", "LSTM"]), data=st.data())
def test_activations_alpha_beta_and_clip(runtime, op, data):
    bidirectional = data.draw(st.booleans(), label="bidirectional")
    count = PER_DIR[op] * (2 if bidirectional else 1)
    funcs = data.draw(st.lists(st.sampled_from(FUNCS), min_size=count, max_size=count), label="activations")
    alphas = data.draw(st.lists(st.floats(0.125, 2.0, width=32), max_size=count), label="alpha")
    betas = data.draw(st.lists(st.floats(0.125, 2.0, width=32), max_size=count), label="beta")
    attrs = {"activations": funcs, **({"activation_alpha": alphas} if alphas else {}),
             **({"activation_beta": betas} if betas else {})}
    if data.draw(st.booleans(), label="clip"):
        attrs["clip"] = data.draw(st.floats(0.25, 3.0, width=32), label="clip value")
    model = rnn_model(op, seq=4, batch=2, inputs=3, hidden=4, direction="bidirectional" if bidirectional else "forward",
                      **attrs)
    assert_matches(runtime, model, feeds_for(model, np.random.default_rng(1)), atol=1e-4, finite_oracle=True)


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_gru_linear_before_reset(runtime, lbr, direction):
    model = rnn_model("GRU", seq=5, batch=3, inputs=4, hidden=6, direction=direction, lens=True, initial=True,
                      linear_before_reset=lbr)
    assert_matches(runtime, model, feeds_for(model, np.random.default_rng(2)))


def test_lstm_input_forget(runtime):
    model = rnn_model("LSTM", seq=4, batch=2, inputs=3, hidden=5, input_forget=1, peep=True, initial=True)
    assert_matches(runtime, model, feeds_for(model, np.random.default_rng(3)))


def test_symbolic_sequence_length_follows_update_dimensions(runtime):
    """The time loop's trip count is the `seq` dim: no readback, no recompile."""
    model = rnn_model("LSTM", seq=3, batch=2, inputs=3, hidden=4, direction="bidirectional", initial=True)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "seq"
    compiled = compile_model(model, {"seq": 3})
    (loop,) = [s for s in compiled.steps if isinstance(s, LoopStep)]
    assert str(loop.trip_count) == "seq" and loop.cond is None
    exe = runtime.load_model(compiled)
    assert not exe._device_syncs
    rng = np.random.default_rng(4)
    for seq in (3, 8, 1, 5):
        exe.update_dimensions({"seq": seq})
        feeds = {"X": rng.standard_normal((seq, 2, 3)).astype(np.float32),
                 "h0": rng.standard_normal((2, 2, 4)).astype(np.float32),
                 "c0": rng.standard_normal((2, 2, 4)).astype(np.float32)}
        ours = exe.run(feeds)
        for name, ref in zip(compiled.outputs, run_ort(model, feeds)):
            np.testing.assert_allclose(ours[name], ref, rtol=1e-4, atol=2e-5, err_msg=f"{name} at seq={seq}")
    assert exe.stats.recompiles == 0


def test_errors_name_node_and_attribute():
    with pytest.raises(ShapeInferenceError, match="node 'rec' \\(LSTM\\): attribute 'direction' must be"):
        spec = [("X", np.float32, [2, 1, 3]), ("W", np.float32, [1, 8, 3]), ("R", np.float32, [1, 8, 2])]
        compile_model(make_model([h.make_node("LSTM", ["X", "W", "R"], ["Y"], hidden_size=2, direction="up",
                                              name="rec")], spec, ["Y"]))
    with pytest.raises(ShapeInferenceError, match="attribute 'activations': unknown function 'Gelu'"):
        compile_model(rnn_model("RNN", seq=2, batch=1, inputs=3, hidden=2, activations=["Gelu"]))
    with pytest.raises(ShapeInferenceError, match="node 'rec' \\(GRU\\) input 2: R must be \\[1, 6, 2\\]"):
        compile_model(make_model([h.make_node("GRU", ["X", "W", "R"], ["Y"], hidden_size=2, name="rec")],
                                 [("X", np.float32, [2, 1, 3]), ("W", np.float32, [1, 6, 3]),
                                  ("R", np.float32, [1, 6, 3])], ["Y"]))


