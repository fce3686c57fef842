"""Symbolic dimensions: a shape is a tuple of `int | SymDim`.

A `SymDim` is an integer polynomial over *atoms*; an atom is a symbol name or an irreducible
floor-division / modulo term whose operands are themselves canonical. Every arithmetic operation
re-normalises, so structurally different spellings of one expression compare equal
(`(s + 1) - 1 == s`) and anything constant comes back as a plain `int`: a SymDim is never constant.

Floor semantics are Python's. The rewrites used for `//` and `%` are exact identities for any
non-zero divisor (dims are non-negative in practice, but nothing here relies on it).

The runtime evaluates these expressions on every `update_dimensions`, so `compile()` turns one
into a Python function once (well under a microsecond per call); `evaluate()` goes through it too.
"""

from __future__ import annotations

import keyword
import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from functools import reduce
from typing import NamedTuple, TypeAlias

from onyxia.errors import DimensionError

__all__ = ["Dim", "Shape", "SymDim", "compile_dim", "dim_symbols", "evaluate_dim", "nonnegative", "numel", "shape_str"]


class _Quot(NamedTuple):
    """An irreducible `num // den` or `num % den` atom (op is "//" or "%")."""

    op: str
    num: Dim
    den: Dim


# An atom is a symbol name or a _Quot; a monomial maps atoms to powers (frozenset of pairs, so
# equality never depends on construction order); a polynomial maps monomials to coefficients.
_Atom: TypeAlias = "str | _Quot"
_Monomial: TypeAlias = frozenset  # frozenset[tuple[_Atom, int]]
_Terms: TypeAlias = dict  # dict[_Monomial, int], zero coefficients never stored
_ONE: _Monomial = frozenset()  # the monomial of the constant term


def _operator(combine: Callable[[Dim, Dim], Dim], reflected: bool = False) -> Callable:
    """A binary dunder: coerce the other operand (NotImplemented if foreign), then combine."""

    def method(self: SymDim, other: object) -> Dim:
        o = _coerce(other)
        if o is None:
            return NotImplemented
        return combine(o, self) if reflected else combine(self, o)

    return method


def _operator_pair(combine: Callable[[Dim, Dim], Dim]) -> tuple[Callable, Callable]:
    return _operator(combine), _operator(combine, reflected=True)


class SymDim:
    """An immutable, hashable, non-constant symbolic dimension in canonical form."""

    __slots__ = ("_terms", "_hash", "_text", "_symbols", "_fn")

    def __init__(self, terms: _Terms) -> None:
        # Internal: callers build SymDims with SymDim.symbol(), parse_dim() and arithmetic.
        if not isinstance(terms, dict):
            raise TypeError("use SymDim.symbol(name) or parse_dim(text) to build a SymDim")
        object.__setattr__(self, "_terms", terms)
        object.__setattr__(self, "_hash", hash(frozenset(terms.items())))
        for cache in ("_text", "_symbols", "_fn"):
            object.__setattr__(self, cache, None)

    @staticmethod
    def symbol(name: str) -> SymDim:
        if not isinstance(name, str) or not name:
            raise DimensionError(f"a dimension symbol needs a non-empty name, got {name!r}")
        return SymDim({frozenset({(name, 1)}): 1})

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("SymDim is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("SymDim is immutable")

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        # Structural rather than via str(): symbol names that are not Python identifiers
        # ("batch size") are legal in ONNX but cannot round-trip through parse_dim inside a sum.
        return (SymDim, (self._terms,))

    # -- identity ---------------------------------------------------------------------------

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SymDim):
            return self is other or (self._hash == other._hash and self._terms == other._terms)
        if isinstance(other, int):
            return False  # a SymDim is never constant
        return NotImplemented

    # -- arithmetic -------------------------------------------------------------------------

    # Forward and reflected forms; every one returns a plain int when the result is constant.
    __add__ = __radd__ = _operator(lambda x, y: _from_terms(_add(_terms_of(x), _terms_of(y))))
    __sub__, __rsub__ = _operator_pair(lambda x, y: x + _from_terms(_scale(_terms_of(y), -1)))
    __mul__ = __rmul__ = _operator(lambda x, y: _from_terms(_mul(_terms_of(x), _terms_of(y))))
    __floordiv__, __rfloordiv__ = _operator_pair(lambda x, y: _divide(x, y, "//"))
    __mod__, __rmod__ = _operator_pair(lambda x, y: _divide(x, y, "%"))

    def __neg__(self) -> SymDim:
        return SymDim(_scale(self._terms, -1))

    # -- queries ----------------------------------------------------------------------------

    @property
    def symbols(self) -> frozenset[str]:
        """The free symbols, including those inside `//` and `%` terms."""
        if self._symbols is None:
            found: set[str] = set()
            for atom in {atom for mono in self._terms for atom, _ in mono}:
                if isinstance(atom, str):
                    found.add(atom)
                else:
                    found |= dim_symbols(atom.num) | dim_symbols(atom.den)
            object.__setattr__(self, "_symbols", frozenset(found))
        return self._symbols

    def evaluate(self, dims: Mapping[str, int]) -> int:
        """The value under `dims`; DimensionError names a missing symbol."""
        return self.compile()(dims)

    def compile(self) -> Callable[[Mapping[str, int]], int]:
        """A function `dims -> int`, generated once per expression (equal SymDims share it: a
        plan's ~4,000 sizes are ~400 expressions, and generating each was 0.5 s of
        efficientnet_b0's load): the update_dimensions hot path."""
        if self._fn is None:
            fn = _COMPILED.get(self)
            if fn is None:
                if len(_COMPILED) >= _MAX_COMPILED:
                    _COMPILED.clear()
                fn = _COMPILED[self] = _compile(self)
            object.__setattr__(self, "_fn", fn)
        return self._fn

    def substitute(self, dims: Mapping[str, Dim]) -> Dim:
        """Replace the symbols `dims` names (by ints or SymDims) and re-simplify."""
        if self.symbols.isdisjoint(dims):
            return self
        result: Dim = 0
        for mono, coef in self._terms.items():
            term: Dim = coef
            for atom, power in mono:
                value = _substitute_atom(atom, dims)
                for _ in range(power):
                    term = term * value
            result = result + term
        return result

    def __str__(self) -> str:
        if self._text is None:
            symbol = _single_atom(self)  # a lone name reads as itself, whatever it holds
            text = symbol if isinstance(symbol, str) else _render(self._terms, code=False)
            object.__setattr__(self, "_text", text)
        return self._text

    def __repr__(self) -> str:
        return f"SymDim({str(self)!r})"


