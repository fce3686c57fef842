"""Every (shader, defs) combination the operator set emits must validate through wgpu/naga.

Table-driven: BUILDERS maps each registered (domain, op_type) to a function returning small
models that exercise it (dtype variants, attribute variants, broadcasting). Each model compiles
with a dynamic dim and with it static (constants instead of immediates), and every ShaderSpec is
rendered for both immediates transports and turned into a shader module. Adding an operator to
the registry without a row here fails `test_every_registered_operator_has_a_builder`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h

import onyxia
from onyxia.codegen.wgsl import TRANSPORTS, render
from onyxia.compiler import CompilerPipeline
from onyxia.operators import core_operator_registry
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


# ---- family builders ------------------------------------------------------------------------

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


# ---- single-op builders ----------------------------------------------------------------------

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


def _matmul() -> list[Case]:
    out = []
    # M = n: decode (n = 1) and prefill shapes, batched, broadcast batch, a long K, 1-D operands.
    out += case([h.make_node("MatMul", ["a", "w"], ["y"])], [("a", F32, ["n", 16])], ["y"],
                {"w": _vals(F32, (16, 8))}, extra_dims=[{"n": 1}, {"n": 33}])
    out += case([h.make_node("MatMul", ["a", "b"], ["y"])], [("a", F32, [2, "n", 8]), ("b", F32, [2, 8, "n"])], ["y"])
    out += case([h.make_node("MatMul", ["a", "b"], ["y"])], [("a", F32, [2, 1, "n", 8]), ("b", F32, [3, 8, 5])], ["y"])
    out += case([h.make_node("MatMul", ["a", "w"], ["y"])], [("a", F32, ["n", 1024])], ["y"],
                {"w": _vals(F32, (1024, 4))}, extra_dims=[{"n": 1}])
    # the chunked few-rows kernel split over a K longer than one invocation walks
    out += case([h.make_node("MatMul", ["a", "w"], ["y"])], [("a", F32, ["n", 20000])], ["y"],
                {"w": _vals(F32, (20000, 4))}, extra_dims=[{"n": 1}])
    out += case([h.make_node("MatMul", ["v", "b"], ["y"])], [("v", F32, [8]), ("b", F32, ["n", 8, 4])], ["y"])
    out += case([h.make_node("MatMul", ["a", "v"], ["y"])], [("a", F32, ["n", 8]), ("v", F32, [8])], ["y"])
    out += case([h.make_node("MatMul", ["a", "b"], ["y"])], [("a", I32, ["n", 8]), ("b", I32, [8, 4])], ["y"])
    return out


def _gemm() -> list[Case]:
    out = case([h.make_node("Gemm", ["a", "b", "c"], ["y"])], [("a", F32, ["n", 8])], ["y"],
               {"b": _vals(F32, (8, 4)), "c": _vals(F32, (4,))}, extra_dims=[{"n": 1}])
    out += case([h.make_node("Gemm", ["a", "b"], ["y"], transA=1, transB=1, alpha=0.5)],
                [("a", F32, [8, "n"]), ("b", F32, [4, 8])], ["y"])
    out += case([h.make_node("Gemm", ["a", "b", "c"], ["y"], beta=2.0, transB=1)],
                [("a", F32, ["n", 8]), ("b", F32, [4, 8]), ("c", F32, ["n", 1])], ["y"])
    return out


def _gather() -> list[Case]:
    out = []
    for dt in (F32, I64):
        out += case([h.make_node("Gather", ["d", "i"], ["y"], axis=0)], [("d", dt, [10, 4]), ("i", I64, ["n"])], ["y"])
        out += case([h.make_node("Gather", ["d", "i"], ["y"], axis=1)], [("d", dt, ["n", 6, 3]), ("i", I32, [2, 2])],
                    ["y"])
    out += case([h.make_node("Gather", ["d", "i"], ["y"], axis=-1)], [("d", F32, ["n", 6])], ["y"],
                {"i": np.array(-1, I64)})
    return out


def _gather_elements() -> list[Case]:
    out = []
    for axis in (0, 1):
        out += case([h.make_node("GatherElements", ["d", "i"], ["y"], axis=axis)],
                    [("d", F32, ["n", 4]), ("i", I64, ["n", 2])], ["y"])
    return out


def _gather_nd() -> list[Case]:
    out = case([h.make_node("GatherND", ["d", "i"], ["y"])], [("d", F32, ["n", 4, 3]), ("i", I64, [2, 2])], ["y"])
    out += case([h.make_node("GatherND", ["d", "i"], ["y"], batch_dims=1)],
                [("d", F32, ["n", 4, 3]), ("i", I64, ["n", 2, 1])], ["y"])
    return out


def _scatter(op: str, opset: int = 18, reductions=("none",)) -> Builder:
    def build() -> list[Case]:
        out = []
        for red in reductions:
            attrs = {} if red == "none" else {"reduction": red}
            for axis in (0, 1):
                out += case([h.make_node(op, ["d", "i", "u"], ["y"], axis=axis, **attrs)],
                            [("d", F32, ["n", 4]), ("i", I64, [1, 2]), ("u", F32, [1, 2])], ["y"], opset=opset)
        return out
    return build


def _scatter_nd() -> list[Case]:
    out = []
    for red in ("none", "add", "mul", "max", "min"):
        attrs = {} if red == "none" else {"reduction": red}
        out += case([h.make_node("ScatterND", ["d", "i", "u"], ["y"], **attrs)],
                    [("d", F32, ["n", 4]), ("i", I64, [2, 1]), ("u", F32, [2, 4])], ["y"])
    return out


def _slice() -> list[Case]:
    out = []
    for starts, ends, axes, steps in (([1], [6], [1], [2]), ([-1], [-100], [1], [-1]), ([0, 1], [2, 4], [0, 1], None)):
        inits = {"s": np.array(starts, I64), "e": np.array(ends, I64), "a": np.array(axes, I64)}
        ins = ["x", "s", "e", "a"]
        if steps is not None:
            inits["st"] = np.array(steps, I64)
            ins.append("st")
        out += case([h.make_node("Slice", ins, ["y"])], [("x", F32, ["n", 8])], ["y"], inits)
    return out


def _trilu() -> list[Case]:
    out = []
    for upper in (0, 1):
        out += case([h.make_node("Trilu", ["x"], ["y"], upper=upper)], [("x", F32, ["n", 4])], ["y"])
        out += case([h.make_node("Trilu", ["x", "k"], ["y"], upper=upper)], [("x", F32, [2, "n", 4])], ["y"],
                    {"k": np.array(1, I64)})
    return out


def _layer_norm() -> list[Case]:
    out = case([h.make_node("LayerNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)], [("x", F32, ["n", 8])],
               ["y"], {"s": _vals(F32, (8,)), "b": _vals(F32, (8,))})
    out += case([h.make_node("LayerNormalization", ["x", "s"], ["y", "mean", "inv"], axis=1)],
                [("x", F32, ["n", 2, 4])], ["y", "mean", "inv"], {"s": _vals(F32, (2, 4))})
    return out


def _rms_norm() -> list[Case]:
    out = case([h.make_node("RMSNormalization", ["x", "s"], ["y"], epsilon=1e-6)], [("x", F32, ["n", 8])], ["y"],
               {"s": _vals(F32, (8,))}, opset=23)
    out += case([h.make_node("RMSNormalization", ["x", "s"], ["y"], axis=1)], [("x", F32, ["n", 2, 4])], ["y"],
                {"s": _vals(F32, (2, 4))}, opset=23)
    return out


def _simplified_ln(domain: str) -> Builder:
    def build() -> list[Case]:
        return case([h.make_node("SimplifiedLayerNormalization", ["x", "s"], ["y"], domain=domain, epsilon=1e-6)],
                    [("x", F32, ["n", 8])], ["y"], {"s": _vals(F32, (8,))}, ms=bool(domain))
    return build


def _skip_ln(op: str, with_beta: bool) -> Builder:
    def build() -> list[Case]:
        inits = {"g": _vals(F32, (8,)), "bias": _vals(F32, (8,), 1)}
        ins = ["x", "skip", "g"]
        if with_beta:
            inits["beta"] = _vals(F32, (8,), 2)
        full = [*ins, "beta" if with_beta else "", "bias"]
        io = [("x", F32, [2, "n", 8]), ("skip", F32, [2, "n", 8])]
        out = case([h.make_node(op, ins, ["y"], domain=MS, epsilon=1e-5)], io, ["y"], inits, ms=True)
        out += case([h.make_node(op, full if with_beta else [*ins, "bias"], ["y", "", "", "sum"], domain=MS)],
                    io, ["y", "sum"], inits, ms=True)
        return out
    return build


def _constant() -> list[Case]:
    return case([h.make_node("Constant", [], ["c"], value=h.make_tensor("v", TensorProto.FLOAT, [2], [1, 2])),
                 h.make_node("Add", ["x", "c"], ["y"])], [("x", F32, ["n", 2])], ["y"])


def _shape_chain(extra_nodes, extra_inits, inputs=None, outputs=("y",)) -> list[Case]:
    return case([h.make_node("Shape", ["x"], ["s"]), *extra_nodes], inputs or [("x", F32, ["n", 4])], list(outputs),
                extra_inits)


def _constant_of_shape() -> list[Case]:
    out = _shape_chain([h.make_node("ConstantOfShape", ["s"], ["y"],
                                                       value=h.make_tensor("v", TensorProto.FLOAT, [1], [1.5]))], {})
    out += _shape_chain([h.make_node("ConstantOfShape", ["s"], ["y"],
                                                        value=h.make_tensor("v", TensorProto.INT64, [1], [7]))], {})
    return out


def _expand() -> list[Case]:
    out = _shape_chain([h.make_node("Expand", ["row", "s"], ["y"])], {},
                       [("x", F32, ["n", 4]), ("row", F32, [1, 4])])
    out += case([h.make_node("Expand", ["x", "shape"], ["y"])], [("x", I64, ["n", 1])], ["y"],
                {"shape": np.array([2, 1, 3], I64)})
    return out


def _range() -> list[Case]:
    nodes = [h.make_node("Gather", ["s", "zero"], ["n0"], axis=0),
             h.make_node("Range", ["start", "n0", "delta"], ["y"])]
    out = _shape_chain(nodes, {"zero": np.array(0, I64), "start": np.array(0, I64), "delta": np.array(1, I64)})
    out += case([h.make_node("Range", ["a", "b", "c"], ["y"])], [("x", F32, ["n"])], ["y", "x"],
                {"a": np.float32(0), "b": np.float32(3), "c": np.float32(0.5)})
    return out


def _tile() -> list[Case]:
    out = case([h.make_node("Tile", ["x", "r"], ["y"])], [("x", F32, ["n", 4])], ["y"], {"r": np.array([2, 3], I64)})
    out += case([h.make_node("Tile", ["x", "r"], ["y"])], [("x", I64, ["n", 4])], ["y"], {"r": np.array([1, 2], I64)})
    return out


def _rotary() -> list[Case]:
    half = 4
    cache = {"cos": _vals(F32, (32, half)), "sin": _vals(F32, (32, half), 1)}
    out = []
    for interleaved in (0, 1):
        out += case([h.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS,
                                 interleaved=interleaved, num_heads=2)],
                    [("x", F32, [1, "n", 16]), ("pos", I64, [1, "n"])], ["y"], cache, ms=True)
        out += case([h.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS,
                                 interleaved=interleaved)],
                    [("x", F32, [1, 2, "n", 8]), ("pos", I64, [1])], ["y"], cache, ms=True)
    return out


def _gqa() -> list[Case]:
    heads, kv, d = 4, 2, 8
    ins = [("q", F32, [1, "n", heads * d]), ("k", F32, [1, "n", kv * d]), ("v", F32, [1, "n", kv * d]),
           ("pk", F32, [1, kv, "past", d]), ("pv", F32, [1, kv, "past", d]), ("seqlens", I32, [1]),
           ("total", I32, [1])]
    dims = {"n": 3, "past": 5}
    outs = ["out", "present_k", "present_v"]
    names = ["q", "k", "v", "pk", "pv", "seqlens", "total"]
    out = case([h.make_node("GroupQueryAttention", names, outs, domain=MS, num_heads=heads, kv_num_heads=kv)],
               ins, outs, ms=True, dims=dims)
    out += case([h.make_node("GroupQueryAttention", names, outs, domain=MS, num_heads=heads, kv_num_heads=kv,
                             local_window_size=4, softcap=30.0, scale=0.1)], ins, outs, ms=True, dims=dims)
    cache = {"cos": _vals(F32, (32, d // 2)), "sin": _vals(F32, (32, d // 2), 1)}
    for interleaved in (0, 1):
        out += case([h.make_node("GroupQueryAttention", [*names, "cos", "sin"], outs, domain=MS, num_heads=heads,
                                 kv_num_heads=kv, do_rotary=1, rotary_interleaved=interleaved)],
                    ins, outs, cache, ms=True, dims=dims)
    packed = [("qkv", F32, [1, "n", (heads + 2 * kv) * d]), *ins[3:]]
    out += case([h.make_node("GroupQueryAttention", ["qkv", "", "", "pk", "pv", "seqlens", "total"], outs, domain=MS,
                             num_heads=heads, kv_num_heads=kv)], packed, outs, ms=True, dims=dims)
    # q/k-norm inside GQA (Qwen3 for WebGPU), with rotary
    norms = {**cache, "qn_w": _vals(F32, (d,)), "kn_w": _vals(F32, (d,), 1)}
    out += case([h.make_node("GroupQueryAttention", ["qkv", "", "", "pk", "pv", "seqlens", "total", "cos", "sin",
                                                     "", "", "", "", "", "qn_w", "kn_w"], outs, domain=MS,
                             num_heads=heads, kv_num_heads=kv, do_rotary=1, qk_norm_epsilon=1e-6)],
                packed, outs, norms, ms=True, dims=dims)
    for c in out:
        c.static_variants = ((), ("n", "past"))
    # window-sized caches (sliding_window_cache = 1): capacity 8 >= window 4
    windowed = [*ins[:3], ("pk", F32, [1, kv, 8, d]), ("pv", F32, [1, kv, 8, d]), *ins[5:]]
    out += case([h.make_node("GroupQueryAttention", [*names, "cos", "sin"], outs, domain=MS, num_heads=heads,
                             kv_num_heads=kv, do_rotary=1, local_window_size=4, sliding_window_cache=1)],
                windowed, outs, cache, ms=True, dims={"n": 3})
    return out


def _cast_like() -> list[Case]:
    out = []
    for src, dst in ((F32, I64), (I64, F32), (F32, BOOL), (F32, F16)):
        out += case([h.make_node("CastLike", ["x", "t"], ["y"])], [("x", src, ["n", 4]), ("t", dst, [1])], ["y"])
    return out


def _concat() -> list[Case]:
    out = []
    for dt in (F32, I64):
        out += case([h.make_node("Concat", ["a", "b", "c"], ["y"], axis=0)],
                    [("a", dt, ["n", 4]), ("b", dt, [2, 4]), ("c", dt, ["n", 4])], ["y"])
        out += case([h.make_node("Concat", ["a", "b"], ["y"], axis=-1)], [("a", dt, ["n", 3]), ("b", dt, ["n", 5])],
                    ["y"])
    return out


def _dropout() -> list[Case]:
    out = case([h.make_node("Dropout", ["x"], ["y"])], [("x", F32, ["n", 4])], ["y"])
    out += case([h.make_node("Dropout", ["x", "r"], ["y", "mask"])], [("x", F32, ["n", 4])], ["y", "mask"],
                {"r": np.float32(0.3)})
    return out


def _flatten() -> list[Case]:
    out = []
    for axis in (0, 1, 2, -1):
        out += case([h.make_node("Flatten", ["x"], ["y"], axis=axis), h.make_node("Neg", ["y"], ["z"])],
                    [("x", F32, ["n", 3, 4])], ["z"])
    return out


def _pad() -> list[Case]:
    out = []
    for mode in ("constant", "reflect", "edge", "wrap"):
        out += case([h.make_node("Pad", ["x", "p"], ["y"], mode=mode)], [("x", F32, ["n", 5])], ["y"],
                    {"p": np.array([0, 2, 1, 3], I64)}, opset=19)
    out += case([h.make_node("Pad", ["x", "p", "v", "axes"], ["y"])], [("x", I64, ["n", 5])], ["y"],
                {"p": np.array([1, 1], I64), "v": np.array(7, I64), "axes": np.array([1], I64)})
    out += case([h.make_node("Pad", ["x", "p"], ["y"])], [("x", F32, ["n", 6])], ["y"],
                {"p": np.array([0, -1, 0, -2], I64)})
    return out


def _size() -> list[Case]:
    return case([h.make_node("Size", ["x"], ["s"]), h.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
                 h.make_node("Mul", ["x", "sf"], ["y"])], [("x", F32, ["n", 4])], ["y", "s"])


def _split() -> list[Case]:
    out = case([h.make_node("Split", ["x", "sp"], ["a", "b"], axis=1)], [("x", F32, ["n", 4])], ["a", "b"],
               {"sp": np.array([1, 3], I64)})
    out += case([h.make_node("Split", ["x"], ["a", "b", "c"], axis=-1, num_outputs=3)], [("x", I64, ["n", 2, 6])],
                ["a", "b", "c"])
    out += case([h.make_node("Split", ["x", "sp"], ["a", "b"], axis=0)], [("x", F32, [5, "n"])], ["a", "b"],
                {"sp": np.array([2, 3], I64)})
    return out


def _squeeze() -> list[Case]:
    out = case([h.make_node("Squeeze", ["x", "a"], ["y"]), h.make_node("Neg", ["y"], ["z"])],
               [("x", F32, ["n", 1, 4])], ["z"], {"a": np.array([1], I64)})
    out += case([h.make_node("Squeeze", ["x"], ["y"]), h.make_node("Neg", ["y"], ["z"])], [("x", F32, [1, "n", 1])],
                ["z"])
    return out


def _transpose() -> list[Case]:
    out = []
    for dt in (F32, I64):
        out += case([h.make_node("Transpose", ["x"], ["y"], perm=[1, 0])], [("x", dt, ["n", 4])], ["y"])
    out += case([h.make_node("Transpose", ["x"], ["y"], perm=[2, 0, 1])], [("x", F32, ["n", 3, 4])], ["y"])
    out += case([h.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1, 3])], [("x", F32, [2, "n", 3, 4])], ["y"])
    out += case([h.make_node("Transpose", ["x"], ["y"])], [("x", F32, ["n", 3, 4])], ["y"])
    return out


def _matmul_nbits() -> list[Case]:
    k, n, block = 64, 8, 32
    nblk = k // block
    rng = np.random.default_rng(0)
    inits = {"B": rng.integers(0, 256, (n, nblk, block // 2)).astype(U8),
             "scales": rng.random(n * nblk).astype(F32),
             "zp": rng.integers(0, 256, n * ((nblk + 1) // 2)).astype(U8),
             "bias": rng.random(n).astype(F32)}
    attrs = {"K": k, "N": n, "bits": 4, "block_size": block}
    out = case([h.make_node("MatMulNBits", ["a", "B", "scales"], ["y"], domain=MS, **attrs)],
               [("a", F32, [1, "n", k])], ["y"], inits, ms=True, extra_dims=[{"n": 1}])
    out += case([h.make_node("MatMulNBits", ["a", "B", "scales", "zp", "", "bias"], ["y"], domain=MS, **attrs)],
                [("a", F32, ["n", k])], ["y"], inits, ms=True, extra_dims=[{"n": 1}])
    # accuracy_level 4: int8 activations (quantize_q8 + matmul_nbits_q8 with dot4I8Packed)
    out += case([h.make_node("MatMulNBits", ["a", "B", "scales", "zp", "", "bias"], ["y"], domain=MS,
                             accuracy_level=4, **attrs)], [("a", F32, ["n", k])], ["y"], inits, ms=True)
    return out


def _gather_block_quantized() -> list[Case]:
    rows, cols, block = 10, 64, 32
    rng = np.random.default_rng(0)
    inits = {"data": rng.integers(0, 256, (rows, cols // 2)).astype(U8),
             "scales": rng.random((rows, cols // block)).astype(F32),
             "zp": rng.integers(0, 256, (rows, (cols // block + 1) // 2)).astype(U8)}
    attrs = {"block_size": block, "gather_axis": 0, "quantize_axis": 1}
    out = case([h.make_node("GatherBlockQuantized", ["data", "ids", "scales"], ["y"], domain=MS, **attrs)],
               [("ids", I64, [1, "n"])], ["y"], inits, ms=True)
    out += case([h.make_node("GatherBlockQuantized", ["data", "ids", "scales", "zp"], ["y"], domain=MS, **attrs)],
                [("ids", I32, ["n"])], ["y"], inits, ms=True)
    return out


# ---- the table ----------------------------------------------------------------------------

FLOAT_UNARY = ["Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Cos", "Cosh", "Erf", "Exp",
               "Floor", "Log", "Neg", "Reciprocal", "Relu", "Round", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus",
               "Softsign", "Sqrt", "Tan", "Tanh", "Mish", "HardSwish", "IsNaN", "IsInf", "Identity", "Selu",
               "ThresholdedRelu", "Shrink"]
SIGNED_UNARY = {"Abs", "Neg", "Sign", "Relu"}

def _fused() -> list[Case]:
    """A chain the default ElementwiseFusionPass merges into one FusedElementwise node: broadcast
    inputs, attribute params from two members (renamed apart) and a value used twice."""
    nodes = [h.make_node("Add", ["x", "b"], ["t0"]), h.make_node("LeakyRelu", ["t0"], ["t1"], alpha=0.1),
             h.make_node("Mul", ["t1", "t0"], ["t2"]), h.make_node("LeakyRelu", ["t2"], ["t3"], alpha=0.3),
             h.make_node("Sigmoid", ["t3"], ["y"])]
    return case(nodes, [("x", F32, ["n", 4]), ("b", F32, [4])], ["y"])


def _from(module: str, *ops: str) -> Builder:
    """Rows for ops whose own test module lists validation models (model, dims) covering them."""
    def build() -> list[Case]:
        import importlib

        models = importlib.import_module(f"tests.gpu.{module}").validation_models()
        cases = [Case(m, d, ((), tuple(d)) if d else ((),)) for m, d in models
                 if not ops or any(n.op_type in ops for n in m.graph.node)]
        assert cases, f"{module}.validation_models() has no model using {ops}"
        return cases
    return build


BUILDERS: dict[tuple[str, str], Builder] = {
    **{("", op): unary(op, F32, I64, I32) if op in SIGNED_UNARY else unary(op, F32) for op in FLOAT_UNARY},
    ("", "Celu"): unary("Celu", F32, alpha=0.7),
    ("", "Swish"): unary("Swish", F32, opset=24, alpha=0.5),
    ("", "Elu"): unary("Elu", F32, alpha=0.7),
    ("", "HardSigmoid"): unary("HardSigmoid", F32, alpha=0.3, beta=0.4),
    ("", "LeakyRelu"): unary("LeakyRelu", F32, alpha=0.05),
    ("", "Not"): unary("Not", BOOL),
    ("", "BitwiseNot"): unary("BitwiseNot", I32, U8, I64),
    ("", "Gelu"): _gelu,
    ("", "Clip"): _clip,
    ("", "Cast"): _cast,
    **{("", op): binary(op, F32, I64, I32) for op in ("Add", "Sub", "Mul", "Div")},
    ("", "Pow"): binary("Pow", F32),
    ("", "PRelu"): binary("PRelu", F32, I64, I32, U32),
    ("", "Mod"): _mod,
    ("", "BitShift"): _bitshift,
    **{("", op): binary(op, I32, U8, I64) for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor")},
    **{("", op): binary(op, BOOL) for op in ("And", "Or", "Xor")},
    **{("", op): binary(op, F32, I64, BOOL if op == "Equal" else F32)
       for op in ("Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual")},
    **{("", op): variadic(op, F32, I64) for op in ("Max", "Min")},
    **{("", op): variadic(op, F32) for op in ("Sum", "Mean")},
    ("", "Where"): _where,
    **{("", op): reduce(op, F32) for op in ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMean",
                                            "ReduceSumSquare")},
    **{("", op): reduce(op, F32, I64) for op in ("ReduceMax", "ReduceMin", "ReduceProd", "ReduceSum")},
    ("", "ArgMax"): arg_reduce("ArgMax"),
    ("", "ArgMin"): arg_reduce("ArgMin"),
    ("", "CumSum"): _cumsum,
    ("", "CumProd"): _cumprod,
    ("", "Softmax"): softmax("Softmax"),
    ("", "LogSoftmax"): softmax("LogSoftmax"),
    ("", "LayerNormalization"): _layer_norm,
    ("", "SimplifiedLayerNormalization"): _simplified_ln(""),
    ("", "RMSNormalization"): _rms_norm,
    (MS, "SimplifiedLayerNormalization"): _simplified_ln(MS),
    (MS, "SkipLayerNormalization"): _skip_ln("SkipLayerNormalization", with_beta=True),
    (MS, "SkipSimplifiedLayerNormalization"): _skip_ln("SkipSimplifiedLayerNormalization", with_beta=False),
    ("", "MatMul"): _matmul,
    ("", "Gemm"): _gemm,
    ("", "Gather"): _gather,
    ("", "GatherElements"): _gather_elements,
    ("", "GatherND"): _gather_nd,
    ("", "Scatter"): _scatter("Scatter", opset=10),
    ("", "ScatterElements"): _scatter("ScatterElements", reductions=("none", "add", "mul", "max", "min")),
    ("", "ScatterND"): _scatter_nd,
    ("", "Slice"): _slice,
    ("", "Trilu"): _trilu,
    ("", "Reshape"): lambda: case([h.make_node("Reshape", ["x", "s"], ["y"])], [("x", F32, ["n", 4])], ["y"],
                                  {"s": np.array([-1], I64)}),
    ("", "Unsqueeze"): lambda: case([h.make_node("Unsqueeze", ["x", "a"], ["y"])], [("x", F32, ["n", 4])], ["y"],
                                    {"a": np.array([0, -1], I64)}),
    ("", "Shape"): lambda: _shape_chain([], {}, outputs=("s",)),
    ("", "Constant"): _constant,
    ("", "ConstantOfShape"): _constant_of_shape,
    ("", "Expand"): _expand,
    ("", "Range"): _range,
    ("", "Tile"): _tile,
    ("", "CastLike"): _cast_like,
    ("", "Concat"): _concat,
    ("", "Dropout"): _dropout,
    ("", "Flatten"): _flatten,
    ("", "Pad"): _pad,
    ("", "Size"): _size,
    ("", "Split"): _split,
    ("", "Squeeze"): _squeeze,
    ("", "Transpose"): _transpose,
    (MS, "MatMulNBits"): _matmul_nbits,
    (MS, "GatherBlockQuantized"): _gather_block_quantized,
    (MS, "MatMulBnb4"): _from("test_quantized", "MatMulBnb4"),
    (MS, "RotaryEmbedding"): _rotary,
    (MS, "GroupQueryAttention"): _gqa,
    ("onyxia", "FusedElementwise"): _fused,
    # Made by SharedQuantizationPass / EpilogueFusionPass from MatMulNBits graphs.
    ("onyxia", "QuantizeQ8"): _from("test_quantize_sharing"),
    ("onyxia", "RmsNormQ8"): _from("test_quantize_sharing"),
    ("onyxia", "MatMulNBitsShared"): lambda: _from("test_quantize_sharing")() + _from("test_epilogue_fusion")(),
    ("onyxia", "MatMulEpilogue"): _from("test_matmul_epilogue", "MatMul"),
    ("onyxia", "GemmEpilogue"): _from("test_matmul_epilogue", "Gemm"),
    ("", "Attention"): _from("test_onnx_attention"),
    ("", "TopK"): _from("test_selection", "TopK"),
    ("", "Hardmax"): _from("test_selection", "Hardmax"),
    ("", "OneHot"): _from("test_selection", "OneHot"),
    ("", "If"): _from("test_control_flow", "If"),
    ("", "Loop"): _from("test_control_flow", "Loop"),
    ("", "Scan"): _from("test_control_flow", "Scan"),
    ("", "LinearAttention"): _from("test_control_flow", "LinearAttention"),
    ("", "RNN"): _from("test_recurrent", "RNN"),
    ("", "GRU"): _from("test_recurrent", "GRU"),
    ("", "LSTM"): _from("test_recurrent", "LSTM"),
    ("", "SequenceConstruct"): _from("test_sequences", "SequenceConstruct"),
    ("", "SequenceEmpty"): _from("test_sequences", "SequenceEmpty"),
    ("", "SequenceInsert"): _from("test_sequences", "SequenceInsert"),
    ("", "SequenceErase"): _from("test_sequences", "SequenceErase"),
    ("", "SequenceAt"): _from("test_sequences", "SequenceAt"),
    ("", "SequenceLength"): _from("test_sequences", "SequenceLength"),
    ("", "SplitToSequence"): _from("test_sequences", "SplitToSequence"),
    ("", "ConcatFromSequence"): _from("test_sequences", "ConcatFromSequence"),
    ("", "SequenceMap"): _from("test_sequences", "SequenceMap"),
    ("", "Optional"): _from("test_sequences", "Optional"),
    ("", "OptionalHasElement"): _from("test_sequences", "OptionalHasElement"),
    ("", "OptionalGetElement"): _from("test_sequences", "OptionalGetElement"),
    ("", "NonZero"): _from("test_datadep", "NonZero"),
    ("", "Compress"): _from("test_datadep", "Compress"),
    ("", "Unique"): _from("test_datadep", "Unique"),
    ("", "NonMaxSuppression"): _from("test_datadep", "NonMaxSuppression"),
    ("", "Einsum"): _from("test_linalg"),
    ("", "DFT"): _from("test_spectral", "DFT"),
    ("", "RoiAlign"): _from("test_roi", "RoiAlign"),
    ("", "MaxRoiPool"): _from("test_roi", "MaxRoiPool"),
    ("", "DeformConv"): _from("test_deform_conv", "DeformConv"),
    ("", "STFT"): _from("test_spectral", "STFT"),
    ("", "Conv"): _from("test_conv", "Conv"),
    ("", "ConvTranspose"): _from("test_conv", "ConvTranspose"),
    ("", "CausalConvWithState"): _from("test_conv", "CausalConvWithState"),
    ("", "AveragePool"): _from("test_pooling", "AveragePool"),
    ("", "GlobalAveragePool"): _from("test_pooling", "GlobalAveragePool"),
    ("", "GlobalLpPool"): _from("test_pooling", "GlobalLpPool"),
    ("", "GlobalMaxPool"): _from("test_pooling", "GlobalMaxPool"),
    ("", "LpPool"): _from("test_pooling", "LpPool"),
    ("", "MaxPool"): _from("test_pooling", "MaxPool"),
    ("", "MaxUnpool"): _from("test_pooling", "MaxUnpool"),
    ("", "AffineGrid"): _from("test_image", "AffineGrid"),
    ("", "DepthToSpace"): _from("test_image", "DepthToSpace"),
    ("", "GridSample"): _from("test_image", "GridSample"),
    ("", "Resize"): _from("test_image", "Resize"),
    ("", "SpaceToDepth"): _from("test_image", "SpaceToDepth"),
    ("", "Upsample"): _from("test_image", "Upsample"),
    ("", "BatchNormalization"): _from("test_normalization_extra", "BatchNormalization"),
    ("", "GroupNormalization"): _from("test_normalization_extra", "GroupNormalization"),
    ("", "InstanceNormalization"): _from("test_normalization_extra", "InstanceNormalization"),
    ("", "LpNormalization"): _from("test_normalization_extra", "LpNormalization"),
    ("", "MeanVarianceNormalization"): _from("test_normalization_extra", "MeanVarianceNormalization"),
    **{(d, op): _from("test_functions", op) for d, op in (
        ("", "NegativeLogLikelihoodLoss"), ("", "SoftmaxCrossEntropyLoss"), ("", "HannWindow"), ("", "HammingWindow"),
        ("", "BlackmanWindow"), ("", "CenterCropPad"), ("", "RotaryEmbedding"), ("", "SwiGLU"),
        ("ai.onnx.preview", "FlexAttention"))},
    **{("", op): _from("test_generators", op) for op in (
        "EyeLike", "RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli", "BitCast")},
    **{(d, op): _from("test_qlinear", op) for d, op in (
        ("", "MatMulInteger"), ("", "QLinearMatMul"), ("", "ConvInteger"), ("", "QLinearConv"),
        ("", "DynamicQuantizeLinear"), (MS, "QLinearConv"),
        (MS, "MatMulIntegerToFloat"), (MS, "DynamicQuantizeMatMul"), (MS, "QGemm"), (MS, "QLinearAdd"),
        (MS, "QLinearMul"), (MS, "QLinearSigmoid"), (MS, "QLinearLeakyRelu"), (MS, "QLinearSoftmax"),
        (MS, "QLinearAveragePool"), (MS, "QLinearGlobalAveragePool"), (MS, "QLinearConcat"))},
    **{("", op): _from("test_small_ops", op) for op in (
        "ReverseSequence", "TensorScatter", "LRN", "Col2Im", "Det", "Multinomial", "MelWeightMatrix")},
    **{(d, op): _from("test_storage", op) for d in ("", MS) for op in ("QuantizeLinear", "DequantizeLinear")},
}
# Rows for ops not (yet) in the registry are harmless: only registered ops are exercised.


def registered_ops() -> list[tuple[str, str]]:
    return sorted(core_operator_registry())


# Rendered WGSL already validated in this session: many ops share kernels and defs.
_validated: set[str] = set()


def _subgroup_renders(runtime) -> tuple[bool, ...]:
    return (False, True) if "subgroup" in runtime.features else (False,)


def _wide_renders(runtime) -> tuple[bool, ...]:
    return (False, True) if "shader-int64" in runtime.features else (False,)


@pytest.mark.parametrize("key", [k for k in registered_ops() if k in BUILDERS],
                         ids=lambda k: f"{k[0]}::{k[1]}" if k[0] else k[1])
def test_operator_shaders_validate(runtime, key):
    registry = core_operator_registry()
    pipeline = CompilerPipeline(registry)
    cases = BUILDERS[key]()
    assert cases, f"the builder for {key} made no models"
    for index, c in enumerate(cases):
        graph = onyxia.load_model(c.model)
        for static in c.static_variants:
            where = f"{key[1]} case {index} (dims {c.dims}, static {list(static)})"
            try:
                compiled = pipeline.compile(graph, c.dims, static=static)
            except Exception as exc:  # noqa: BLE001 - report which case broke
                raise AssertionError(f"{where}: compile failed: {type(exc).__name__}: {exc}") from exc
            for spec in compiled.shaders:
                # with and without ONYXIA_SUBGROUPS where the adapter has subgroups, and 64-bit
                # reads where it has shader-int64 (identical text for a kernel that does not use
                # them: validated once)
                for transport, subgroups, wide in itertools.product(TRANSPORTS, _subgroup_renders(runtime),
                                                                    _wide_renders(runtime)):
                    code = render(spec, compiled.templates[spec.template], compiled.dims, transport,
                                  subgroups=subgroups, wide_reads=wide)
                    if code in _validated:
                        continue
                    try:
                        runtime.device.create_shader_module(label=spec.label, code=code)
                    except Exception as exc:  # noqa: BLE001 - naga's message says what is wrong
                        raise AssertionError(f"{where}: shader '{spec.label}' ({transport}, subgroups "
                                             f"{subgroups}, wide reads {wide}) is invalid with defs "
                                             f"{dict(spec.defs)}:\n{exc}") from exc
                    _validated.add(code)
