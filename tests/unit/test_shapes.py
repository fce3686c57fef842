"""Symbolic dimensions: canonical simplification, parsing, evaluation, compilation, pickling."""

from __future__ import annotations

import operator
import pickle
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onyxia.errors import DimensionError
from onyxia.ir.dim_parse import parse_dim
from onyxia.ir.shapes import Dim, SymDim, compile_dim, dim_symbols, evaluate_dim, numel, shape_str

s, t, a, b = (SymDim.symbol(name) for name in ("s", "t", "a", "b"))


# -- required simplifications ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("built", "expected"),
    [
        ((s + 1) - 1, s),
        (s * 2 - s, s),
        ((a + b) * (a - b), a * a - b * b),
        (s // 1, s),
        ((4 * s) // 2, 2 * s),
        ((4 * s + 6) // 2, 2 * s + 3),
        ((s * t) // t, s),
        ((2 * s + 1) // 2, s),  # the odd constant's contribution floors away
        ((2 * s + 2) // 4, (s + 1) // 2),  # common factor of numerator and divisor cancels
        ((s // 2) // 3, s // 6),
        ((s % 6) % 3, s % 3),
        ((2 * s + 2) % 6, 2 * ((s + 1) % 3)),
        (s // -2, (-s) // 2),
        ((s + t) // (s + t), 1),
        ((3 * s + 3 * t) // (s + t), 3),
    ],
)
def test_simplifications(built: Dim, expected: Dim) -> None:
    assert built == expected
    assert type(built) is type(expected)


@pytest.mark.parametrize(
    ("built", "value"),
    [(s - s, 0), (s % 1, 0), ((6 * s) % 3, 0), (SymDim.symbol("x") * 0, 0), ((a + b) % (a + b), 0)],
)
def test_constant_results_are_plain_ints(built: Dim, value: int) -> None:
    assert type(built) is int and built == value


def test_constant_folding() -> None:
    assert parse_dim("7 // 2") == 3
    assert parse_dim("-7 % 3") == 2  # Python floor semantics
    assert parse_dim("(2 + 3) * 4") == 20


def test_canonical_text() -> None:
    batch, seq = SymDim.symbol("batch"), SymDim.symbol("seq")
    assert str(1 + seq * batch) == "batch * seq + 1"
    assert str((seq + 3) // 4) == "(seq + 3) // 4"
    assert str(-(s // 4)) == "-(s // 4)"
    assert str(2 * (s // 4) + s * s - 3) == "s * s + 2 * (s // 4) - 3"
    assert repr(seq + 1) == "SymDim('seq + 1')"


# -- random expression trees ----------------------------------------------------------------

# A tree is ("sym", name) | ("int", k) | (op, left, right). Symbol "c" is bound >= 1, so it (and
# sums/products with it) may divide; "a" and "b" may be 0.
_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
        "%": operator.mod}
_C = ("sym", "c")
leaves = st.one_of(st.sampled_from([("sym", "a"), ("sym", "b"), _C]),
                   st.integers(-4, 12).map(lambda k: ("int", k)))
divisors = st.one_of(
    st.integers(1, 8).map(lambda k: ("int", k)),
    st.just(_C),
    st.integers(1, 4).map(lambda k: ("*", ("int", k), _C)),
    st.integers(0, 4).map(lambda k: ("+", _C, ("int", k))),
    st.just(("+", _C, ("sym", "a"))),
    st.just(("*", _C, _C)),
)
trees = st.recursive(
    leaves,
    lambda sub: st.one_of(st.tuples(st.sampled_from(["+", "-", "*"]), sub, sub),
                          st.tuples(st.sampled_from(["//", "%"]), sub, divisors)),
    max_leaves=10,
)
bindings = st.fixed_dictionaries(
    {"a": st.integers(0, 30), "b": st.integers(0, 30), "c": st.integers(1, 30)})


def fold(tree: tuple, symbol) -> Dim:
    kind = tree[0]
    if kind == "sym":
        return symbol(tree[1])
    if kind == "int":
        return tree[1]
    return _OPS[kind](fold(tree[1], symbol), fold(tree[2], symbol))


def build(tree: tuple) -> Dim:
    return fold(tree, SymDim.symbol)


def plain_value(tree: tuple, dims: dict[str, int]) -> int:
    return fold(tree, dims.__getitem__)


def mirror(tree: tuple) -> tuple:
    """Swap the operands of every + and *: an equal expression built differently."""
    if tree[0] in ("sym", "int"):
        return tree
    op, left, right = tree[0], mirror(tree[1]), mirror(tree[2])
    return (op, right, left) if op in ("+", "*") else (op, left, right)


def reassociate(tree: tuple) -> tuple:
    """(x op y) op z -> x op (y op z) for + and *, throughout."""
    if tree[0] in ("sym", "int"):
        return tree
    op, left, right = tree[0], reassociate(tree[1]), reassociate(tree[2])
    if op in ("+", "*") and left[0] == op:
        return (op, left[1], (op, left[2], right))
    return (op, left, right)


FAST = settings(max_examples=200, deadline=None)


@FAST
@given(trees, bindings)
def test_simplified_value_matches_integer_arithmetic(tree: tuple, dims: dict[str, int]) -> None:
    expr = build(tree)
    expected = plain_value(tree, dims)
    assert evaluate_dim(expr, dims) == expected
    if isinstance(expr, SymDim):
        assert expr.symbols  # never constant
        assert expr.substitute(dims) == expected


@FAST
@given(trees)
def test_text_round_trips(tree: tuple) -> None:
    expr = build(tree)
    assert parse_dim(str(expr)) == expr


@FAST
@given(trees, bindings)
def test_compiled_matches_evaluate_and_substitute(tree: tuple, dims: dict[str, int]) -> None:
    expr = build(tree)
    if isinstance(expr, SymDim):
        assert expr.compile()(dims) == expr.evaluate(dims) == expr.substitute(dims)


@FAST
@given(trees, trees)
def test_equal_expressions_built_differently(tree: tuple, other: tuple) -> None:
    expr = build(tree)
    for variant in (build(mirror(tree)), build(reassociate(tree))):
        assert variant == expr and hash(variant) == hash(expr)
        assert str(variant) == str(expr)
    y, z = build(other), build(mirror(other))
    assert expr * (y + z) == expr * y + expr * z
    if expr == y:
        assert hash(expr) == hash(y)


@FAST
@given(trees, bindings)
def test_partial_substitution(tree: tuple, dims: dict[str, int]) -> None:
    expr = build(tree)
    if isinstance(expr, SymDim):
        partial = expr.substitute({"a": dims["a"]})
        assert "a" not in dim_symbols(partial)
        assert evaluate_dim(partial, dims) == plain_value(tree, dims)
        renamed = expr.substitute({"b": SymDim.symbol("a") + 1})
        assert evaluate_dim(renamed, dims) == plain_value(tree, {**dims, "b": dims["a"] + 1})


# -- parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("batch_size", SymDim.symbol("batch_size")),
        ("unk__123", SymDim.symbol("unk__123")),
        ("sequence_length * num_heads",
         SymDim.symbol("sequence_length") * SymDim.symbol("num_heads")),
        ("past_sequence_length + 1", SymDim.symbol("past_sequence_length") + 1),
        ("(a+b)//2", (a + b) // 2),
        ("a / 2", a // 2),  # exporters write "/" for integer division
        ("total % 8", SymDim.symbol("total") % 8),
        ("-s + 3", 3 - s),
        ("  s  ", s),
        ("batch-size", SymDim.symbol("batch-size")),
        ("x.y", SymDim.symbol("x.y")),
        ("2 * batch-size + 1", 2 * SymDim.symbol("batch-size") + 1),
        ("s - 1", s - 1),  # spaced "-" is still subtraction
        ("batch size", SymDim.symbol("batch size")),  # not an expression: one name
        ("12", 12),
    ],
)
def test_parse_dim(text: str, expected: Dim) -> None:
    assert parse_dim(text) == expected


@pytest.mark.parametrize("text", ["f(seq)", "seq * 1.5", "seq ** 2", "a if b else c", "s[0]",
                                  "True", "seq // 0"])
def test_parse_errors_name_the_text(text: str) -> None:
    with pytest.raises(DimensionError, match=re.escape(repr(text))):
        parse_dim(text)


def test_parse_empty() -> None:
    with pytest.raises(DimensionError, match="empty"):
        parse_dim("  ")


# -- evaluation errors ----------------------------------------------------------------------


def test_missing_dim_names_symbol_and_expression() -> None:
    expr = SymDim.symbol("seq") * 4
    for call in (expr.evaluate, expr.compile(), lambda dims: evaluate_dim(expr, dims)):
        with pytest.raises(DimensionError, match=r"dimension 'seq' is not given.*'4 \* seq'"):
            call({"batch": 2})
    with pytest.raises(DimensionError, match="'a', 'b'"):
        (a * b + (a // 3)).evaluate({})


def test_division_by_zero_is_a_dimension_error() -> None:
    with pytest.raises(DimensionError, match="division by zero"):
        (a // b).evaluate({"a": 3, "b": 0})
    with pytest.raises(ZeroDivisionError):
        s // 0


# -- object behaviour -----------------------------------------------------------------------


def test_compile_is_cached_and_fast_path_returns_ints() -> None:
    expr = (s + 3) // 4 * t
    fn = expr.compile()
    assert expr.compile() is fn
    assert fn({"s": 5, "t": 3}) == 6


def test_equality_and_hash() -> None:
    assert s != 0 and 0 != s and s != 1
    assert s.__eq__("s") is NotImplemented
    assert {s + 1: "x"}[1 + s] == "x"
    assert len({a * b, b * a, a + b, b + a}) == 2


def test_no_ordering_and_immutable() -> None:
    with pytest.raises(TypeError):
        _ = s < 3
    with pytest.raises(AttributeError):
        s._terms = {}  # type: ignore[misc]
    with pytest.raises(TypeError):
        SymDim("s")  # type: ignore[arg-type]


def test_numpy_integers_and_object_arrays() -> None:
    assert s * np.int64(3) == 3 * s
    assert np.int64(2) + s == s + 2
    arr = np.array([s, 2], dtype=object) * 4
    assert list(arr) == [4 * s, 8]


@pytest.mark.parametrize(
    "expr", [s, (s + 3) // 4 * t - (a * b) % 8, SymDim.symbol("batch size") * 4])
def test_pickle_round_trip(expr: SymDim) -> None:
    expr.compile()  # the cached function must not be pickled
    restored = pickle.loads(pickle.dumps(expr))
    assert restored == expr and hash(restored) == hash(expr) and str(restored) == str(expr)
    assert restored.evaluate({"s": 9, "t": 2, "a": 3, "b": 5, "batch size": 1}) == \
        expr.evaluate({"s": 9, "t": 2, "a": 3, "b": 5, "batch size": 1})


def test_symbols() -> None:
    assert ((a + 1) // (s * t) + b).symbols == {"a", "b", "s", "t"}
    assert dim_symbols(7) == frozenset()


# -- shape helpers --------------------------------------------------------------------------


def test_shape_helpers() -> None:
    batch, seq = SymDim.symbol("batch"), SymDim.symbol("seq")
    shape = (batch, seq * 4, 768)
    assert shape_str(shape) == "[batch, 4 * seq, 768]"
    assert shape_str(()) == "[]"
    assert compile_dim(7)({}) == 7 and compile_dim(batch * 4)({"batch": 3}) == 12
    assert numel(shape) == 3072 * batch * seq
    assert numel((2, 3)) == 6 and numel(()) == 1
    assert evaluate_dim(5, {}) == 5
    assert evaluate_dim(numel(shape), {"batch": 2, "seq": 3}) == 2 * 12 * 768


# ---- bounds on hostile dim_param expressions (issue 12, root cause 6) ----------------------


@pytest.mark.parametrize("text,match", [
    ("-" * 1000 + "n", "characters long"),
    ("-" * 40 + "n", "nested more than"),
    ("+".join(["n"] * 300), "nested more than|names, numbers and operators"),
    ("*".join("(" + "+".join("abcdefghijkl") + ")" for _ in range(4)), "more than 256 terms"),
])
def test_parse_dim_bounds(text, match):
    with pytest.raises(DimensionError, match=match):
        parse_dim(text)


def test_parse_dim_within_bounds():
    assert parse_dim("-" * 30 + "n") == SymDim.symbol("n")
    product = parse_dim("(a + b) * (a + b)")
    assert product.evaluate({"a": 2, "b": 3}) == 25
