"""Elementwise families on the GPU against onnxruntime (onnx.reference where onnxruntime has no
kernel for a dtype), the folded result against the GPU result, and hypothesis property tests
over random broadcastable shapes and dtypes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.operators import core_operator_registry
from onyxia.operators.elementwise.elementwise import (
    BINARY_OPS,
    COMPARISON_OPS,
    UNARY_OPS,
    BinaryElementwise,
    Row,
    numeric,
)
from tests.helpers import compile_model, make_model, run_onyxia

F32, F16, I64, I32, I16, I8 = np.float32, np.float16, np.int64, np.int32, np.int16, np.int8
U32, U16, U8, BOOL = np.uint32, np.uint16, np.uint8, np.bool_
KIND_DTYPES = {"float": (F32, F16), "int": (I32, I64, I16, I8), "uint": (U8, U16, U32), "bool": (BOOL,)}
PROPERTY = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- oracle and comparison ------------------------------------------------------------------

def reference(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """onnxruntime, or onnx.reference where onnxruntime cannot load the model: no kernel for the
    dtype (int16 Max, uint8 Relu, ...) or an opset newer than it knows (Mod/BitShift 28)."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    try:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - onnxruntime's load errors have no common public type
        with np.errstate(all="ignore"):
            return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, feeds)]
    return session.run(None, feeds)


def tolerance(dtype) -> dict:
    if np.dtype(dtype) == F16:  # onnxruntime may round intermediates to float16 (ulp 1/64 at 20)
        return {"rtol": 4e-3, "atol": 2e-2}
    return {"rtol": 1e-5, "atol": 1e-6}


def assert_close(ours: np.ndarray, ref: np.ndarray, dtype, what: str = "") -> None:
    assert ours.dtype == ref.dtype, f"{what}: dtype {ours.dtype} vs {ref.dtype}"
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} vs {ref.shape}"
    if ref.dtype.kind in "f":
        np.testing.assert_allclose(ours, ref, equal_nan=True, err_msg=what, **tolerance(dtype))
    else:
        np.testing.assert_array_equal(ours, ref, err_msg=what)


def check(runtime, op: str, arrays: list[np.ndarray], *, shapes=None, dims=None, opset=18, fold=True,
          **attrs) -> np.ndarray:
    """GPU vs the oracle (inputs as graph inputs, `shapes` may hold symbols); then, with every
    input a constant, the compile folds to zero dispatches and agrees with the GPU."""
    names = [f"x{i}" if a is not None else "" for i, a in enumerate(arrays)]
    node = h.make_node(op, names, ["y"], **attrs)
    present = [(n, a) for n, a in zip(names, arrays) if a is not None]
    shapes = shapes or [a.shape for _, a in present]
    model = make_model([node], [(n, a.dtype, s) for (n, a), s in zip(present, shapes)], ["y"], opset=opset)
    feeds = dict(present)
    ours = run_onyxia(runtime, model, feeds, dims)[0]
    dtype = present[0][1].dtype
    assert_close(ours, reference(model, feeds)[0], dtype, f"{op} {attrs} {dtype}")
    if fold:
        folded_model = make_model([node], [], ["y"], feeds, opset=opset)
        compiled = compile_model(folded_model)
        assert compiled.num_dispatches == 0, f"{op} did not fold"
        folded = runtime.load_model(compiled).run({})["y"]
        assert_close(folded, ours, dtype, f"{op} folded vs GPU")
    return ours


# ---- inputs ---------------------------------------------------------------------------------

def values(rng: np.random.Generator, dtype, shape, low: float = -20, high: float = 20) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind == "f":
        return np.asarray(rng.uniform(low, high, shape), dtype)
    info = np.iinfo(dtype)
    return np.asarray(rng.integers(max(low, info.min), min(high, info.max), shape, endpoint=True), dtype)