Dim: TypeAlias = int | SymDim
Shape: TypeAlias = tuple[Dim, ...]


# -- polynomial arithmetic ------------------------------------------------------------------


def _coerce(value: object) -> Dim | None:
    """SymDims and integers (numpy's too) take part in arithmetic; anything else does not."""
    if isinstance(value, (SymDim, int)):
        return value
    try:
        return operator.index(value)
    except TypeError:
        return None


def _terms_of(d: Dim) -> _Terms:
    if isinstance(d, SymDim):
        return d._terms
    return {_ONE: d} if d else {}


def _from_terms(terms: _Terms) -> Dim:
    """Wrap a polynomial, unwrapping constants to plain ints."""
    if not terms:
        return 0
    if len(terms) == 1 and _ONE in terms:
        return terms[_ONE]
    return SymDim(terms)


def _add(p: _Terms, q: _Terms) -> _Terms:
    out = dict(p)
    for mono, coef in q.items():
        out[mono] = out.get(mono, 0) + coef
    return {mono: coef for mono, coef in out.items() if coef}


def _scale(terms: _Terms, factor: int) -> _Terms:
    return {mono: coef * factor for mono, coef in terms.items()} if factor else {}


def _mul(p: _Terms, q: _Terms) -> _Terms:
    out: _Terms = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            mono = _mono_mul(m1, m2)
            out[mono] = out.get(mono, 0) + c1 * c2
    return {mono: coef for mono, coef in out.items() if coef}


def _mono_mul(m1: _Monomial, m2: _Monomial) -> _Monomial:
    if not m1 or not m2:
        return m1 or m2
    powers = dict(m1)
    for atom, power in m2:
        powers[atom] = powers.get(atom, 0) + power
    return frozenset(powers.items())


def _mono_div(mono: _Monomial, divisor: _Monomial) -> _Monomial | None:
    """mono / divisor as a monomial, or None when divisor does not divide it."""
    powers = dict(mono)
    for atom, power in divisor:
        powers[atom] = powers.get(atom, 0) - power
        if powers[atom] < 0:
            return None
    return frozenset((atom, power) for atom, power in powers.items() if power)


# -- floor division and modulo --------------------------------------------------------------


