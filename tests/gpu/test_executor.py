"""Runtime acceptance: PlanExecutor against onnxruntime across dimension changes, both immediates
transports, static-dim recompiles, device tensors, saved plans, user operators and bad input."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.errors import DimensionError, InputError, OnyxiaError
from onyxia.ir.shapes import SymDim
from onyxia.plan import CompiledModel
from onyxia.runtime import DeviceTensor, wgpu_backend
from tests.builders.registry import custom_registry, scaled_square_model
from tests.helpers import compile_model, make_model, run_ort

TRANSPORTS = ["immediate", "uniform"]
RTOL, ATOL = 1e-5, 1e-5


def encoder_model() -> onnx.ModelProto:
    """Gather/Add/Mul/Sqrt/Div/Neg/Relu/MatMul/Sub/Concat, a folded Shape→Gather→Unsqueeze→Concat
    →Reshape chain, Unsqueeze, Cast, and a symbolic Shape output, over [batch, seq, 8]."""
    rng = np.random.default_rng(0)
    nodes = [
        h.make_node("Gather", ["emb", "ids"], ["g"], axis=0),
        h.make_node("Add", ["x", "g"], ["a"]),
        h.make_node("Mul", ["a", "scale"], ["m"]),
        h.make_node("Mul", ["m", "m"], ["sq"]),
        h.make_node("Add", ["sq", "one"], ["sq1"]),
        h.make_node("Sqrt", ["sq1"], ["r"]),
        h.make_node("Div", ["m", "r"], ["d"]),
        h.make_node("Neg", ["d"], ["n"]),
        h.make_node("Relu", ["n"], ["rl"]),
        h.make_node("MatMul", ["rl", "W"], ["mm"]),
        h.make_node("Sub", ["mm", "bias"], ["sub"]),
        h.make_node("Concat", ["sub", "d"], ["c"], axis=2),
        h.make_node("Shape", ["x"], ["shp"]),
        h.make_node("Gather", ["shp", "zero"], ["b"], axis=0),
        h.make_node("Unsqueeze", ["b", "ax0"], ["bu"]),
        h.make_node("Concat", ["bu", "m1"], ["target"], axis=0),
        h.make_node("Reshape", ["c", "target"], ["flat"]),
        h.make_node("Unsqueeze", ["flat", "ax1"], ["y"]),
        h.make_node("Cast", ["ids"], ["ids_f"], to=TensorProto.FLOAT),
        h.make_node("Add", ["ids_f", "x_sum_stub"], ["idsf"]),
    ]
    inits = {
        "emb": rng.standard_normal((16, 8)).astype(np.float32), "scale": np.array([0.5], np.float32),
        "one": np.float32(1.0), "W": rng.standard_normal((8, 6)).astype(np.float32),
        "bias": rng.standard_normal(6).astype(np.float32), "zero": np.array(0, np.int64),
        "ax0": np.array([0], np.int64), "m1": np.array([-1], np.int64), "ax1": np.array([1], np.int64),
        "x_sum_stub": np.float32(0.25),
    }
    return make_model(nodes, [("x", np.float32, ["batch", "seq", 8]), ("ids", np.int64, ["batch", "seq"])],
                      ["y", "idsf", "shp"], inits)


def feeds_for(batch: int, seq: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, seq, 8)).astype(np.float32),
            "ids": rng.integers(0, 16, (batch, seq)).astype(np.int64)}


def assert_outputs_match(model: onnx.ModelProto, got: dict[str, np.ndarray], feeds: dict[str, np.ndarray]) -> None:
    ref = run_ort(model, feeds)
    names = [o.name for o in model.graph.output]
    for name, expected in zip(names, ref):
        actual = got[name]
        assert actual.dtype == expected.dtype, f"{name}: dtype {actual.dtype} vs onnxruntime {expected.dtype}"
        assert actual.shape == expected.shape, f"{name}: shape {actual.shape} vs onnxruntime {expected.shape}"
        np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.fixture(scope="module")
def encoder():
    model = encoder_model()
    return model, compile_model(model, {"batch": 2, "seq": 8})


def seq_buffers(compiled: CompiledModel, symbol: str = "seq") -> set[str]:
    """Buffers (not views) whose size depends on `symbol`."""
    return {b.target for b in compiled.symbolic_bindings if b.kind == "buffer" and symbol in b.expr.symbols}


# ---- differential runs and dimension updates ------------------------------------------------

def test_replays_encode_through_wgpu_natives_own_calls():
    """wgpu-py 0.32 (the pinned range) exposes the compute-pass entry points the replay calls
    without its per-call wrapper (wgpu_backend._RAW); a wgpu-py without them falls back to its
    methods, which the `api` runs below cover."""
    assert wgpu_backend._RAW is not None


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("encoding", ["raw", "api"])
def test_capacity_updates_match_onnxruntime_without_recompiling(runtime, encoder, transport, encoding, monkeypatch):
    model, compiled = encoder
    if encoding == "api":
        monkeypatch.setattr(wgpu_backend, "_RAW", None)
    exe = runtime.load_model(compiled, transport=transport)
    assert exe.transport == transport
    assert_outputs_match(model, exe.run(feeds_for(2, 8)), feeds_for(2, 8))
    for seq in (1, 5, 8):
        exe.update_dimensions({"seq": seq})
        feeds = feeds_for(2, seq, seed=seq)
        assert_outputs_match(model, exe.run(feeds), feeds)
        assert exe.stats.reallocs == 0, f"seq={seq} is within the compiled capacity"
    exe.update_dimensions({"seq": 13})  # beyond the capacity compiled for (8)
    expected = seq_buffers(compiled)
    assert expected, "the model has seq-dependent buffers"
    assert exe.stats.reallocs == len(expected)
    feeds = feeds_for(2, 13, seed=13)
    assert_outputs_match(model, exe.run(feeds), feeds)
    # Batch changes too, and shrinking back never reallocates again.
    exe.update_dimensions({"seq": 3, "batch": 1})
    feeds = feeds_for(1, 3, seed=3)
    assert_outputs_match(model, exe.run(feeds), feeds)
    assert exe.stats.reallocs == len(expected)
    assert exe.stats.recompiles == 0, "dynamic dims never recompile"
    assert exe.stats.dimension_updates == 5


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_zero_length_sequence_runs(runtime, encoder, transport):
    model, compiled = encoder
    exe = runtime.load_model(compiled, transport=transport)
    exe.update_dimensions({"seq": 0})
    out = exe.run(feeds_for(2, 0))
    assert out["y"].shape == (2, 1, 0)
    np.testing.assert_array_equal(out["shp"], [2, 0, 8])
    exe.update_dimensions({"seq": 2})
    assert_outputs_match(model, exe.run(feeds_for(2, 2)), feeds_for(2, 2))


def static_dims_model() -> onnx.ModelProto:
    """Kernels over seq only (Relu of pos), batch only (Neg of w) and both (Add, MatMul)."""
    w = np.random.default_rng(3).standard_normal((8, 5)).astype(np.float32)
    nodes = [h.make_node("Add", ["x", "pos"], ["xp"]), h.make_node("MatMul", ["xp", "W"], ["y"]),
             h.make_node("Relu", ["pos"], ["pr"]), h.make_node("Neg", ["v"], ["vn"])]
    return make_model(nodes, [("x", np.float32, ["batch", "seq", 8]), ("pos", np.float32, ["seq", 8]),
                              ("v", np.float32, ["batch", 4])], ["y", "pr", "vn"], {"W": w})


def static_feeds(batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, seq, 8)).astype(np.float32),
            "pos": rng.standard_normal((seq, 8)).astype(np.float32),
            "v": rng.standard_normal((batch, 4)).astype(np.float32)}


def test_static_dim_change_recompiles_exactly_the_dependent_shaders(runtime):
    model = static_dims_model()
    compiled = compile_model(model, {"batch": 2, "seq": 4}, static=["seq"])
    dependent = {i for i, s in enumerate(compiled.shaders)
                 if any(isinstance(v, SymDim) and "seq" in v.symbols for _, v in (*s.defs, *s.constants))}
    assert dependent, "some shader bakes seq"
    assert len(dependent) < len(compiled.shaders), "some shader does not depend on seq"
    exe = runtime.load_model(compiled)
    assert_outputs_match(model, exe.run(static_feeds(2, 4, 0)), static_feeds(2, 4, 0))
    exe.update_dimensions({"seq": 3})
    assert exe.stats.recompiles == len(dependent)
    assert_outputs_match(model, exe.run(static_feeds(2, 3, 1)), static_feeds(2, 3, 1))
    exe.update_dimensions({"batch": 1})  # a dynamic dim: no recompiles
    assert exe.stats.recompiles == len(dependent)
    assert_outputs_match(model, exe.run(static_feeds(1, 3, 2)), static_feeds(1, 3, 2))
    exe.update_dimensions({"seq": 9})  # static, and past every seq-dependent buffer's capacity
    assert exe.stats.recompiles == 2 * len(dependent)
    assert exe.stats.reallocs == len(seq_buffers(compiled))
    assert_outputs_match(model, exe.run(static_feeds(1, 9, 3)), static_feeds(1, 9, 3))


def test_shader_with_several_static_values_recompiles_once(runtime):
    """A broadcast Add bakes both N = 8 * seq and the dim seq: one shader, one recompile."""
    model = make_model([h.make_node("Add", ["x", "col"], ["y"])],
                       [("x", np.float32, ["seq", 8]), ("col", np.float32, ["seq", 1])], ["y"])
    compiled = compile_model(model, {"seq": 4}, static=["seq"])
    (spec,) = compiled.shaders
    baked = [v for _, v in (*spec.defs, *spec.constants) if isinstance(v, SymDim)]
    assert len(baked) >= 2, "the test needs a shader baking seq in more than one value"
    exe = runtime.load_model(compiled)
    for seq, recompiles in ((3, 1), (6, 2)):
        exe.update_dimensions({"seq": seq})
        assert exe.stats.recompiles == recompiles
        rng = np.random.default_rng(seq)
        feeds = {"x": rng.standard_normal((seq, 8)).astype(np.float32),
                 "col": rng.standard_normal((seq, 1)).astype(np.float32)}
        np.testing.assert_allclose(exe.run(feeds)["y"], run_ort(model, feeds)[0], rtol=RTOL, atol=ATOL)


def test_loaded_plan_runs_identically(runtime, encoder, tmp_path):
    model, compiled = encoder
    path = tmp_path / "encoder.onyxia"
    compiled.save(path)
    loaded = CompiledModel.load(path)
    feeds = feeds_for(2, 8, seed=7)
    direct = runtime.load_model(compiled).run(feeds)
    replayed_exe = runtime.load_model(loaded)
    replayed = replayed_exe.run(feeds)
    for name in direct:
        np.testing.assert_array_equal(replayed[name], direct[name], err_msg=name)
    assert_outputs_match(model, replayed, feeds)
    replayed_exe.update_dimensions({"seq": 11})
    feeds = feeds_for(2, 11, seed=8)
    assert_outputs_match(model, replayed_exe.run(feeds), feeds)


def test_custom_operator_with_inline_wgsl_runs(runtime):
    model = scaled_square_model(alpha=0.75)
    compiled = CompilerPipeline(custom_registry()).compile(onyxia.load_model(model), {"batch": 3})
    oracle = scaled_square_model(alpha=0.75, custom=False)
    exe = runtime.load_model(compiled)
    for batch in (3, 7):
        exe.update_dimensions({"batch": batch})
        x = np.random.default_rng(batch).standard_normal((batch, 5)).astype(np.float32)
        np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(oracle, {"x": x})[0], rtol=RTOL, atol=ATOL)


# ---- device tensors -------------------------------------------------------------------------

def recurrent_model() -> onnx.ModelProto:
    """new_state = Relu(state * 0.5 + x @ W): state feeds back between runs."""
    w = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    nodes = [h.make_node("MatMul", ["x", "W"], ["xw"]), h.make_node("Mul", ["state", "half"], ["s2"]),
             h.make_node("Add", ["s2", "xw"], ["pre"]), h.make_node("Relu", ["pre"], ["new_state"])]
    return make_model(nodes, [("x", np.float32, ["batch", 3]), ("state", np.float32, ["batch", 4])],
                      ["new_state"], {"W": w, "half": np.float32(0.5)})


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_device_outputs_feed_back_as_inputs(runtime, transport):
    model = recurrent_model()
    exe = runtime.load_model(compile_model(model, {"batch": 2}), transport=transport)
    rng = np.random.default_rng(2)
    state = rng.standard_normal((2, 4)).astype(np.float32)
    ref_state = state
    current: np.ndarray | DeviceTensor = state
    for step in range(3):
        x = rng.standard_normal((2, 3)).astype(np.float32)
        out = exe.run({"x": x, "state": current}, outputs=[], device_outputs=["new_state"])
        current = out["new_state"]
        assert isinstance(current, DeviceTensor), step
        assert current.shape == (2, 4) and current.dtype == "float32"
        ref_state = run_ort(model, {"x": x, "state": ref_state})[0]
        np.testing.assert_allclose(exe.read_tensor(current), ref_state, rtol=RTOL, atol=ATOL)
    assert exe.stats.readback_bytes == 0
    # A device tensor from one executor feeds another executor as well.
    other = runtime.load_model(compile_model(model, {"batch": 2}), transport=transport)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(other.run({"x": x, "state": current})["new_state"],
                               run_ort(model, {"x": x, "state": ref_state})[0], rtol=RTOL, atol=ATOL)


def test_device_tensor_of_the_wrong_shape_is_refused(runtime):
    model = recurrent_model()
    exe = runtime.load_model(compile_model(model, {"batch": 2}))
    x = np.ones((2, 3), np.float32)
    dev = exe.run({"x": x, "state": np.ones((2, 4), np.float32)}, device_outputs=["new_state"])["new_state"]
    exe.update_dimensions({"batch": 3})
    with pytest.raises(InputError, match="'state'"):
        exe.run({"x": np.ones((3, 3), np.float32), "state": dev})
    state = np.zeros((3, 4), np.float32)
    x = np.ones((3, 3), np.float32)
    np.testing.assert_allclose(exe.run({"x": x, "state": state})["new_state"],
                               run_ort(model, {"x": x, "state": state})[0], rtol=RTOL, atol=ATOL)


# ---- bad input --------------------------------------------------------------------------

def _bad_feeds(case: str) -> tuple[dict, str]:
    good = feeds_for(2, 8)
    if case == "unknown_name":
        return {**good, "bogus": np.ones(1, np.float32)}, "bogus"
    if case == "missing_name":
        return {"x": good["x"]}, "ids"
    if case == "wrong_rank":
        return {**good, "x": good["x"].reshape(2, 64)}, "'x'"
    if case == "wrong_shape":
        return {**good, "x": np.ones((2, 7, 8), np.float32)}, "'x'"
    if case == "wrong_static_dim":
        return {**good, "x": np.ones((2, 8, 9), np.float32)}, "'x'"
    if case == "wrong_dtype":
        return {**good, "ids": good["ids"].astype(np.float32)}, "'ids'"
    if case == "int64_out_of_range":
        ids = good["ids"].copy()
        ids[0, 0] = 2**40
        return {**good, "ids": ids}, "'ids'"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["unknown_name", "missing_name", "wrong_rank", "wrong_shape", "wrong_static_dim",
                                  "wrong_dtype", "int64_out_of_range"])
def test_bad_feeds_raise_named_errors_and_leave_the_executor_usable(runtime, encoder, case):
    model, compiled = encoder
    exe = runtime.load_model(compiled)
    feeds, fragment = _bad_feeds(case)
    with pytest.raises(OnyxiaError) as info:
        exe.run(feeds)
    assert isinstance(info.value, InputError)
    assert fragment in str(info.value)
    good = feeds_for(2, 8, seed=1)
    assert_outputs_match(model, exe.run(good), good)


@pytest.mark.parametrize("dims, fragment", [
    ({"sequence": 3}, "'sequence'"),
    ({"seq": -1}, "'seq'"),
    ({"seq": 2.5}, "'seq'"),
    ({"seq": 4, "nope": 1}, "'nope'"),
])
def test_bad_dimension_updates_raise_and_leave_the_executor_usable(runtime, encoder, dims, fragment):
    model, compiled = encoder
    exe = runtime.load_model(compiled)
    with pytest.raises(DimensionError) as info:
        exe.update_dimensions(dims)
    assert fragment in str(info.value)
    assert exe.dims == {"batch": 2, "seq": 8}, "a failed update changes nothing"
    good = feeds_for(2, 8, seed=2)
    assert_outputs_match(model, exe.run(good), good)
    exe.update_dimensions({"seq": 4})
    good = feeds_for(2, 4, seed=3)
    assert_outputs_match(model, exe.run(good), good)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_dimension_beyond_the_device_limit_is_refused_cleanly(runtime, encoder, transport):
    model, compiled = encoder
    exe = runtime.load_model(compiled, transport=transport)
    with pytest.raises(OnyxiaError, match="'seq'|seq"):
        exe.update_dimensions({"seq": 2**28})
    assert exe.dims == {"batch": 2, "seq": 8}
    assert exe.stats.reallocs == 0
    good = feeds_for(2, 8, seed=9)
    assert_outputs_match(model, exe.run(good), good)
    exe.update_dimensions({"seq": 5})
    good = feeds_for(2, 5, seed=10)
    assert_outputs_match(model, exe.run(good), good)


def test_unknown_output_name_is_an_input_error(runtime, encoder):
    model, compiled = encoder
    exe = runtime.load_model(compiled)
    with pytest.raises(InputError, match="'nothing'"):
        exe.run(feeds_for(2, 8), outputs=["nothing"])
    out = exe.run(feeds_for(2, 8), outputs=["shp"])
    assert list(out) == ["shp"]
    np.testing.assert_array_equal(out["shp"], [2, 8, 8])


def test_absent_optional_outputs_match_onnxruntime(runtime):
    scale = np.linspace(0.5, 1.5, 6).astype(np.float32)
    nodes = [h.make_node("LayerNormalization", ["x", "s"], ["y1", "", "inv1"], axis=-1, name="ln1"),
             h.make_node("LayerNormalization", ["y1", "s"], ["y2", "", "inv2"], axis=-1, name="ln2")]
    model = make_model(nodes, [("x", np.float32, ["n", 6])], ["y2", "inv1", "inv2"], {"s": scale})
    exe = runtime.load_model(compile_model(model, {"n": 3}))
    for n in (3, 5):
        exe.update_dimensions({"n": n})
        feeds = {"x": np.random.default_rng(n).standard_normal((n, 6)).astype(np.float32)}
        assert_outputs_match(model, exe.run(feeds), feeds)
