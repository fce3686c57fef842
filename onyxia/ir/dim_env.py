"""DimEnv: what one compilation knows about its symbols.

The values given at compile time (they size buffers and let folding evaluate shapes), the symbols
baked into shaders as defs, and the equalities the compiler assumed because the values agreed.
The compiler's CompileContext extends it; the operators' contexts read it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from onyxia.errors import DimensionError
from onyxia.ir.shapes import Dim, SymDim, dim_symbols, evaluate_dim

# An assumed equality: (dim, dim, the node that needed it).
Constraint = tuple[Dim, Dim, str]


@dataclass(kw_only=True)
class DimEnv:
    dims: dict[str, int] = field(default_factory=dict)  # symbol -> value (buffer capacities, folding)
    static: frozenset[str] = frozenset()  # symbols baked into shaders as defs
    # (str(a), str(b)) -> (a, b, node): becomes the plan's constraints, re-checked by update_dimensions.
    constraints: dict[tuple[str, str], Constraint] = field(default_factory=dict)
    # (str(dim), str(value)) -> what a rule needed the literal for ("the channel axis"): a new
    # value of its symbols needs another plan; InferenceSession's stats and `onyxia inspect` say why.
    reasons: dict[tuple[str, str], str] = field(default_factory=dict)
    # Symbols whose values in `dims` are stand-ins (InferenceSession describes its outputs before
    # any feed): a comparison involving one cannot be judged, so it passes and records nothing.
    placeholders: frozenset[str] = frozenset()
    # Data-dependent symbols (data_symbol) -> the capacity bound their buffers are sized for.
    data_symbols: dict[str, Dim | None] = field(default_factory=dict)

    def value(self, d: Dim) -> int | None:
        """The compile-time value of `d`, or None when a symbol of it has none."""
        try:
            return evaluate_dim(d, self.dims)
        except DimensionError:
            return None

    def is_static(self, value: object) -> bool:
        """A value is baked into a shader when it depends on no dynamic symbol."""
        return not isinstance(value, SymDim) or value.symbols <= self.static

    def data_symbol(self, hint: str, bound: Dim | None) -> SymDim:
        """A symbol for a size only the data decides (NonZero's count, a fed k), set at run time.

        Its value here is `bound` (evaluated for these dims): buffers are sized for it, so the
        kernels that write before the count is read back stay in bounds. `bound` None means
        "unbounded": the runtime grows the buffers when the value read exceeds them. The name is
        derived from `hint` (the node) and is the same each time inference runs.
        """
        name = "dd_" + re.sub(r"\W", "_", hint).strip("_")
        self.data_symbols[name] = bound
        value = 1 if bound is None else self.value(bound)
        self.dims[name] = max(int(value if value is not None else 1), 0)
        return SymDim.symbol(name)

    def assume_equal(self, a: Dim, b: Dim, node: str) -> bool:
        """Whether `a` and `b` are one dim for this compilation.

        Identical dims are. Otherwise a symbol is as good as a literal once its value is known:
        when both sides evaluate to the same value, the equality is recorded (with `node`, which
        needed it) so the runtime rejects dims that break it instead of computing garbage.
        """
        if a == b:
            return True
        if self.placeholders & (dim_symbols(a) | dim_symbols(b)):
            return True
        if self.data_symbols.keys() & (dim_symbols(a) | dim_symbols(b)):
            return False  # a count the data decides equals nothing but itself
        value = self.value(a)
        if value is None or value != self.value(b):
            return False
        if isinstance(a, int):  # the symbolic side first: "kv_cache_dim = 32 must be 64"
            a, b = b, a
        self.constraints.setdefault((str(a), str(b)), (a, b, node))
        return True

    def literal(self, d: Dim, node: str, what: str = "") -> int | None:
        """`d` as an int for a rule that needs a literal (a channel count, a head size, a Split
        size), or None when it has no value that can stand for one.

        A symbol with a value given at compile time (dims, InferenceSession feeds) is as good as
        a literal: its value is used and `d = value` recorded as a constraint (with `node`), so
        update_dimensions refuses another value rather than run a plan built for this one; `what`
        (the rule's words for it) is kept in `reasons`. Stand-in values (placeholders) and
        data-dependent counts never stand for a literal.
        """
        if isinstance(d, int):
            return d
        symbols = dim_symbols(d)
        if self.placeholders & symbols or self.data_symbols.keys() & symbols:
            return None
        value = self.value(d)
        if value is None:
            return None
        self.assume_equal(d, value, node)
        self.reasons.setdefault((str(d), str(value)), what)
        return value


__all__ = ["Constraint", "DimEnv"]