def _divide(a: Dim, b: Dim, op: str) -> Dim:
    """Canonical `a // b` (op "//") or `a % b` (op "%").

    With a single-term divisor c*m, a splits into b*Q + R, where Q collects the terms divisible by
    m with their coefficients' floor quotient by c. Q is integer-valued, so a // b == Q + R // b and
    a % b == R % b. A common factor g of c and R's coefficients cancels: (g*x) // (g*y) == x // y
    and (g*x) % (g*y) == g * (x % y). What is left over becomes an atom.
    """
    if isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError(f"{a} {op} 0")
        if isinstance(a, int):
            return a // b if op == "//" else a % b
    if a == 0:
        return 0
    divisor = _terms_of(b)
    if len(divisor) != 1:
        # A polynomial divisor: only exact integer multiples simplify.
        ratio = _int_ratio(_terms_of(a), divisor)
        if ratio is not None:
            return ratio if op == "//" else 0
        return _quot_atom(a, b, op)

    [(div_mono, div_coef)] = divisor.items()
    if div_coef < 0:
        # Keep every atom's divisor coefficient positive: a // -b == -a // b, a % -b == -(-a % b).
        return _divide(-a, -b, "//") if op == "//" else -_divide(-a, -b, "%")
    quot: _Terms = {}
    rem: _Terms = {}
    for mono, coef in _terms_of(a).items():
        rest = _mono_div(mono, div_mono)
        if rest is None:
            rem[mono] = coef
            continue
        q, r = divmod(coef, div_coef)
        if q:
            quot[rest] = q
        if r:
            rem[mono] = r
    if not rem:
        return _from_terms(quot) if op == "//" else 0
    g = math.gcd(div_coef, *rem.values())
    remainder = _from_terms({mono: coef // g for mono, coef in rem.items()})
    reduced = _from_terms({div_mono: div_coef // g})
    if op == "//":
        return _from_terms(quot) + _quot_atom(remainder, reduced, "//")
    return g * _quot_atom(remainder, reduced, "%")


def _int_ratio(a: _Terms, b: _Terms) -> int | None:
    """k when a == k * b for an integer k, else None."""
    mono, coef = next(iter(b.items()))
    k, r = divmod(a.get(mono, 0), coef)
    return k if not r and a == _scale(b, k) else None


def _quot_atom(a: Dim, b: Dim, op: str) -> Dim:
    """An already-reduced quotient: fold constants, merge nesting, else make an atom."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b if op == "//" else a % b
    inner = _single_atom(a)
    if isinstance(inner, _Quot) and isinstance(inner.den, int) and isinstance(b, int):
        # Both divisors are positive ints here: (x // p) // q == x // (p*q), and
        # (x % (k*q)) % q == x % q.
        if op == "//" == inner.op:
            return _divide(inner.num, inner.den * b, "//")
        if op == "%" == inner.op and inner.den % b == 0:
            return _divide(inner.num, b, "%")
    return SymDim({frozenset({(_Quot(op, a, b), 1)}): 1})


def _single_atom(d: Dim) -> _Atom | None:
    """The atom when d is exactly one atom with coefficient 1 and power 1."""
    if isinstance(d, SymDim) and len(d._terms) == 1:
        [(mono, coef)] = d._terms.items()
        if coef == 1 and len(mono) == 1 and next(iter(mono))[1] == 1:
            return next(iter(mono))[0]
    return None


def _substitute_atom(atom: _Atom, dims: Mapping[str, Dim]) -> Dim:
    if isinstance(atom, str):
        return dims[atom] if atom in dims else SymDim.symbol(atom)
    num, den = (x.substitute(dims) if isinstance(x, SymDim) else x for x in (atom.num, atom.den))
    return _divide(num, den, atom.op)


# -- rendering: canonical text, and the Python source compile() runs ------------------------


def _atom_key(atom: _Atom) -> tuple[int, str]:
    return (0, atom) if isinstance(atom, str) else (1, _render_quot(atom, code=False))


def _term_key(mono: _Monomial) -> tuple[int, list[tuple[int, str]]]:
    # Higher degree first, then by atom text: deterministic, and the constant comes last.
    factors = sorted(_atom_key(atom) for atom, power in mono for _ in range(power))
    return (-len(factors), factors)


def _render(terms: _Terms, code: bool) -> str:
    """Text of a polynomial; with code=True symbols read `d['name']` (the compiled form)."""
    parts = []
    for i, (mono, coef) in enumerate(sorted(terms.items(), key=lambda t: _term_key(t[0]))):
        leading_minus = i == 0 and coef < 0
        body = _render_term(abs(coef), mono, code, bare=not leading_minus)
        if i == 0:
            parts.append("-" + body if leading_minus else body)
        else:
            parts.append((" - " if coef < 0 else " + ") + body)
    return "".join(parts)


def _render_term(coef: int, mono: _Monomial, code: bool, bare: bool) -> str:
    atoms = sorted((atom for atom, power in mono for _ in range(power)), key=_atom_key)
    if not atoms:
        return str(coef)
    if bare and coef == 1 and len(atoms) == 1:
        return _render_atom(atoms[0], code, parens=False)
    # `*`, `//`, `%` and unary minus bind left to right, so a quotient in a product needs parens.
    factors = [_render_atom(atom, code, parens=True) for atom in atoms]
    return " * ".join(factors if coef == 1 else [str(coef), *factors])


# A symbol name the expression grammar reads as one name: an identifier, or identifiers glued by
# "-" or "." (onyxia/ir/dim_parse.py). Any other ("batch size", an ONNX dim_param) is written as a
# quoted string inside an expression, so that a plan's text parses back to the same symbol.
_PLAIN_NAME = re.compile(r"[A-Za-z_]\w*(?:\.\w+|-[A-Za-z_]\w*)*")


def _name_text(name: str) -> str:
    plain = _PLAIN_NAME.fullmatch(name) and not keyword.iskeyword(name) and name not in ("None", "True", "False")
    return name if plain else repr(name)


def _render_atom(atom: _Atom, code: bool, parens: bool) -> str:
    if isinstance(atom, str):
        return f"d[{atom!r}]" if code else _name_text(atom)
    text = _render_quot(atom, code)
    return f"({text})" if parens else text


def _render_quot(atom: _Quot, code: bool) -> str:
    return f"{_render_operand(atom.num, code)} {atom.op} {_render_operand(atom.den, code)}"


def _render_operand(d: Dim, code: bool) -> str:
    if isinstance(d, int):
        return str(d) if d >= 0 else f"({d})"
    symbol = _single_atom(d)
    if isinstance(symbol, str):
        return _render_atom(symbol, code, parens=False)
    return f"({_render(d._terms, code) if code else str(d)})"


_COMPILED: dict[SymDim, Callable[[Mapping[str, int]], int]] = {}  # by expression, process-wide
_MAX_COMPILED = 1 << 16


def _compile(expr: SymDim) -> Callable[[Mapping[str, int]], int]:
    text = str(expr)

    def missing(dims: Mapping[str, int]) -> DimensionError:
        names = sorted(expr.symbols.difference(dims))
        shown = ", ".join(repr(n) for n in names) or "?"
        verb = "dimension {} is" if len(names) <= 1 else "dimensions {} are"
        return DimensionError(f"{verb.format(shown)} not given (needed by {text!r})")

    def zero(dims: Mapping[str, int]) -> DimensionError:
        given = {name: dims.get(name) for name in sorted(expr.symbols)}
        return DimensionError(f"division by zero evaluating {text!r} with {given}")

    # One generated function, no wrapper: the try costs nothing on the fast path in 3.11+.
    source = (
        "def evaluate(d):\n"
        f"    try:\n        return {_render(expr._terms, code=True)}\n"
        "    except KeyError:\n        raise missing(d) from None\n"
        "    except ZeroDivisionError:\n        raise zero(d) from None\n"
    )
    namespace: dict[str, object] = {"missing": missing, "zero": zero}
    exec(compile(source, f"<SymDim {text}>", "exec"), namespace)
    return namespace["evaluate"]  # type: ignore[return-value]


# -- parsing ONNX dim_param strings ---------------------------------------------------------

def evaluate_dim(d: Dim, dims: Mapping[str, int]) -> int:
    return d if isinstance(d, int) else d.evaluate(dims)


def nonnegative(d: Dim) -> bool:
    """Provably >= 0: an int >= 0, or a polynomial in symbols (dims, so >= 0) whose coefficients
    are all >= 0 (`//` and `%` atoms are not judged)."""
    if isinstance(d, int):
        return d >= 0
    return all(c >= 0 and all(isinstance(atom, str) for atom, _ in mono) for mono, c in d._terms.items())


def dim_symbols(d: Dim) -> frozenset[str]:
    return d.symbols if isinstance(d, SymDim) else frozenset()


def shape_str(shape: Iterable[Dim]) -> str:
    """"[batch, seq * 4, 768]"."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def compile_dim(d: Dim) -> Callable[[Mapping[str, int]], int]:
    """`dims -> int` for a dim: SymDim.compile, or a constant function for a literal."""
    return d.compile() if isinstance(d, SymDim) else (lambda dims: d)


def numel(shape: Iterable[Dim]) -> Dim:
    """The element count; symbolic when any dim is."""
    return reduce(operator.mul, shape, 1)