def binary_inputs(rng, op: str, dtype, shapes, b_dtype=None) -> list[np.ndarray]:
    b_dtype = b_dtype or dtype
    a, b = values(rng, dtype, shapes[0]), values(rng, b_dtype, shapes[1])
    if op in COMPARISON_OPS:  # few distinct values, so that equality happens
        a, b = values(rng, dtype, shapes[0], 0, 3), values(rng, b_dtype, shapes[1], 0, 3)
    elif op in ("Div", "Mod"):
        b = np.where(b == 0, np.ones_like(b), b)
    elif op == "Pow":
        a = values(rng, dtype, shapes[0], -4, 4)
        b = (values(rng, b_dtype, shapes[1], 0, 4) if np.dtype(dtype).kind == "i"
             else np.asarray(rng.integers(-6, 7, shapes[1]) / 2, b_dtype))  # halves: NaN for negative bases
    elif op == "BitShift":
        # int64 is computed in 32 bits on the device (README: Device representation), so its
        # shifts stay within results that fit; other dtypes use their full width.
        bits = 16 if np.dtype(dtype) == np.int64 else np.dtype(dtype).itemsize * 8 - 1
        b = values(rng, dtype, shapes[1], 0, bits)
    return [a, b]


UNARY_DOMAIN = {"Sqrt": (0.01, 9), "Log": (0.01, 9), "Acosh": (1, 9), "Asin": (-0.99, 0.99), "Acos": (-0.99, 0.99),
                "Atanh": (-0.99, 0.99), "Exp": (-9, 9), "Sinh": (-9, 9), "Cosh": (-9, 9), "Tan": (-1.5, 1.5)}


def unary_input(rng, op: str, dtype, shape) -> np.ndarray:
    low, high = UNARY_DOMAIN.get(op, (-6, 6))
    x = values(rng, dtype, shape, low, high)
    if op == "Round" and np.dtype(dtype).kind == "f":
        x = np.asarray(np.round(x * 2) / 2, dtype)  # halves: round half to even
    return x


def row_dtypes(row: Row, **attrs) -> list:
    wgsl = row.wgsl(**{**row.attrs, **attrs}) if callable(row.wgsl) else row.wgsl
    return [t for kind in wgsl for t in KIND_DTYPES[kind]]


def opset_of(op: str) -> int:
    """The opset a case runs at: opset 28's Mod (float fmod=0) and BitShift (signed types), which
    only onnx.reference knows; otherwise 20 (IsNaN/IsInf on float16) or the op's first."""
    if op in ("Mod", "BitShift"):
        return 28
    row = {**BINARY_OPS, **COMPARISON_OPS, **UNARY_OPS}.get(op)
    return max(20, row.since if row else 1)


# ---- binary and comparison ------------------------------------------------------------------

BINARY_CASES = [(op, {}) for op in BINARY_OPS if op not in ("Mod", "BitShift")] + [
    ("Mod", {"fmod": 0}), ("Mod", {"fmod": 1}), ("BitShift", {"direction": "LEFT"}),
    ("BitShift", {"direction": "RIGHT"})] + [(op, {}) for op in COMPARISON_OPS]


@pytest.mark.parametrize("op,attrs,dtype", [
    (op, attrs, t) for op, attrs in BINARY_CASES
    for t in row_dtypes({**BINARY_OPS, **COMPARISON_OPS}[op], **attrs) if t in (F32, I32, U8, BOOL)])
def test_binary_matches_onnxruntime(runtime, op, attrs, dtype):
    rng = np.random.default_rng(0)
    arrays = binary_inputs(rng, op, dtype, [(2, 1, 4), (3, 1)])
    check(runtime, op, arrays, shapes=[["n", 1, 4], [3, 1]], dims={"n": 2}, opset=opset_of(op), **attrs)


@pytest.mark.parametrize("op,attrs,dtype", [("Mod", {"fmod": 0}, I32), ("Mod", {"fmod": 1}, F32),
                                            ("BitShift", {"direction": "LEFT"}, U8),
                                            ("BitShift", {"direction": "RIGHT"}, U32)])
