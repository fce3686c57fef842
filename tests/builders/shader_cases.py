"""The shader validation table's foundations (tests/builders/shader_table.py): the Case record, the
family builders (unary, binary, reductions...) and the elementwise single-op builders."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h

from tests.helpers import make_model

F32, F16, I64, I32, U8, U32, BOOL = np.float32, np.float16, np.int64, np.int32, np.uint8, np.uint32, np.bool_


MS = "com.microsoft"


@dataclass
class Case:
    model: onnx.ModelProto
    dims: dict[str, int] = field(default_factory=lambda: {"n": 3})
    # Also compile with these symbols static: baked constants take the place of immediates.
    static_variants: tuple[tuple[str, ...], ...] = ((), ("n",))


Builder = Callable[[], list[Case]]


def case(nodes, inputs, outputs, inits=None, *, opset=18, ms=False, dims=None, extra_dims=()) -> list[Case]:
    model = make_model(nodes, inputs, outputs, inits, opset=opset, extra_opsets={MS: 1} if ms else None)
    cases = [Case(model, dims or {"n": 3})]
    cases += [Case(model, d) for d in extra_dims]
    return cases


def _vals(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 3, shape).astype(dtype)
    return rng.random(shape).astype(dtype)


def unary(op: str, *dtypes, opset: int = 18, **attrs) -> Builder:
    def build() -> list[Case]:
        out = []
        for dt in dtypes or (F32,):
            out += case([h.make_node(op, ["x"], ["y"], **attrs)], [("x", dt, ["n", 4])], ["y"], opset=opset)
        return out
    return build


def binary(op: str, *dtypes, b_dtype=None, opset: int = 18, **attrs) -> Builder:
    """Same-shape and broadcast variants for each dtype."""
    def build() -> list[Case]:
        out = []
        for dt in dtypes or (F32,):
            bt = b_dtype or dt
            out += case([h.make_node(op, ["a", "b"], ["y"], **attrs)], [("a", dt, ["n", 4]), ("b", bt, ["n", 4])],
                        ["y"], opset=opset)
            out += case([h.make_node(op, ["a", "b"], ["y"], **attrs)], [("a", dt, ["n", 1, 4]), ("b", bt, [3, 1])],
                        ["y"], opset=opset)
        return out
    return build


def variadic(op: str, *dtypes) -> Builder:
    def build() -> list[Case]:
        out = []
        for dt in dtypes or (F32,):
            for k in (1, 2, 3):
                names = [f"x{i}" for i in range(k)]
                shapes = [["n", 4], [4], ["n", 1]][:k]
                out += case([h.make_node(op, names, ["y"])], [(nm, dt, s) for nm, s in zip(names, shapes)], ["y"])
        return out
    return build


def reduce(op: str, *dtypes, axes_input: bool = True) -> Builder:
    def build() -> list[Case]:
        out = []
        for dt in dtypes or (F32,):
            for axes, keepdims in (([1], 1), ([-1], 0), ([0, 2], 1), (None, 0)):
                inits, ins, attrs = {}, ["x"], {"keepdims": keepdims}
                if axes is not None and axes_input:
                    inits["axes"] = np.array(axes, I64)
                    ins.append("axes")
                elif axes is not None:
                    attrs["axes"] = axes
                out += case([h.make_node(op, ins, ["y"], **attrs)], [("x", dt, ["n", 4, 5])], ["y"], inits)
        return out
    return build


def arg_reduce(op: str) -> Builder:
    def build() -> list[Case]:
        out = []
        for dt in (F32, I64):
            for attrs in ({"axis": 1, "keepdims": 1}, {"axis": -1, "keepdims": 0, "select_last_index": 1},
                          {"axis": 0, "keepdims": 1}):
                out += case([h.make_node(op, ["x"], ["y"], **attrs)], [("x", dt, ["n", 4, 5])], ["y"])
        return out
    return build


def softmax(op: str) -> Builder:
    def build() -> list[Case]:
        out = []
        for axis in (-1, 1, 0):
            out += case([h.make_node(op, ["x"], ["y"], axis=axis)], [("x", F32, ["n", 4, 6])], ["y"])
        out += case([h.make_node(op, ["x"], ["y"], axis=1)], [("x", F32, ["n", 6])], ["y"], opset=11)
        return out
    return build


def _clip() -> list[Case]:
    out = case([h.make_node("Clip", ["x", "lo", "hi"], ["y"])], [("x", F32, ["n", 4])], ["y"],
               {"lo": np.float32(-0.5), "hi": np.float32(0.5)})
    out += case([h.make_node("Clip", ["x", "", "hi"], ["y"])], [("x", F32, ["n", 4])], ["y"], {"hi": np.float32(0.5)})
    out += case([h.make_node("Clip", ["x"], ["y"])], [("x", F32, ["n", 4])], ["y"])
    out += case([h.make_node("Clip", ["x", "lo", "hi"], ["y"])], [("x", I32, ["n", 4])], ["y"],
                {"lo": np.int32(-1), "hi": np.int32(2)})
    out += case([h.make_node("Clip", ["x", "lo", "hi"], ["y"])], [("x", F32, ["n", 4]), ("lo", F32, []),
                                                                    ("hi", F32, [])], ["y"])
    return out


def _cast() -> list[Case]:
    out = []
    for src, dst in ((F32, TensorProto.INT64), (I64, TensorProto.FLOAT), (F32, TensorProto.BOOL),
                     (BOOL, TensorProto.FLOAT), (F32, TensorProto.FLOAT16), (I64, TensorProto.INT32),
                     (F32, TensorProto.UINT8), (I32, TensorProto.INT8), (U8, TensorProto.INT32),
                     (F16, TensorProto.FLOAT), (I64, TensorProto.BOOL)):
        out += case([h.make_node("Cast", ["x"], ["y"], to=dst)], [("x", src, ["n", 4])], ["y"])
    return out


def _where() -> list[Case]:
    out = []
    for dt in (F32, I64, BOOL):
        out += case([h.make_node("Where", ["c", "a", "b"], ["y"])],
                    [("c", BOOL, ["n", 4]), ("a", dt, ["n", 4]), ("b", dt, [4])], ["y"])
    return out


def _mod() -> list[Case]:
    out = case([h.make_node("Mod", ["a", "b"], ["y"], fmod=1)], [("a", F32, ["n", 4]), ("b", F32, [4])], ["y"])
    for dt in (I64, I32):
        out += case([h.make_node("Mod", ["a", "b"], ["y"], fmod=0)], [("a", dt, ["n", 4]), ("b", dt, [4])], ["y"])
        out += case([h.make_node("Mod", ["a", "b"], ["y"], fmod=1)], [("a", dt, ["n", 4]), ("b", dt, [4])], ["y"])
    return out


def _bitshift() -> list[Case]:
    out = []
    for direction in ("LEFT", "RIGHT"):
        for dt in (U32, U8):
            out += case([h.make_node("BitShift", ["a", "b"], ["y"], direction=direction)],
                        [("a", dt, ["n", 4]), ("b", dt, [4])], ["y"])
    return out


def _gelu() -> list[Case]:
    out = []
    for approximate in ("none", "tanh"):
        out += case([h.make_node("Gelu", ["x"], ["y"], approximate=approximate)], [("x", F32, ["n", 4])], ["y"],
                    opset=20)
    return out


def _cumsum() -> list[Case]:
    out = []
    for dt in (F32, I64):
        for attrs in ({}, {"exclusive": 1}, {"reverse": 1}, {"exclusive": 1, "reverse": 1}):
            for axis in (0, 1):
                out += case([h.make_node("CumSum", ["x", "axis"], ["y"], **attrs)], [("x", dt, ["n", 5])], ["y"],
                            {"axis": np.array(axis, I64)})
    return out


def _cumprod() -> list[Case]:
    out = []
    for dt in (F32, I32):
        for attrs in ({}, {"exclusive": 1, "reverse": 1}):
            out += case([h.make_node("CumProd", ["x", "axis"], ["y"], **attrs)], [("x", dt, ["n", 5])], ["y"],
                        {"axis": np.array(1, I64)}, opset=26)
    return out
