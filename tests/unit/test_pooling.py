"""Pooling geometry that needs no GPU (the kernels run in tests/gpu/test_pooling.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from onyxia.ir.shapes import SymDim
from onyxia.operators.conv.window import _out_size


@settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 40), pad_b=st.integers(0, 3), pad_e=st.integers(0, 3), extent=st.integers(1, 6),
       stride=st.integers(1, 5), ceil=st.booleans())
def test_symbolic_output_size_agrees_with_integers(size, pad_b, pad_e, extent, stride, ceil):
    # The ceil-mode correction is written in // and % so that it also holds for a symbolic size.
    s = SymDim.symbol("s")
    sym = _out_size(s, pad_b + pad_e, extent, stride, pad_b, ceil)
    value = sym.evaluate({"s": size}) if isinstance(sym, SymDim) else sym
    span = size + pad_b + pad_e - extent
    expect = (-(-span // stride) if ceil else span // stride) + 1
    if ceil and (expect - 1) * stride >= size + pad_b:
        expect -= 1
    assert value == expect == _out_size(size, pad_b + pad_e, extent, stride, pad_b, ceil)