def test_mod_and_bitshift_at_opset_18(runtime, op, attrs, dtype):
    # the cases onnxruntime itself runs (the parametrized test above checks opset 28's semantics)
    check(runtime, op, binary_inputs(np.random.default_rng(8), op, dtype, [(3, 4), (4,)]), opset=18, **attrs)


def test_opset28_signed_shifts_and_float_mod_edge_cases(runtime):
    x = np.array([-128, -5, 5, -1, 100, 7, -7, 1], I8)
    counts = np.array([1, 9, -1, 3, 2, 8, 40, 7], I8)
    for direction in ("LEFT", "RIGHT"):
        check(runtime, "BitShift", [x, counts], opset=28, direction=direction)
        check(runtime, "BitShift", [x.astype(I32), counts.astype(I32) * 4], opset=28, direction=direction)
    special = np.array([5.0, -5.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 3.5, -1e-3], F32)
    a, b = np.repeat(special, special.size), np.tile(special, special.size)
    for fmod in (0, 1):
        check(runtime, "Mod", [a, b], opset=28, fmod=fmod)


@pytest.mark.parametrize("a_dtype,b_dtype", [(F32, I32), (I32, F32), (I64, I64), (F16, F32)])
def test_pow_mixed_dtypes(runtime, a_dtype, b_dtype):
    rng = np.random.default_rng(1)
    check(runtime, "Pow", binary_inputs(rng, "Pow", a_dtype, [(3, 4), (4,)], b_dtype))


def test_integer_pow_negative_exponents_truncate(runtime):
    # onnxruntime computes (int)pow(double, double): 2^-1 = 0, (-1)^-3 = -1, 1^-5 = 1
    check(runtime, "Pow", [np.array([2, -2, 3, 1, -1, -1], I32), np.array([-1, -1, -2, -5, -3, -2], I32)])


def test_binary_special_values(runtime):
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5, -3.0], np.float32)
    a, b = np.repeat(special, special.size), np.tile(special, special.size)
    for op in ("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "GreaterOrEqual"):
        check(runtime, op, [a, b])
    check(runtime, "Mod", [a, b], fmod=1)
    for op in ("Max", "Min"):  # NaN propagates like numpy.maximum
        check(runtime, op, [a, b])


def test_narrow_integers_wrap_like_numpy(runtime):
    ours = check(runtime, "Mul", [np.array([100, -100, 127, -128], I8), np.array([3, 3, 2, 2], I8)])
    np.testing.assert_array_equal(ours, [44, -44, -2, 0])
    check(runtime, "Add", [np.array([200, 255], U8), np.array([100, 1], U8)])
    check(runtime, "BitShift", [np.array([255, 1, 7], U8), np.array([1, 8, 5], U8)], opset=18, direction="LEFT")


def test_legacy_broadcast_attribute(runtime):
    # opset 6 Add(broadcast=1, axis=1): onnxruntime dropped it, numpy states the spec
    a, b = np.arange(24, dtype=F32).reshape(2, 3, 4), np.arange(3, dtype=F32)
    model = make_model([h.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=1)],
                       [("a", F32, ["n", 3, 4]), ("b", F32, [3])], ["y"], opset=6)
    np.testing.assert_array_equal(run_onyxia(runtime, model, {"a": a, "b": b}, {"n": 2})[0], a + b[:, None])


# ---- unary ----------------------------------------------------------------------------------

UNARY_ATTRS = {"LeakyRelu": [{}, {"alpha": 0.3}], "Elu": [{}, {"alpha": 0.5}], "Celu": [{}, {"alpha": 2.0}],
               "Selu": [{}, {"alpha": 2.0, "gamma": 0.5}], "HardSigmoid": [{}, {"alpha": 0.3, "beta": 0.4}],
               "IsInf": [{}, {"detect_positive": 0}, {"detect_negative": 0}], "Gelu": [{}, {"approximate": "tanh"}],
               "ThresholdedRelu": [{}, {"alpha": 0.5}], "Shrink": [{}, {"bias": 1.5, "lambd": 1.0}]}


