"""EyeLike, the random generators (RandomUniform/Normal(+Like), Bernoulli) and BitCast on the GPU.

EyeLike and BitCast are exact: compared with onnxruntime / onnx.reference and with folding.
Random numbers are onyxia's own (a counter-based PCG hash; ONNX does not fix a generator), so
their tests check the distribution, determinism per seed, and onnxruntime where the result
does not depend on the generator (Bernoulli with probabilities 0 and 1).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

from onyxia.errors import OnyxiaError
from onyxia.operators.generators.generators import pcg_hash
from tests.builders.generators import SAME_WIDTH, bernoulli_model, bitcast_model, random_model
from tests.helpers import compile_model, make_model, run_onyxia

PROPERTY = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- EyeLike ------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,k,dtype", [((4, 4), 0, None), ((3, 5), 1, None), ((5, 3), -2, TensorProto.INT32),
                                           ((4, 6), 7, TensorProto.BOOL), ((2, 3), -1, TensorProto.FLOAT16)])
def test_eye_like_matches_ort_and_folds(runtime, shape, k, dtype):
    attrs = {"k": k} | ({} if dtype is None else {"dtype": dtype})
    node = h.make_node("EyeLike", ["x"], ["y"], **attrs)
    x = np.zeros(shape, np.float32)
    fed = make_model([node], [("x", np.float32, ["r", "c"])], ["y"])
    (expected,) = ReferenceEvaluator(fed).run(None, {"x": x})  # onnxruntime lacks bool/float16 EyeLike
    (gpu,) = run_onyxia(runtime, fed, {"x": x}, {"r": shape[0], "c": shape[1]})
    assert gpu.dtype == expected.dtype
    np.testing.assert_array_equal(gpu, expected)
    const = make_model([node], [], ["y"], {"x": x})
    assert compile_model(const).num_dispatches == 0
    (folded,) = run_onyxia(runtime, const, {})
    np.testing.assert_array_equal(folded, gpu)


def test_eye_like_rejects_rank_3_naming_the_node():
    model = make_model([h.make_node("EyeLike", ["x"], ["y"], name="eye")], [("x", np.float32, [2, 2, 2])], ["y"])
    with pytest.raises(OnyxiaError, match="eye.*2-D"):
        compile_model(model)


# ---- random generators ------------------------------------------------------------------------------


def draw(runtime, model, feeds=None, dims=None) -> np.ndarray:
    return run_onyxia(runtime, model, feeds or {}, dims)[0]


@PROPERTY
@given(low=st.floats(-10, 10), width=st.floats(0.1, 10), seed=st.integers(0, 10**6))
def test_uniform_distribution(runtime, low, width, seed):
    high = low + width
    y = draw(runtime, random_model("RandomUniform", low=low, high=high, seed=float(seed)))
    assert y.dtype == np.float32 and y.shape == (64, 128)
    assert y.min() >= low and y.max() <= high
    u = (y.astype(np.float64) - low) / width
    # mean 1/2 and variance 1/12; 5 standard errors over 8192 draws
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / u.size)
    assert abs(u.var() - 1 / 12) < 0.01
    assert np.histogram(u, bins=8, range=(0, 1))[0].min() > u.size / 8 * 0.85  # no empty region


@PROPERTY
@given(mean=st.floats(-5, 5), scale=st.floats(0.1, 4), seed=st.integers(0, 10**6))
def test_normal_distribution(runtime, mean, scale, seed):
    y = draw(runtime, random_model("RandomNormal", mean=mean, scale=scale, seed=float(seed))).astype(np.float64)
    z = (y - mean) / scale
    # each within 5 standard errors over the 8192 draws (std: 1 / sqrt(2n); mass: sqrt(p(1-p)/n))
    assert abs(z.mean()) < 5 / np.sqrt(z.size)
    assert abs(z.std() - 1) < 5 / np.sqrt(2 * z.size)
    assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 5 * np.sqrt(0.6827 * 0.3173 / z.size)  # one-sigma mass


def test_uniform_is_the_documented_hash(runtime):
    # element i is pcg(i ^ pcg(seed bits)) >> 8, scaled to [low, high): the kernel computes it exactly
    y = draw(runtime, random_model("RandomUniform", (5, 7), low=-1.0, high=3.0, seed=3.0))
    seed = pcg_hash(int(np.float32(3.0).view(np.uint32)))
    u = np.array([pcg_hash(i ^ seed) >> 8 for i in range(35)], np.float32) * np.float32(1 / 16777216)
    np.testing.assert_array_equal(y.reshape(-1), np.float32(-1.0) + np.float32(4.0) * u)


def test_seeds_fix_the_stream_and_nodes_differ(runtime):
    a = draw(runtime, random_model("RandomNormal", seed=7.0))
    b = draw(runtime, random_model("RandomNormal", seed=7.0))
    c = draw(runtime, random_model("RandomNormal", seed=8.0))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # unseeded: a fixed stream per node name, the same on every run, different between nodes
    nodes = [h.make_node("RandomUniform", [], [f"y{i}"], name=f"r{i}", shape=[32]) for i in range(2)]
    model = make_model(nodes, [], ["y0", "y1"])
    exe = runtime.load_model(compile_model(model))
    first, second = exe.run({}), exe.run({})
    np.testing.assert_array_equal(first["y0"], second["y0"])
    assert not np.array_equal(first["y0"], first["y1"])


def test_like_ops_follow_the_input_shape_and_dtype(runtime):
    model = random_model("RandomUniformLike", like=True, seed=1.0)
    for n in (3, 9):
        y = draw(runtime, model, {"x": np.zeros((n, 128), np.float32)}, {"n": n})
        assert y.shape == (n, 128) and y.dtype == np.float32 and 0 <= y.min() and y.max() < 1
    fp16 = make_model([h.make_node("RandomNormalLike", ["x"], ["y"], dtype=TensorProto.FLOAT16)],
                      [("x", np.int32, [4, 4])], ["y"])
    assert draw(runtime, fp16, {"x": np.zeros((4, 4), np.int32)}).dtype == np.float16


def test_random_ops_do_not_fold():
    assert compile_model(random_model("RandomUniform", seed=1.0)).num_dispatches == 1


# onnxruntime 1.32 runs Bernoulli as its ONNX function body, which draws 1 when u > p: the
# opposite of the spec ("an output of 1 is produced with probability p"). onnx.reference and
# onyxia follow the spec, so these tests compare with onnx.reference.
@pytest.mark.parametrize("dtype", [None, TensorProto.INT32, TensorProto.BOOL])
def test_bernoulli_certain_outcomes_match_reference(runtime, dtype):
    p = np.tile(np.array([0.0, 1.0], np.float32), 50)  # no randomness left: any generator agrees
    model = bernoulli_model(dtype, seed=2.0)
    (expected,) = ReferenceEvaluator(model).run(None, {"p": p})
    (ours,) = run_onyxia(runtime, model, {"p": p}, {"n": p.size})
    assert ours.dtype == expected.dtype
    np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize("prob", [0.1, 0.5, 0.85])
def test_bernoulli_frequency_is_p(runtime, prob):
    p = np.full(20000, prob, np.float32)
    ours = draw(runtime, bernoulli_model(seed=5.0), {"p": p}, {"n": p.size})
    (reference,) = ReferenceEvaluator(bernoulli_model(seed=5.0)).run(None, {"p": p})
    assert set(np.unique(ours)) <= {0.0, 1.0}
    sigma = np.sqrt(prob * (1 - prob) / p.size)
    assert abs(ours.mean() - prob) < 5 * sigma and abs(reference.mean() - prob) < 5 * sigma


@pytest.mark.parametrize("op,attrs,match", [
    ("RandomUniform", {"shape": [2], "dtype": TensorProto.INT32}, "dtype"),
    ("RandomNormal", {"shape": [2, -1]}, "shape"),
    ("RandomUniform", {"shape": [2], "dtype": 99}, "dtype"),
])
def test_bad_random_attributes_name_node_and_attribute(op, attrs, match):
    model = make_model([h.make_node(op, [], ["y"], name="rng", **attrs)], [], ["y"])
    with pytest.raises(OnyxiaError, match=f"rng.*{match}"):
        compile_model(model)


# ---- BitCast --------------------------------------------------------------------------------------


def raw_values(rng, dtype, shape) -> np.ndarray:
    """Arbitrary bit patterns of dtype (finite for floats, 0/1 for bool)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    bits = rng.integers(0, 2 ** (8 * dtype.itemsize), shape, dtype=np.uint64).astype(f"u{dtype.itemsize}")
    values = bits.view(dtype)
    if dtype.kind == "f":
        values = np.where(np.isfinite(values), values, dtype.type(1.5))
    return values


