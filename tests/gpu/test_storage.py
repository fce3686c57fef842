"""Native storage on the GPU against onnx.reference: every rounding of Cast, QuantizeLinear and
DequantizeLinear bit for bit (float8 with and without saturation, float8e8m0's rounding modes,
float4, bfloat16, float16, 4/2-bit integers), data movement of packed dtypes, float16 with and
without shader-f16 (int64: tests/gpu/test_int64.py)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import onyxia
from onyxia.codegen.wgsl import render
from onyxia.ir import dtypes
from tests.builders.storage import _quant_inputs
from tests.helpers import compile_model, make_model

pytestmark = pytest.mark.gpu

FLOAT8 = ["float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz"]


def run_both(runtime, model, feeds, dims=None):
    """(onyxia's outputs, onnx.reference's outputs)."""
    exe = runtime.load_model(compile_model(model, dims))
    ours = list(exe.run(feeds).values())
    ref = ReferenceEvaluator(model).run(None, feeds)
    return ours, ref


def assert_same_bits(ours: np.ndarray, ref: np.ndarray, what: str) -> None:
    """Equal dtypes and values, every NaN where the reference has one (payloads aside)."""
    assert ours.dtype == ref.dtype and ours.shape == ref.shape, what
    a, b = ours.astype(np.float64), ref.astype(np.float64)
    nan = np.isnan(b)
    bad = np.flatnonzero((np.isnan(a) != nan) | (~nan & (a != b)))
    assert not bad.size, (f"{what}: {bad.size} differ, e.g. at {bad[:5]}: "
                          f"{ours.ravel()[bad[:5]]} vs {ref.ravel()[bad[:5]]}")
    same_sign = np.signbit(a[~nan]) == np.signbit(b[~nan])  # -0.0 is kept
    assert same_sign.all(), f"{what}: signs of zeros differ"


def float_sweep() -> np.ndarray:
    """Every float16 value and 2^16 random float32 bit patterns (rounding ties, overflow,
    subnormals of every target format included)."""
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32).view(np.float32)
    ties = np.array([464, 480, 61440, 57344, 240, 248, 5, 7, 0.25, 0.75, 1e-30, -0.0, np.inf, -np.inf], np.float32)
    return np.concatenate([halves, bits, ties])


CASTS = [(t, s) for t in [*FLOAT8, "float4e2m1", "bfloat16", "float16"] for s in (1, 0) if s or t in FLOAT8]


@pytest.mark.parametrize("target,saturate", CASTS)  # saturate applies to float8 targets only
def test_cast_from_float32_rounds_as_the_reference(runtime, target, saturate):
    x = float_sweep()
    to = dtypes.from_name(target).onnx
    model = make_model([h.make_node("Cast", ["x"], ["y"], to=to, saturate=saturate)],
                       [("x", np.float32, [x.size])], ["y"], opset=21)
    (ours,), (ref,) = run_both(runtime, model, {"x": x})
    assert_same_bits(ours, ref, f"Cast float32 -> {target} saturate={saturate}")


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_float8e8m0_rounds_as_the_reference(runtime, mode, saturate):
    x = np.abs(float_sweep())  # negative values are undefined for e8m0
    model = make_model([h.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, saturate=saturate,
                                    round_mode=mode)], [("x", np.float32, [x.size])], ["y"], opset=25)
    (ours,), (ref,) = run_both(runtime, model, {"x": x})
    assert np.array_equal(ours.view(np.uint8), ref.view(np.uint8)), f"e8m0 {mode} saturate={saturate}"


@pytest.mark.parametrize("source", [*FLOAT8, "float8e8m0", "float4e2m1", "bfloat16"])
def test_every_code_decodes_as_the_reference(runtime, source):
    dtype = dtypes.from_name(source)
    codes = np.arange(1 << dtype.bits, dtype=np.uint8)
    x = codes.view(dtype.numpy) if dtype.bits == 8 else (
        codes.astype(np.uint16).view(dtype.numpy) if dtype.bits == 16 else codes.view(dtype.numpy))
    if dtype.bits == 16:
        x = np.arange(1 << 16, dtype=np.uint16).view(dtype.numpy)
    model = make_model([h.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)],
                       [("x", dtype.numpy, [x.size])], ["y"], opset=25)
    (ours,), (ref,) = run_both(runtime, model, {"x": x})
    assert_same_bits(ours, ref, f"Cast {source} -> float32")


@pytest.mark.parametrize("target", ["int4", "uint4", "int2", "uint2", "int8", "uint8", "int16", "uint16"])
@pytest.mark.parametrize("source", [np.int32, np.float32])
def test_casts_to_narrow_integers_wrap_as_the_reference(runtime, target, source):
    rng = np.random.default_rng(1)
    x = rng.integers(-300, 300, 257).astype(source)
    if source == np.float32:
        x = x + rng.random(257).astype(np.float32) * np.sign(x)
    model = make_model([h.make_node("Cast", ["x"], ["y"], to=dtypes.from_name(target).onnx),
                        h.make_node("Cast", ["y"], ["z"], to=TensorProto.INT32)],
                       [("x", source, [x.size])], ["y", "z"], opset=25)
    ours, ref = run_both(runtime, model, {"x": x})
    for a, b, what in zip(ours, ref, ("narrow", "back to int32")):
        assert a.dtype == b.dtype and np.array_equal(a.astype(np.int64), b.astype(np.int64)), (target, what)


QUANT = ["uint8", "int8", "uint16", "int16", "uint4", "int4", "uint2", "int2", *FLOAT8, "float4e2m1"]


@pytest.mark.parametrize("layout", ["tensor", "axis", "block"])
@pytest.mark.parametrize("qtype", QUANT)
@pytest.mark.parametrize("xtype", [np.float32, np.float16])
def test_quantize_and_dequantize_linear_match_the_reference(runtime, layout, qtype, xtype):
    rng = np.random.default_rng(2)
    q = dtypes.from_name(qtype)
    shape = (3, 10, 5)
    sshape, attrs = _quant_inputs(rng, layout, shape)
    x = (rng.standard_normal(shape) * 6).astype(xtype)
    scale = (rng.random(sshape) * 0.5 + 0.05).astype(xtype)
    if q.is_float:
        zp = np.zeros(sshape, np.float32).astype(q.numpy)  # float8 / float4 zero points are zero
    else:
        info = ml_dtypes.iinfo(q.numpy) if q.bits < 8 else np.iinfo(q.numpy)
        zp = rng.integers(int(info.min), int(info.max), sshape, endpoint=True).astype(q.numpy)
    nodes = [h.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], **attrs),
             h.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"], **attrs)]
    model = make_model(nodes, [("x", xtype, list(shape)), ("scale", xtype, list(sshape)),
                               ("zp", q.numpy, list(sshape))], ["q", "y"], opset=25)
    ours, ref = run_both(runtime, model, {"x": x, "scale": scale, "zp": zp})
    assert_same_bits(ours[0], ref[0], f"QuantizeLinear {layout} -> {qtype}")
    assert_same_bits(ours[1], ref[1], f"DequantizeLinear {layout} {qtype} -> {np.dtype(xtype)}")


def test_quantize_linear_without_saturation_and_default_uint8(runtime):
    x = np.array([1000, -1000, 3.0, 601, 0.4], np.float32)  # (beyond int32 the cast is undefined)
    scale = np.array(2.0, np.float32)
    nodes = [h.make_node("QuantizeLinear", ["x", "scale"], ["a"], output_dtype=TensorProto.FLOAT8E4M3FN,
                         saturate=0),
             h.make_node("QuantizeLinear", ["x", "scale"], ["b"])]
    model = make_model(nodes, [("x", np.float32, [5]), ("scale", np.float32, [])], ["a", "b"], opset=25)
    ours, ref = run_both(runtime, model, {"x": x, "scale": scale})
    for a, b in zip(ours, ref):
        assert_same_bits(a, b, "QuantizeLinear")


PACKED = ["bool", "int8", "uint8", "int16", "uint16", "int4", "uint4", "int2", "uint2", "bfloat16", "float16",
          *FLOAT8, "float4e2m1"]


def _values(dtype: dtypes.DType, shape, rng) -> np.ndarray:
    if dtype.is_bool:
        return rng.random(shape) > 0.5
    if dtype.is_float:
        return (rng.standard_normal(shape) * 2).astype(np.float32).astype(dtype.numpy)
    info = ml_dtypes.iinfo(dtype.numpy) if dtype.bits < 8 else np.iinfo(dtype.numpy)
    return rng.integers(int(info.min), int(info.max), shape, endpoint=True).astype(dtype.numpy)


@pytest.mark.parametrize("name", PACKED)
def test_data_movement_of_packed_dtypes(runtime, name):
    """Concat, Split, Slice, Transpose, Gather, Pad, Expand and ScatterElements move packed values
    (unaligned offsets inside words included) exactly as the reference does."""
    dtype = dtypes.from_name(name)
    rng = np.random.default_rng(3)
    a, b = _values(dtype, (3, 5, 7), rng), _values(dtype, (3, 2, 7), rng)
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    nodes = [
        h.make_node("Concat", ["a", "b"], ["cat"], axis=1),
        h.make_node("Split", ["cat", "parts"], ["s0", "s1", "s2"], axis=2),
        h.make_node("Slice", ["a", "starts", "ends", "axes", "steps"], ["sl"]),
        h.make_node("Transpose", ["a"], ["tr"], perm=[2, 0, 1]),
        h.make_node("Gather", ["a", "idx"], ["ga"], axis=1),
        h.make_node("Pad", ["b", "pads"], ["pad"], mode="edge"),
        h.make_node("Expand", ["b", "shape"], ["ex"]),
        h.make_node("ScatterElements", ["a", "sidx", "upd"], ["sc"], axis=2),
        h.make_node("Identity", ["a"], ["same"]),
    ]
    sidx = rng.integers(0, 7, (3, 5, 2)).astype(np.int64)
    inits = {"parts": i64(3, 1, 3), "starts": i64(1, 5), "ends": i64(5, 0), "axes": i64(1, 2), "steps": i64(1, -2),
             "idx": i64(4, 0, 3, 3), "pads": i64(0, 1, 3, 0, 0, 2), "shape": i64(2, 3, 1, 1), "sidx": sidx,
             "upd": _values(dtype, (3, 5, 2), rng)}
    outs = ["cat", "s0", "s1", "s2", "sl", "tr", "ga", "pad", "ex", "sc", "same"]
    model = make_model(nodes, [("a", dtype.numpy, [3, 5, 7]), ("b", dtype.numpy, [3, 2, 7])], outs, inits, opset=21)
    ours, ref = run_both(runtime, model, {"a": a, "b": b})
    for out, x, y in zip(outs, ours, ref):
        x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
        assert x.dtype == y.dtype and np.array_equal(x.view(np.uint8), y.view(np.uint8)), f"{name} {out}"


def test_elementwise_on_narrow_types_wraps_and_rounds_once(runtime):
    """int8/uint16 arithmetic wraps like numpy; bfloat16/float16 compute in f32 and round once."""
    rng = np.random.default_rng(4)
    feeds = {"a": rng.integers(-128, 128, 37).astype(np.int8), "b": rng.integers(-128, 128, 37).astype(np.int8),
             "u": rng.integers(0, 65536, 37).astype(np.uint16), "f": rng.standard_normal(37).astype(ml_dtypes.bfloat16),
             "g": rng.standard_normal(37).astype(np.float16)}
    nodes = [h.make_node("Mul", ["a", "b"], ["m"]), h.make_node("Add", ["u", "u"], ["s"]),
             h.make_node("Mul", ["f", "f"], ["ff"]), h.make_node("Div", ["g", "g2"], ["gg"]),
             h.make_node("Greater", ["a", "b"], ["gt"]), h.make_node("Not", ["gt"], ["ng"])]
    model = make_model(nodes, [("a", np.int8, [37]), ("b", np.int8, [37]), ("u", np.uint16, [37]),
                               ("f", ml_dtypes.bfloat16, [37]), ("g", np.float16, [37])],
                       ["m", "s", "ff", "gg", "ng"], {"g2": np.float16(3)}, opset=21)
    ours, ref = run_both(runtime, model, feeds)
    for out, x, y in zip(("m", "s", "ff", "gg", "ng"), ours, ref):
        assert_same_bits(x, y, out) if x.dtype.kind not in "iub" else np.testing.assert_array_equal(x, y, out)


def test_float16_runs_the_same_without_shader_f16(wgpu_adapter):
    """Without shader-f16 float16 keeps its 2 bytes, packed in u32 words: one saved plan, the
    same results, no `enable f16` in its shaders."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 33)).astype(np.float16)
    w = rng.standard_normal((33, 9)).astype(np.float16)
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Softmax", ["m"], ["s"], axis=-1),
             h.make_node("Concat", ["s", "s"], ["c"], axis=1), h.make_node("Gelu", ["c"], ["y"])]
    model = make_model(nodes, [("x", np.float16, [4, 33])], ["y"], {"w": w}, opset=20)
    compiled = compile_model(model)
    assert compiled.tensors["w"].nbytes == 33 * 9 * 2 + 2  # 2 bytes an element, padded to a word
    native = onyxia.Runtime(wgpu_adapter, f16=True)
    packed = onyxia.Runtime(wgpu_adapter, f16=False)
    assert "shader-f16" not in packed.features
    exe_p = packed.load_model(compiled)
    assert not any("enable f16" in p.code for p in _codes(exe_p))
    y_packed = exe_p.run({"x": x})["y"]
    if "shader-f16" in native.features:
        exe_n = native.load_model(compiled)
        assert all("enable f16" in c.code for c in _codes(exe_n) if "f16" in c.code)
        np.testing.assert_array_equal(exe_n.run({"x": x})["y"], y_packed)
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(y_packed.astype(np.float32), ref.astype(np.float32), rtol=5e-3, atol=5e-3)


