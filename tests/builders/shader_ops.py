"""The shader validation table's single-op builders (tests/builders/shader_table.py) for products,
indexing, normalization, shape and quantized operators."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx import helper as h

from tests.builders.shader_cases import (
    BOOL,
    F16,
    F32,
    I32,
    I64,
    MS,
    U8,
    Builder,
    Case,
    _vals,
    case,
)


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