@pytest.mark.parametrize("op,attrs,dtype", [
    (op, attrs, t) for op, row in UNARY_OPS.items() for attrs in UNARY_ATTRS.get(op, [{}])
    for t in row_dtypes(row, **attrs) if t in (F32, I32, I8, U8, BOOL)])
def test_unary_matches_onnxruntime(runtime, op, attrs, dtype):
    x = unary_input(np.random.default_rng(2), op, dtype, (3, 4))
    check(runtime, op, [x], shapes=[["n", 4]], dims={"n": 3}, opset=opset_of(op), **attrs)


def test_unary_special_values(runtime):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 1e-7, -1e-7, 30.0, -30.0, 100.0, -100.0], F32)
    skip = {"Tan", "Sin", "Cos"}  # at +-inf both give NaN, but onnxruntime's own tails differ
    for op, row in UNARY_OPS.items():
        if op not in skip and F32 in row_dtypes(row):
            check(runtime, op, [x], opset=opset_of(op))


def test_float16_unary_and_binary(runtime):
    rng = np.random.default_rng(3)
    for op in ("Sigmoid", "Gelu", "Erf", "Tanh", "Relu"):
        check(runtime, op, [unary_input(rng, op, F16, (4, 5))], opset=20)
    for op in ("Add", "Div", "Less"):
        check(runtime, op, binary_inputs(rng, op, F16, [(4, 5), (5,)]))


# ---- variadic, Where, Clip ------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("count", [1, 2, 3, 9])
def test_variadic_matches_onnxruntime(runtime, op, count):
    rng = np.random.default_rng(count)
    shapes = [["n", 1, 4], [3, 1], [4], [], ["n", 3, 4]] * 2
    static = [[2 if d == "n" else d for d in s] for s in shapes]
    arrays = [values(rng, F32, static[i]) for i in range(count)]
    check(runtime, op, arrays, shapes=shapes[:count], dims={"n": 2})


@pytest.mark.parametrize("dtype", [I32, I16, U8, I64])
def test_variadic_integer_max_min(runtime, dtype):
    rng = np.random.default_rng(4)
    for op in ("Max", "Min"):
        check(runtime, op, [values(rng, dtype, (3, 4)), values(rng, dtype, (4,)), values(rng, dtype, (3, 1))])


@pytest.mark.parametrize("dtype", [F32, I64, BOOL, U8])
def test_where_matches_onnxruntime(runtime, dtype):
    rng = np.random.default_rng(5)
    arrays = [values(rng, BOOL, (2, 1, 4)), values(rng, dtype, (3, 1)), values(rng, dtype, (4,))]
    check(runtime, "Where", arrays, shapes=[["n", 1, 4], [3, 1], [4]], dims={"n": 2})


@pytest.mark.parametrize("dtype,lo,hi", [
    (F32, -1.5, 2.0), (F32, None, 0.5), (F32, -0.5, None), (F32, None, None), (F32, 2.0, -1.0),
    (I32, -3, 4), (I64, -(2**40), 7), (U8, 3, 200)])
def test_clip_constant_bounds(runtime, dtype, lo, hi):
    x = values(np.random.default_rng(6), dtype, (3, 5), -20, 250)
    x.flat[0] = np.nan if np.dtype(dtype).kind == "f" else x.flat[0]
    bounds = [None if v is None else np.array(v, dtype) for v in (lo, hi)]
    while bounds and bounds[-1] is None:
        bounds.pop()
    arrays = [x, *bounds]
    names = [f"x{i}" if a is not None else "" for i, a in enumerate(arrays)]
    node = h.make_node("Clip", names, ["y"])
    inits = {n: a for n, a in zip(names[1:], arrays[1:]) if a is not None}
    model = make_model([node], [("x0", dtype, ["n", 5])], ["y"], inits)
    assert_close(run_onyxia(runtime, model, {"x0": x}, {"n": 3})[0], reference(model, {"x0": x})[0], dtype, "Clip")


