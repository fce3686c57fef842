"""Feeds after a cached call: InferenceSession reuses the executor and dims of a call with the
same feed shapes, TensorSlot.check_feed accepts an array of the slot's shape and dtype at once,
dtypes.to_device uploads contiguous arrays without a copy. Whatever comes next (new values, new
shapes, non-contiguous or Fortran-order arrays, lists, wrong dtypes or ranks, values out of the
device's range, dims changed behind the session's back) is still checked and converted: results
against onnxruntime, errors as InputErrors."""

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as h

import onyxia
from onyxia.errors import InputError
from onyxia.runtime import wgpu_readback
from tests.helpers import compile_model, make_model, run_ort


def _model():
    rng = np.random.default_rng(0)
    nodes = [h.make_node("MatMul", ["x", "w"], ["y"]),
             h.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT), h.make_node("Mul", ["kf", "two"], ["c"]),
             h.make_node("Add", ["f", "f"], ["g"])]
    inits = {"w": rng.standard_normal((6, 5)).astype(np.float32), "two": np.array(2.0, np.float32)}
    return make_model(nodes, [("x", np.float32, ["batch", "seq", 6]), ("k", np.int64, ["batch", "seq"]),
                              ("f", np.float16, ["n"])], ["y", "c", "g"], inits)


def _feeds(batch: int, seq: int, n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, seq, 6)).astype(np.float32),
            "k": rng.integers(-50, 50, (batch, seq)).astype(np.int64),
            "f": rng.standard_normal(n).astype(np.float16)}


def _assert_matches(model, got, feeds) -> None:
    want = run_ort(model, feeds)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=2e-3, atol=2e-3)


def test_feeds_after_a_cached_call_are_checked_and_converted(runtime):
    model = _model()
    sess = onyxia.InferenceSession(model, runtime=runtime)
    feeds = _feeds(2, 3, 4, seed=1)
    _assert_matches(model, sess.run(None, feeds), feeds)
    again = _feeds(2, 3, 4, seed=2)  # the same shapes: the cached executor and dims
    _assert_matches(model, sess.run(None, again), again)
    wide = np.random.default_rng(3).standard_normal((2, 3, 12)).astype(np.float32)
    strided = {"x": wide[:, :, ::2], "k": np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3)),
               "f": np.arange(8, dtype=np.float16)[::2]}
    assert not strided["x"].flags.c_contiguous and not strided["k"].flags.c_contiguous
    _assert_matches(model, sess.run(None, strided), {k: np.ascontiguousarray(v) for k, v in strided.items()})
    listed = {**feeds, "k": [[1, 2, 3], [4, 5, 6]]}  # a list: converted, int64 by numpy's default
    _assert_matches(model, sess.run(None, listed), {**feeds, "k": np.array(listed["k"], np.int64)})
    # An odd float16 count (padded to whole words) and other symbol values, then back.
    for batch, seq, n in ((1, 5, 3), (3, 1, 4), (2, 3, 4)):
        feeds = _feeds(batch, seq, n, seed=10 + n)
        _assert_matches(model, sess.run(None, feeds), feeds)
    assert sess.executor.stats.recompiles == 0


def test_bad_feeds_after_a_cached_call_still_raise(runtime):
    model = _model()
    sess = onyxia.InferenceSession(model, runtime=runtime)
    feeds = _feeds(2, 3, 4, seed=1)
    sess.run(None, feeds)
    with pytest.raises(InputError, match="'x' has dtype float64"):
        sess.run(None, {**feeds, "x": feeds["x"].astype(np.float64)})
    with pytest.raises(InputError, match="'k' has dtype int32"):
        sess.run(None, {**feeds, "k": feeds["k"].astype(np.int32)})
    with pytest.raises(InputError, match="'x' has dtype >f4"):
        sess.run(None, {**feeds, "x": feeds["x"].astype(">f4")})
    with pytest.raises(InputError, match="'x' has rank 2"):
        sess.run(None, {**feeds, "x": feeds["x"][0]})
    with pytest.raises(InputError, match="'seq' is already 3"):
        sess.run(None, {**feeds, "k": np.zeros((2, 4), np.int64)})
    with pytest.raises(InputError, match="int64 values must fit in int32"):
        sess.run(None, {**feeds, "k": np.full((2, 3), 1 << 40, np.int64)})
    with pytest.raises(InputError, match="missing inputs \\['f'\\]"):
        sess.run(None, {"x": feeds["x"], "k": feeds["k"]})
    _assert_matches(model, sess.run(None, feeds), feeds)  # still usable after errors


def test_dims_changed_through_the_executor_are_bound_again(runtime):
    """The session's shortcut for repeated shapes still hands the executor the feeds' dims."""
    model = _model()
    sess = onyxia.InferenceSession(model, runtime=runtime)
    feeds = _feeds(2, 3, 4, seed=4)
    sess.run(None, feeds)
    sess.executor.update_dimensions({"batch": 1, "seq": 7})
    _assert_matches(model, sess.run(None, feeds), feeds)


@pytest.mark.parametrize("reads", ["raw", "api"])
def test_executor_checks_feeds_after_a_cached_one(runtime, reads, monkeypatch):
    """(`api`: outputs mapped through wgpu-py's map_sync, as where wgpu-native's own calls are
    missing: runtime/wgpu_readback.py.)"""
    assert wgpu_readback._RAW_MAP is not None  # the pinned wgpu-py has them
    if reads == "api":
        monkeypatch.setattr(wgpu_readback, "_RAW_MAP", None)
    model = _model()
    exe = runtime.load_model(compile_model(model, {"batch": 2, "seq": 3, "n": 4}))
    feeds = _feeds(2, 3, 4, seed=5)
    _assert_matches(model, [exe.run(feeds)[n] for n in ("y", "c", "g")], feeds)
    strided = {**feeds, "x": np.random.default_rng(6).standard_normal((2, 3, 12)).astype(np.float32)[:, :, 1::2]}
    _assert_matches(model, [exe.run(strided)[n] for n in ("y", "c", "g")],
                    {**strided, "x": np.ascontiguousarray(strided["x"])})
    with pytest.raises(InputError, match="'x' dim 1 is 4, expected 3"):
        exe.run({**feeds, "x": np.zeros((2, 4, 6), np.float32)})
    with pytest.raises(InputError, match="'f' has dtype float32"):
        exe.run({**feeds, "f": feeds["f"].astype(np.float32)})
    only = exe.run(feeds, ["c"])  # outputs not asked for are not read back
    assert list(only) == ["c"] and exe.stats.readback_bytes == only["c"].nbytes