def test_float16_vector_reads_native_or_packed_give_the_same_bits(wgpu_adapter):
    """With shader-f16, read-only float16 operands read as vec4s may come packed in words (the
    default on a CPU-type adapter): the same bytes, the same results to the bit."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((5, 64)).astype(np.float16)
    w = rng.standard_normal((64, 40)).astype(np.float16)
    model = make_model([h.make_node("MatMul", ["x", "w"], ["y"])], [("x", np.float16, ["m", 64])], ["y"], {"w": w})
    compiled = compile_model(model, {"m": 5})
    outs = {}
    for packed in (False, True):
        runtime = onyxia.Runtime(wgpu_adapter, f16=True, packed_f16_reads=packed)
        if "shader-f16" not in runtime.features:
            pytest.skip("the adapter has no shader-f16: float16 is packed either way")
        exe = runtime.load_model(compiled)
        for m in (5, 1):
            exe.update_dimensions({"m": m})
            outs[packed, m] = exe.run({"x": x[:m]})["y"]
        codes = [render(exe.model.shaders[i], exe.model.templates[exe.model.shaders[i].template], exe.dims,
                        native_f16=True, packed_f16_reads=packed) for i in exe.programs]
        assert any("b_buf: array<vec2<u32>>" in c for c in codes) == packed
    for m in (5, 1):
        assert_same_bits(outs[True, m], outs[False, m], f"M={m}")
        np.testing.assert_allclose(outs[True, m].astype(np.float32), (x[:m].astype(np.float32) @ w.astype(np.float32)),
                                   rtol=2e-2, atol=2e-2)


class _Code:
    def __init__(self, code: str):
        self.code = code


def _codes(exe) -> list[_Code]:
    model = exe.model
    return [_Code(render(model.shaders[i], model.templates[model.shaders[i].template], exe.dims,
                         native_f16=exe.limits.native_f16)) for i in exe.programs]


class _CopyInto(onyxia.Operator):
    """Test op: y = base with y[dst:dst+n] = x[src:src+n] (flat), through copy_elements."""

    op_type, domain = "CopyInto", "test.storage"

    def infer(self, ctx):
        return [(ctx.input_dtype(1), ctx.input_shape(1))]

    def plan(self, ctx):
        from onyxia.operators.indexing.indexing import copy_elements
        src, dst, n = (int(ctx.attr(k)) for k in ("src", "dst", "n"))
        base = numel_of(ctx.input_shape(1))
        return (copy_elements(ctx, ctx.input(1), ctx.output(0), base)
                + copy_elements(ctx, ctx.input(0), ctx.output(0), n, src, dst))


def numel_of(shape) -> int:
    return int(np.prod(shape))


@pytest.mark.parametrize("name", ["float32", "float16", "int8", "int4", "bool"])
@pytest.mark.parametrize("src,dst,n", [(0, 0, 8), (3, 5, 7), (8, 16, 8), (1, 2, 1)])
def test_copy_elements_at_any_offset(runtime, name, src, dst, n):
    """Word-aligned copies are CopyBuffers; others a kernel merging elements into their words."""
    dtype = dtypes.from_name(name)
    rng = np.random.default_rng(6)
    x, base = _values(dtype, (24,), rng), _values(dtype, (32,), rng)
    model = make_model([h.make_node("CopyInto", ["x", "base"], ["y"], domain="test.storage", src=src, dst=dst, n=n)],
                       [("x", dtype.numpy, [24]), ("base", dtype.numpy, [32])], ["y"],
                       extra_opsets={"test.storage": 1})
    registry = onyxia.core_operator_registry().register(_CopyInto(), 1)
    compiled = onyxia.CompilerPipeline(registry).compile(onyxia.load_model(model), {})
    copies = sum(type(s).__name__ == "CopyBuffer" for s in compiled.steps)
    aligned = all(v % (dtype.per_word if dtype.packed else 1) == 0 for v in (src, dst, n))
    assert copies == (2 if aligned else 1)
    y = runtime.load_model(compiled).run({"x": x, "base": base})["y"]
    want = base.copy()
    want[dst:dst + n] = x[src:src + n]
    assert np.array_equal(np.ascontiguousarray(y).view(np.uint8), want.view(np.uint8))