def test_clip_tensor_bounds_and_opset6_attributes(runtime):
    rng = np.random.default_rng(7)
    x = values(rng, F32, (3, 4))
    check(runtime, "Clip", [x, np.array(-2.0, F32), np.array(3.0, F32)], shapes=[["n", 4], [], []], dims={"n": 3})
    check(runtime, "Clip", [x, None, np.array(3.0, F32)])
    model = make_model([h.make_node("Clip", ["x"], ["y"], min=-1.0, max=2.0)], [("x", F32, [3, 4])], ["y"], opset=6)
    np.testing.assert_array_equal(run_onyxia(runtime, model, {"x": x})[0], np.clip(x, -1.0, 2.0))


def test_dynamic_dims_patch_broadcast_strides_without_recompiling(runtime):
    nodes = [h.make_node("Add", ["a", "b"], ["s"]), h.make_node("Where", ["c", "s", "a"], ["y"])]
    model = make_model(nodes, [("a", F32, ["n", 1, 4]), ("b", F32, [3, 1]), ("c", BOOL, ["n", 3, 1])], ["y"])
    exe = runtime.load_model(compile_model(model, {"n": 2}))
    rng = np.random.default_rng(9)
    for n in (2, 5, 1):
        exe.update_dimensions({"n": n})
        feeds = {"a": values(rng, F32, (n, 1, 4)), "b": values(rng, F32, (3, 1)), "c": values(rng, BOOL, (n, 3, 1))}
        assert_close(exe.run(feeds)["y"], reference(model, feeds)[0], F32, f"n={n}")
    assert exe.stats.recompiles == 0


# ---- extension: one row ---------------------------------------------------------------------

def test_a_new_binary_row_runs_on_the_gpu(runtime):
    row = Row(numeric("abs(x0 - x1)"), lambda a, b: np.abs(a - b))
    registry = core_operator_registry().register(BinaryElementwise("AbsDiff", row), 1, domain="com.example")
    model = make_model([h.make_node("AbsDiff", ["a", "b"], ["y"], domain="com.example")],
                       [("a", I32, ["n", 3]), ("b", I32, [3])], ["y"], extra_opsets={"com.example": 1})
    exe = runtime.load_model(CompilerPipeline(registry).compile(onyxia.load_model(model), {"n": 2}))
    a, b = np.array([[1, -5, 3], [0, 0, 7]], I32), np.array([4, 4, -4], I32)
    np.testing.assert_array_equal(exe.run({"a": a, "b": b})["y"], np.abs(a - b))


# ---- properties: random broadcastable shapes and dtypes -------------------------------------

def shapes_strategy(count: int):
    return mutually_broadcastable_shapes(num_shapes=count, min_dims=0, max_dims=4, max_side=3).map(
        lambda s: s.input_shapes)


def test_binary_property(runtime):
    @PROPERTY
    @given(st.sampled_from([*BINARY_OPS, *COMPARISON_OPS]), shapes_strategy(2), st.data())
    def prop(op, shapes, data):
        row = {**BINARY_OPS, **COMPARISON_OPS}[op]
        attrs = {"fmod": data.draw(st.sampled_from([0, 1]))} if op == "Mod" else \
            {"direction": data.draw(st.sampled_from(["LEFT", "RIGHT"]))} if op == "BitShift" else {}
        dtype = data.draw(st.sampled_from(row_dtypes(row, **attrs)))
        if op == "Pow" and dtype in (I8, I16):  # ONNX types Pow's base as int32/int64/float only
            dtype = I32
        rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
        check(runtime, op, binary_inputs(rng, op, dtype, shapes), opset=opset_of(op), **attrs)
    prop()


