"""DFT and STFT on the GPU against onnx.reference and numpy.fft (onnxruntime has no STFT/DFT
for every case here: onnx's reference is the oracle)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from onyxia.errors import ShapeInferenceError
from onyxia.operators.spectral.spectral import DIRECT_MAX
from onyxia.runtime.select import SelectCommand
from onyxia.runtime.tuner import TuneSettings
from tests.builders.spectral import dft_model, stft_model
from tests.helpers import compile_model, make_model, run_onyxia

RNG = np.random.default_rng(0)


def assert_spectrum_close(ours: np.ndarray, ref: np.ndarray, rel: float = 2e-5) -> None:
    """f32 transforms: errors scale with the spectrum's magnitude, not each bin's."""
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    scale = max(float(np.abs(ref).max()), 1.0)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=rel * scale)


def check_against_reference(runtime, model, feeds, rel: float = 2e-5) -> None:
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    assert_spectrum_close(run_onyxia(runtime, model, feeds)[0], expected, rel)


@st.composite
def dft_cases(draw):
    rank = draw(st.integers(3, 4))
    shape = [draw(st.integers(1, 3))] + [draw(st.integers(1, 12)) for _ in range(rank - 2)]
    shape.append(draw(st.sampled_from([1, 2])))
    axis = draw(st.integers(1, rank - 2))
    inverse, onesided = draw(st.booleans()), draw(st.booleans())
    # None, powers of two, short lengths (summed directly) and long ones (Bluestein's FFTs)
    length = draw(st.one_of(st.none(), st.sampled_from([1, 2, 8, 16, 64]), st.integers(3, 40),
                            st.integers(DIRECT_MAX + 1, DIRECT_MAX + 200)))
    if inverse and onesided and length is None and shape[axis] < 2:
        shape[axis] = 2  # the default length 2 (N - 1) must be positive
    negative = draw(st.booleans())
    return shape, (axis - rank if negative else axis), inverse, onesided, length, draw(st.sampled_from([17, 20]))


@settings(max_examples=30, deadline=None)
@given(case=dft_cases())
def test_random_dfts_match_the_reference(runtime, case):
    shape, axis, inverse, onesided, length, opset = case
    model = dft_model(shape, opset=opset, axis=axis, length=length, inverse=int(inverse), onesided=int(onesided))
    check_against_reference(runtime, model, {"x": RNG.standard_normal(shape).astype(np.float32)})


@pytest.mark.parametrize("n,inverse", [(10, 0), (10, 1), (16, 0), (64, 1)])
def test_a_real_signals_dc_and_nyquist_bins_are_exactly_real(runtime, n, inverse):
    """Direct sums and power-of-two FFTs use exact twiddles on the axes, so the imaginary parts
    that are exactly 0 come out as 0 (numpy 2's complex64 FFT leaves 1.9e-7 at n = 10, which two
    conformance cases expect at atol 1e-7: they stay in the ledger for that reason)."""
    x = np.zeros((1, n, 4, 2), np.float32)
    x[..., 0] = np.arange(n * 4, dtype=np.float32).reshape(1, n, 4)
    y = run_onyxia(runtime, dft_model(x.shape, axis=1, inverse=inverse), {"x": x})[0]
    assert np.all(y[0, 0, :, 1] == 0) and np.all(y[0, n // 2, :, 1] == 0)
    expected = np.fft.ifft(x[..., 0].astype(np.float64), axis=1) if inverse else np.fft.fft(x[..., 0], axis=1)
    assert_spectrum_close(y, np.stack([expected.real, expected.imag], -1).astype(np.float32))


@pytest.mark.parametrize("n", [70001, 131072])
def test_a_long_transform_past_65536_matches_numpy(runtime, n):
    """70001 points (Bluestein: FFTs of 2^18) and 2^17: every invocation does one butterfly, so
    nothing runs into lavapipe's per-invocation loop limit."""
    x = RNG.standard_normal((1, n, 2)).astype(np.float32)
    y = run_onyxia(runtime, dft_model([1, n, 2], axis=1), {"x": x})[0]
    expected = np.fft.fft(x[0, :, 0].astype(np.float64) + 1j * x[0, :, 1], axis=0)
    ours = y[0, :, 0] + 1j * y[0, :, 1]
    assert np.abs(ours - expected).max() < 2e-6 * np.abs(expected).max()


def test_a_dynamic_length_reuses_one_plan(runtime):
    """DFT along a symbolic axis: the plan holds the stages of the largest FFT, the unused ones
    get no workgroups; lengths change with update_dimensions and nothing recompiles."""
    model = dft_model([2, "n", 2], opset=17, axis=1, inverse=1)
    exe = runtime.load_model(compile_model(model, {"n": 12}))
    for n in (12, 16, 1, 3, 1000, 4096):
        exe.update_dimensions({"n": n})
        x = RNG.standard_normal((2, n, 2)).astype(np.float32)
        expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
        assert_spectrum_close(exe.run({"x": x})["y"], expected)
    assert exe.stats.recompiles == 0