@PROPERTY
@given(pair=st.sampled_from(SAME_WIDTH), rows=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_bitcast_matches_reference_and_folding(runtime, pair, rows, seed):
    src, dst = pair
    x = raw_values(np.random.default_rng(seed), src, (rows, 3))
    if np.dtype(dst).kind == "f":
        # NaN payloads do not survive float16's f32 device words: keep the bit patterns finite
        finite = np.isfinite(x.view(dst))
        x = np.where(finite, x, np.array(1.5, dst).view(src))
    model = bitcast_model(src, dst)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    (gpu,) = run_onyxia(runtime, model, {"x": x}, {"n": rows})
    assert gpu.dtype == expected.dtype
    np.testing.assert_array_equal(gpu.view(np.uint8), np.ascontiguousarray(expected).view(np.uint8))
    const = make_model(model.graph.node, [], ["y"], {"x": x}, opset=26)
    assert compile_model(const).num_dispatches == 0
    np.testing.assert_array_equal(run_onyxia(runtime, const, {})[0].view(np.uint8), gpu.view(np.uint8))


def test_bitcast_width_mismatch_names_node_and_attribute():
    model = make_model([h.make_node("BitCast", ["x"], ["y"], name="bc", to=TensorProto.INT16)],
                       [("x", np.float32, [3])], ["y"], opset=26)
    with pytest.raises(OnyxiaError, match="bc.*'to'"):
        compile_model(model)