def test_unary_property(runtime):
    ops = [op for op, row in UNARY_OPS.items() if not callable(row.wgsl)]

    @PROPERTY
    @given(st.sampled_from(ops), shapes_strategy(1), st.data())
    def prop(op, shapes, data):
        opset = opset_of(op)
        dtype = data.draw(st.sampled_from(row_dtypes(UNARY_OPS[op])))
        rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
        check(runtime, op, [unary_input(rng, op, dtype, shapes[0])], opset=opset)
    prop()


def test_variadic_and_where_property(runtime):
    @PROPERTY
    @given(st.sampled_from(["Max", "Min", "Sum", "Mean", "Where"]), st.integers(1, 4), st.data())
    def prop(op, count, data):
        count = 3 if op == "Where" else count
        shapes = data.draw(shapes_strategy(count))
        kinds = [F32, F16] + ([I32, I64, I8, U8, U32] if op in ("Max", "Min") else []) + \
            ([BOOL, I64] if op == "Where" else [])
        dtype = data.draw(st.sampled_from(kinds))
        rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
        arrays = [values(rng, dtype, s) for s in shapes]
        if op == "Where":
            arrays[0] = values(rng, BOOL, shapes[0])
        check(runtime, op, arrays)
    prop()


# ---- four outputs a thread (map4.wgsl) --------------------------------------------------------

def _templates_run(exe) -> list[str]:
    return [exe.model.templates[exe.model.shaders[d.shader].template] for d in exe.dispatch_commands()
            if all(d.workgroups)]


def test_four_outputs_a_thread_where_the_inner_axis_allows_and_one_elsewhere(runtime):
    """A squeeze-excite scale (softmax(x)[n, c, h, w] * s[n, c, 1, 1]) + a residual,
    then a float16 operand cast up, fused into one map over symbolic h, w: h * w a multiple of 4
    takes map4.wgsl (x and the residual as vec4s, the scale a scalar, the float16 operand four
    loads), another size the one-output kernel, one plan for both, each against onnxruntime (after
    a last softmax); the map writes in place of the first softmax's output (it dies there)."""
    nodes = [h.make_node("Softmax", ["x"], ["sm"], axis=1),
             h.make_node("Mul", ["sm", "s"], ["t"]),
             h.make_node("Add", ["t", "r"], ["u"]), h.make_node("Cast", ["q"], ["qf"], to=onnx.TensorProto.FLOAT),
             h.make_node("Relu", ["u"], ["v"]), h.make_node("Sub", ["v", "qf"], ["z"]),
             h.make_node("Softmax", ["z"], ["y"], axis=1)]
    spatial = ["n", 24, "h", "w"]
    model = make_model(nodes, [("x", F32, spatial), ("s", F32, ["n", 24, 1, 1]), ("r", F32, spatial),
                               ("q", F16, spatial)], ["y"])
    compiled = compile_model(model, {"n": 2, "h": 6, "w": 10})
    exe = runtime.load_model(compiled)
    rng = np.random.default_rng(0)
    for hw, quad in (((6, 10), True), ((5, 7), False), ((4, 4), True)):
        shape = (2, 24, *hw)
        feeds = {"x": values(rng, F32, shape), "s": values(rng, F32, (2, 24, 1, 1), -4, 4),
                 "r": values(rng, F32, shape), "q": values(rng, F16, shape)}
        exe.update_dimensions({"n": 2, "h": hw[0], "w": hw[1]})
        [y] = exe.run(feeds).values()
        assert_close(y, reference(model, feeds)[0], F32, f"{hw}")
        templates = _templates_run(exe)
        assert any("y_store4(u, out)" in t for t in templates) == quad, hw
    assert exe.stats.recompiles == 0
    assert compiled.metadata["memory"]["in_place"] >= 1