def test_a_new_length_with_tuning_on_replays_each_level_as_its_guards_say(runtime, tmp_path):
    """The FFT's level Selects (untuned: "skip" is always eligible, "run" preferred where the
    length needs the level) are not interchangeable kernel variants: with tuning on, a new length
    whose levels' kernels never ran must still run them (a warm stand-in there, "skip" for a cold
    "run", gave garbage at length 1000 after 16)."""
    model = dft_model([2, "n", 2], opset=17, axis=1, inverse=1)
    exe = runtime.load_model(compile_model(model, {"n": 16}),
                             tuning=TuneSettings(enabled=True, cache_dir=tmp_path / "cache"))
    for n in (16, 1000, 3, 4096):
        exe.update_dimensions({"n": n})
        x = RNG.standard_normal((2, n, 2)).astype(np.float32)
        expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
        assert_spectrum_close(exe.run({"x": x})["y"], expected)
        assert all(c.source == "guards" for c in exe.commands if isinstance(c, SelectCommand) and not c.tuned)


@pytest.mark.parametrize("x_shape,step,window,frame_length,onesided", [
    ([1, 128, 1], 8, None, 16, 1),     # the conformance case's layout: power of two
    ([2, 100, 1], 7, 20, None, 1),     # window, length 20: summed directly
    ([2, 100, 2], 10, 25, 25, 0),      # complex signal, two-sided
    ([1, 1200, 1], 160, 400, None, 1),  # Whisper's framing: 400-point frames, Bluestein
    ([3, 64, 1], 64, None, None, 1),   # one frame, the whole signal
])
def test_stft_matches_the_reference(runtime, x_shape, step, window, frame_length, onesided):
    model = stft_model(x_shape, step, window=window, frame_length=frame_length, onesided=onesided)
    feeds = {"x": RNG.standard_normal(x_shape).astype(np.float32)}
    if window is not None:
        feeds["w"] = np.hanning(window).astype(np.float32)
    check_against_reference(runtime, model, feeds)


def test_stft_with_a_dynamic_signal_length(runtime):
    model = stft_model([1, "t", 1], 4, frame_length=16)
    exe = runtime.load_model(compile_model(model, {"t": 40}))
    for t in (40, 16, 97):
        exe.update_dimensions({"t": t})
        x = RNG.standard_normal((1, t, 1)).astype(np.float32)
        assert_spectrum_close(exe.run({"x": x})["y"], ReferenceEvaluator(model).run(None, {"x": x})[0])
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("build", [
    lambda: dft_model([2, 12, 3, 1], axis=1, onesided=1),
    lambda: dft_model([2, 6, 3, 2], axis=1, length=10, inverse=1, onesided=1),
    lambda: dft_model([1, 300, 2], axis=1, inverse=1),
    lambda: stft_model([1, 64, 1], 8, frame_length=16),
])
def test_constant_transforms_fold_to_the_gpus_result(runtime, build):
    """With x a constant the node folds (numpy, float64) and plans nothing; the same node with x
    fed computes the same values on the GPU."""
    model = build()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = RNG.standard_normal(shape).astype(np.float32)
    on_gpu = run_onyxia(runtime, model, {"x": x})[0]
    inits = {"x": x, **{t.name: numpy_helper.to_array(t) for t in model.graph.initializer}}
    folded = make_model(model.graph.node, [], ["y"], inits, opset=model.opset_import[0].version)
    assert not compile_model(folded).shaders
    on_host = run_onyxia(runtime, folded, {})[0]
    assert_spectrum_close(on_host, ReferenceEvaluator(model).run(None, {"x": x})[0])
    assert_spectrum_close(on_gpu, on_host)


@pytest.mark.parametrize("model,match", [
    (dft_model([1, 8, 2], opset=17, axis=2), r"node 'dft0' \(DFT\): attribute 'axis' 2 must name a signal axis"),
    (dft_model([1, 8, 2], opset=20, axis=-1), r"node 'dft0' \(DFT\): input 'axis' -1 must name a signal axis"),
    (dft_model([1, 8, 3], axis=1), r"node 'dft0' \(DFT\) input 0: expects \[\.\.\., signal, 1 \| 2\]"),
    (dft_model([1, 8, 2], axis=1, length=0), r"node 'dft0' \(DFT\) input 1: dft_length must be positive"),
    (stft_model([1, 8, 1], 0), r"node 'stft0' \(STFT\) input 1: frame_step must be positive"),
    (stft_model([1, 8, 1], 2, frame_length=9), r"node 'stft0' \(STFT\) input 3: frame_length 9 must be in \[1, 8\]"),
    (stft_model([1, 8, 1], 2, window=4, frame_length=5), r"node 'stft0' \(STFT\) input 2: window has 4 values"),
])
def test_bad_transforms_are_errors_naming_the_node(model, match):
    with pytest.raises(ShapeInferenceError, match=match):
        compile_model(model)


