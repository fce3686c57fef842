"""Elementwise families without a GPU: tables, inference, folding (also over symbolic dims), errors.

GPU results against onnxruntime are in tests/gpu/test_elementwise.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.compiler.pipeline import Stage
from onyxia.errors import OnyxiaError, UnsupportedDtypeError
from onyxia.ir.shapes import SymDim
from onyxia.operators import core_operator_registry
from onyxia.operators.elementwise import elementwise as ew
from onyxia.operators.elementwise.elementwise import (
    BINARY_OPS,
    COMPARISON_OPS,
    NUMERIC,
    UNARY_OPS,
    VARIADIC_OPS,
    BinaryElementwise,
    Row,
    numeric,
)
from tests.helpers import compile_model, live_dispatches, make_model

S = SymDim.symbol("s")
B = SymDim.symbol("b")
KINDS = {*NUMERIC, "bool"}


def folded_graph(model, dims=None):
    """The IR after inference and folding (values of folded tensors filled in)."""
    pipeline = CompilerPipeline(core_operator_registry())
    return pipeline.run_passes(onyxia.load_model(model), dims or {}, until=Stage.FOLDING)


# ---- tables ---------------------------------------------------------------------------------

def test_every_row_is_registered_with_its_opset():
    registry = core_operator_registry()
    for name, row in {**BINARY_OPS, **COMPARISON_OPS, **UNARY_OPS}.items():
        assert registry.get(name, "", row.since) is not None, name
        if row.since > 1:
            assert registry.get(name, "", row.since - 1) is None, f"{name} exists before opset {row.since}"
        wgsl = row.wgsl if isinstance(row.wgsl, dict) else None
        if wgsl is not None:
            assert set(wgsl) <= KINDS and wgsl, name
    for name in [*VARIADIC_OPS, "Where", "Clip"]:
        assert registry.get(name, "", 18) is not None


def test_row_callables_validate_attributes():
    assert set(BINARY_OPS["Mod"].wgsl(fmod=0)) == {"float", "int", "uint"}  # type: ignore[operator]
    assert set(BINARY_OPS["BitShift"].wgsl(direction="RIGHT")) == {"int", "uint"}  # type: ignore[operator]
    with pytest.raises(KeyError):
        BINARY_OPS["BitShift"].wgsl(direction="UP")  # type: ignore[operator]


# ---- inference ------------------------------------------------------------------------------

@pytest.mark.parametrize("op,a,b,out", [
    ("Add", ["s", 1, 4], [3, 1], ("s", 3, 4)),
    ("Mul", [], [2, 3], (2, 3)),
    ("Greater", ["s", 4], [4], ("s", 4)),
])
def test_binary_inference_broadcasts(op, a, b, out):
    model = make_model([h.make_node(op, ["a", "b"], ["y"])], [("a", np.float32, a), ("b", np.float32, b)], ["y"])
    y = folded_graph(model, {"s": 2} if "s" in a else {}).tensor("y")
    assert y.shape == tuple(S if d == "s" else d for d in out)
    assert y.dtype.name == ("bool" if op == "Greater" else "float32")


def test_pow_exponent_may_have_its_own_dtype():
    model = make_model([h.make_node("Pow", ["a", "b"], ["y"])], [("a", np.int32, [3]), ("b", np.float32, [3])], ["y"])
    assert folded_graph(model).tensor("y").dtype.name == "int32"


def test_legacy_broadcast_aligns_at_axis():
    # opset < 7: broadcast=1, axis=1 matches B's dims with A's starting at axis 1
    a, b = np.arange(24, dtype=np.float32).reshape(2, 3, 4), np.arange(3, dtype=np.float32)
    model = make_model([h.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=1)], [], ["y"], {"a": a, "b": b},
                       opset=6)
    np.testing.assert_array_equal(folded_graph(model).tensor("y").value, a + b[:, None])


def test_variadic_and_where_broadcast_all_inputs():
    model = make_model([h.make_node("Max", ["a", "b", "c"], ["m"]), h.make_node("Where", ["k", "m", "a"], ["y"])],
                       [("a", np.float32, ["s", 1, 1]), ("b", np.float32, [3, 1]), ("c", np.float32, [4]),
                        ("k", np.bool_, [1, 4])], ["y"])
    graph = folded_graph(model, {"s": 2})
    assert graph.tensor("m").shape == (S, 3, 4) and graph.tensor("y").shape == (S, 3, 4)


# ---- folding --------------------------------------------------------------------------------

def fold_single(op, arrays, opset=18, **attrs):
    names = [f"x{i}" for i in range(len(arrays))]
    model = make_model([h.make_node(op, names, ["y"], **attrs)], [], ["y"], dict(zip(names, arrays)), opset=opset)
    compiled = compile_model(model)
    assert compiled.num_dispatches == 0, f"{op} did not fold"
    return compiled.tensors["y"].data


@pytest.mark.parametrize("op,arrays,attrs,expected", [
    ("Div", [np.array([7, -7, 7, -7], np.int64), np.array([2, 2, -2, -2], np.int64)], {}, [3, -3, -3, 3]),
    ("Mod", [np.array([7, -7, 7, -7], np.int32), np.array([3, 3, -3, -3], np.int32)], {}, [1, 2, -2, -1]),
    ("Mod", [np.array([7, -7, 7, -7], np.int32), np.array([3, 3, -3, -3], np.int32)], {"fmod": 1}, [1, -1, 1, -1]),
    ("Pow", [np.array([2, -2, 3, 1], np.int32), np.array([-1, 3, 2, -5], np.int32)], {}, [0, -8, 9, 1]),
    ("Pow", [np.array([-8.0, 2.0], np.float32), np.array([1 / 3, 0.5], np.float32)], {}, [np.nan, math.sqrt(2)]),
    ("BitShift", [np.array([255, 1], np.uint8), np.array([1, 3], np.uint8)], {"direction": "LEFT"}, [254, 8]),
    ("BitShift", [np.array([-128, -5, 5], np.int8), np.array([1, 9, -1], np.int8)], {"direction": "RIGHT"},
     [-64, -1, 0]),
    ("Mod", [np.array([5.0, -5.0, -0.0], np.float32), np.array([-3.0, np.inf, 2.0], np.float32)], {},
     [-1.0, np.inf, 0.0]),
    ("Max", [np.array([1.0, np.nan], np.float32), np.array([2.0, 0.0], np.float32)], {}, [2.0, np.nan]),
    ("Mean", [np.array([1.0, 2.0], np.float32), np.array(4.0, np.float32)], {}, [2.5, 3.0]),
    ("Round", [np.array([0.5, 1.5, 2.5, -0.5], np.float32)], {}, [0, 2, 2, -0.0]),
    ("Erf", [np.array([0.5], np.float32)], {}, [math.erf(0.5)]),
    ("IsInf", [np.array([np.inf, -np.inf, 1.0], np.float32)], {"detect_positive": 0}, [False, True, False]),
    ("Where", [np.array([True, False]), np.array([1, 2], np.int64), np.array([3, 4], np.int64)], {}, [1, 4]),
    ("Clip", [np.array([-2.0, 0.5, 3.0], np.float32), np.array(0.0, np.float32), np.array(1.0, np.float32)], {},
     [0.0, 0.5, 1.0]),
    ("Clip", [np.array([-2.0, 0.5, 3.0], np.float32), np.array(2.0, np.float32), np.array(1.0, np.float32)], {},
     [1.0, 1.0, 1.0]),
    ("Add", [np.array([100], np.int8), np.array([100], np.int8)], {}, [-56]),
])
def test_constant_inputs_fold(op, arrays, attrs, expected):
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(fold_single(op, arrays, **attrs), np.asarray(expected, dtype=np.float64),
                                   rtol=1e-6)


def test_clip_opset6_attributes_fold():
    out = fold_single("Clip", [np.array([-2.0, 0.5, 3.0], np.float32)], opset=6, min=-1.0, max=1.0)
    np.testing.assert_array_equal(out, [-1.0, 0.5, 1.0])


def test_every_unary_row_folds():
    for name, row in UNARY_OPS.items():
        kinds = row.wgsl if isinstance(row.wgsl, dict) else {"float": ""}
        dtype = np.float32 if "float" in kinds else np.bool_ if "bool" in kinds else np.int32
        value = fold_single(name, [np.array([0.1, 0.5, 0.9]).astype(dtype)], opset=max(18, row.since))
        assert value.shape == (3,), name


def sym_values(*values):
    return np.array(values, dtype=object)


def test_symbolic_arithmetic_folds_through_the_rows():
    a, b = sym_values(B, S * 4, 6), sym_values(2, 2, 4)
    assert list(BINARY_OPS["Add"].fold(a, b)) == [B + 2, S * 4 + 2, 10]
    assert list(BINARY_OPS["Mul"].fold(a, b)) == [B * 2, S * 8, 24]
    assert list(BINARY_OPS["Div"].fold(sym_values(S * 4, -7), sym_values(2, 2))) == [S * 2, -3]  # ints truncate
    assert list(VARIADIC_OPS["Max"].fold(sym_values(S, S + 1, 3), sym_values(0, S, 1))) == [S, S + 1, 3]
    assert list(VARIADIC_OPS["Min"].fold(sym_values(S, -1), sym_values(S + 2, S))) == [S, -1]
    assert list(COMPARISON_OPS["Equal"].fold(sym_values(S, S, 3), sym_values(-1, S, 3))) == [False, True, True]
    with pytest.raises(TypeError):  # s > 1 depends on s
        COMPARISON_OPS["Greater"].fold(sym_values(S), sym_values(1))


def test_shape_chain_with_symbolic_dims_folds_to_zero_dispatches():
    # Reshape(x, Where(Equal(shape, -1), 1, Max(shape * 2 / 2, 0))): every step folds over s.
    nodes = [h.make_node("Shape", ["x"], ["shape"]),
             h.make_node("Mul", ["shape", "two"], ["m"]), h.make_node("Div", ["m", "two"], ["d"]),
             h.make_node("Max", ["d", "zero"], ["mx"]), h.make_node("Equal", ["shape", "minus1"], ["eq"]),
             h.make_node("Where", ["eq", "one", "mx"], ["target"]), h.make_node("Reshape", ["x", "target"], ["y"])]
    inits = {"two": np.array(2, np.int64), "zero": np.array(0, np.int64), "minus1": np.array(-1, np.int64),
             "one": np.array(1, np.int64)}
    model = make_model(nodes, [("x", np.float32, ["s", 4])], ["y"], inits)
    graph = folded_graph(model, {"s": 3})
    assert list(graph.tensor("target").value) == [S, 4]
    assert compile_model(model, {"s": 3}).num_dispatches == 0


def test_undecidable_symbolic_comparison_is_left_to_the_gpu():
    nodes = [h.make_node("Shape", ["x"], ["shape"]), h.make_node("Greater", ["shape", "one"], ["y"])]
    model = make_model(nodes, [("x", np.float32, ["s", 4])], ["y"], {"one": np.array(1, np.int64)})
    assert folded_graph(model, {"s": 3}).tensor("y").value is None


# ---- one row adds an op ---------------------------------------------------------------------

def test_a_new_binary_op_is_one_row():
    registry = core_operator_registry().register(
        BinaryElementwise("AbsDiff", Row(numeric("abs(x0 - x1)"), lambda a, b: np.abs(a - b))), 1, domain="com.example")
    model = make_model([h.make_node("AbsDiff", ["a", "b"], ["y"], domain="com.example")],
                       [("a", np.float32, ["s", 3])], ["y"], {"b": np.float32([1, 2, 3])},
                       extra_opsets={"com.example": 1})
    compiled = CompilerPipeline(registry).compile(onyxia.load_model(model), {"s": 2})
    assert compiled.num_dispatches == 1 and "abs(x0 - x1)" in dict(compiled.shaders[0].defs)["EXPR"]


# ---- errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("op,dtype,attrs,message", [
    ("And", np.float32, {}, "dtype float32"),
    ("BitwiseAnd", np.float32, {}, "dtype float32"),
    ("BitShift", np.float32, {"direction": "LEFT"}, "dtype float32"),
    ("BitShift", np.uint32, {"direction": "UP"}, "'direction': 'UP'"),
    ("Mod", np.float32, {"fmod": 2}, "'fmod': 2"),
    ("Add", np.bool_, {}, "dtype bool"),
    ("Greater", np.bool_, {}, "dtype bool"),
])
def test_unsupported_binary_combinations_name_the_node(op, dtype, attrs, message):
    node = h.make_node(op, ["a", "b"], ["y"], name="the_node", **attrs)
    model = make_model([node], [("a", dtype, [2]), ("b", dtype, [2])], ["y"])
    with pytest.raises(OnyxiaError, match=f"the_node.*{op}") as info:
        compile_model(model)
    assert message in str(info.value)


@pytest.mark.parametrize("op,dtype,attrs,opset", [
    ("IsNaN", np.int32, {}, 18), ("IsInf", np.int64, {}, 18), ("Sqrt", np.int32, {}, 18), ("Not", np.float32, {}, 18),
    ("Neg", np.uint8, {}, 18), ("Gelu", np.float32, {"approximate": "fast"}, 20), ("Sum", np.int32, {}, 18),
    ("Where", np.float32, {}, 18), ("Clip", np.bool_, {}, 18),
])
def test_unsupported_unary_combinations_name_the_node(op, dtype, attrs, opset):
    inputs = [("x", dtype, [2])] + ([("a", np.float32, [2]), ("b", np.float32, [2])] if op == "Where" else [])
    node = h.make_node(op, [n for n, _, _ in inputs], ["y"], name="bad_node", **attrs)
    with pytest.raises(OnyxiaError, match="bad_node"):
        compile_model(make_model([node], inputs, ["y"], opset=opset))


def test_mismatched_dtypes_and_bad_clip_bounds_are_errors():
    model = make_model([h.make_node("Add", ["a", "b"], ["y"], name="mixed")],
                       [("a", np.float32, [2]), ("b", np.int32, [2])], ["y"])
    with pytest.raises(OnyxiaError, match="mixed.*same dtype"):
        compile_model(model)
    model = make_model([h.make_node("Clip", ["x", "lo"], ["y"], name="clip")],
                       [("x", np.float32, [2]), ("lo", np.float32, [2])], ["y"])
    with pytest.raises(OnyxiaError, match="clip.*scalar"):
        compile_model(model)


def test_float64_folds_on_the_host_but_cannot_run_on_the_gpu():
    model = make_model([h.make_node("Add", ["a", "b"], ["c"]), h.make_node("Cast", ["c"], ["y"], to=1)], [], ["y"],
                       {"a": np.array([1.5]), "b": np.array([2.0])})
    np.testing.assert_array_equal(compile_model(model).tensors["y"].data, [3.5])
    model = make_model([h.make_node("Exp", ["x"], ["y"], name="exp64")], [("x", np.float64, [2])], ["y"])
    with pytest.raises(UnsupportedDtypeError, match="exp64"):
        compile_model(model)


# ---- planning -------------------------------------------------------------------------------

def test_variadic_beyond_the_binding_limit_chains_dispatches():
    names = [f"x{i}" for i in range(9)]
    model = make_model([h.make_node("Sum", names, ["y"])], [(n, np.float32, ["s"]) for n in names], ["y"])
    compiled = compile_model(model, {"s": 4})
    for s in (4, 5):  # four outputs a thread (map4.wgsl), then one
        steps = live_dispatches(compiled, {"s": s})
        assert len(steps) == 2 and max(len(d.bindings) for d in steps) <= ew.MAX_MAP_INPUTS + 1


def test_narrow_int_results_are_stored_packed_and_attributes_become_params():
    model = make_model([h.make_node("Add", ["a", "b"], ["y"])], [("a", np.int8, [2]), ("b", np.int8, [2])], ["y"])
    [y] = [b for b in compile_model(model).shaders[0].buffers if b.name == "y"]
    assert y.dtype == "int8" and y.whole_words  # the store keeps the low 8 bits: the wrap
    model = make_model([h.make_node("LeakyRelu", ["x"], ["y"], alpha=0.25)], [("x", np.float32, ["s"])], ["y"])
    spec = compile_model(model, {"s": 3}).shaders[0]
    assert ("ALPHA", 0.25) in [(p.name, v) for p, v in spec.constants]
