"""Kernel features today's LLM exporters rely on, one operator at a time, against onnxruntime.

- GroupQueryAttention `sliding_window_cache = 1` (Gemma-2/3, Mistral for CPU): past and present are
  window-sized caches of capacity C >= local_window_size W. After a step that brings the absolute
  token count to T = seqlens_k + 1, rows [0, L(T)) of present hold positions T - L .. T - 1 with
  L(T) = T if T <= C else T - G * ceil((T - C) / G), G = C - W + 1 (onnxruntime's contrib-op docs).
  Prompts shorter and longer than C, then decode steps past the window.
- GroupQueryAttention q_norm_weight / k_norm_weight (inputs 14, 15; Qwen3 for WebGPU): a per-head
  RMS norm of Q and K before rotary. onnxruntime's CPU kernel rejects them; the oracle is the same
  computation with the norms explicit (SimplifiedLayerNormalization over head_size) before a plain GQA.
- MatMulNBits `accuracy_level = 4` (onnxruntime-genai's int4 models): onnxruntime quantizes the
  activation per block of block_size to int8 (scale = max|a| / 127, round to nearest even) before
  the integer product; both the dot4I8Packed and the plain-arithmetic kernel must equal it.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import helper

import onyxia
from onyxia.codegen.wgsl import render
from onyxia.compiler import CompilerPipeline
from onyxia.operators import core_operator_registry
from onyxia.operators.quantized.quantized import MatMulNBits
from tests.helpers import compile_model, make_model, run_ort

pytestmark = pytest.mark.gpu
MS = {"com.microsoft": 1}
QH, KVH, HEAD = 4, 2, 16
QH, KVH, HEAD = 4, 2, 16


def resident(total: int, capacity: int, window: int) -> int:
    if total <= capacity:
        return total
    g = capacity - window + 1
    return total - g * math.ceil((total - capacity) / g)


def sliding_gqa(capacity: int, window: int, rotary: bool) -> object:
    names = ["q", "k", "v", "pk", "pv", "sl", "tl"]
    inputs = [("q", np.float32, [1, "S", QH * HEAD]), ("k", np.float32, [1, "S", KVH * HEAD]),
              ("v", np.float32, [1, "S", KVH * HEAD]), ("pk", np.float32, [1, KVH, capacity, HEAD]),
              ("pv", np.float32, [1, KVH, capacity, HEAD]), ("sl", np.int32, [1]), ("tl", np.int32, [])]
    inits, attrs = {}, {}
    if rotary:
        angles = np.random.default_rng(5).random((128, HEAD // 2)).astype(np.float32) * 3
        inits = {"cos": np.cos(angles), "sin": np.sin(angles)}
        names += ["cos", "sin"]
        attrs["do_rotary"] = 1
    node = helper.make_node("GroupQueryAttention", names, ["o", "prk", "prv"], domain="com.microsoft",
                            num_heads=QH, kv_num_heads=KVH, local_window_size=window, sliding_window_cache=1,
                            softcap=2.0, **attrs)
    return make_model([node], inputs, ["o", "prk", "prv"], inits, extra_opsets=MS)


@pytest.mark.parametrize("cpu", [0, 1], ids=["gpu-kernel", "cpu-kernel"])
@pytest.mark.parametrize("prompt", [5, 13, 30])
@pytest.mark.parametrize("capacity,window,rotary", [(8, 8, True), (12, 8, False), (20, 8, True)])
def test_gqa_sliding_window_cache(runtime, prompt, capacity, window, rotary, cpu):
    model = sliding_gqa(capacity, window, rotary)
    exe = runtime.load_model(compile_model(model, {"S": prompt}))
    exe.assume_adapter("cpu" if cpu else "gpu")  # each attention kernel, whatever this adapter is
    rng = np.random.default_rng(prompt * 100 + capacity)
    zeros = np.zeros((1, KVH, capacity, HEAD), np.float32)
    ours_past, ort_past = (zeros, zeros), (zeros, zeros)
    total = 0
    for step in range(window + 6):  # decode well past the window and through several compactions
        seq = prompt if step == 0 else 1
        total += seq
        exe.update_dimensions({"S": seq})
        f = {"q": rng.standard_normal((1, seq, QH * HEAD), dtype=np.float32),
             "k": rng.standard_normal((1, seq, KVH * HEAD), dtype=np.float32),
             "v": rng.standard_normal((1, seq, KVH * HEAD), dtype=np.float32),
             "sl": np.array([total - 1], np.int32), "tl": np.array(total, np.int32)}
        ref = run_ort(model, {**f, "pk": ort_past[0], "pv": ort_past[1]})
        ours = exe.run({**f, "pk": ours_past[0], "pv": ours_past[1]})
        np.testing.assert_allclose(ours["o"], ref[0], rtol=1e-4, atol=1e-5, err_msg=f"step {step} output")
        rows = resident(total, capacity, window)
        for name, r in zip(("prk", "prv"), ref[1:]):
            assert ours[name].shape == r.shape == (1, KVH, capacity, HEAD)
            np.testing.assert_allclose(ours[name][:, :, :rows], r[:, :, :rows], rtol=1e-5, atol=1e-6,
                                       err_msg=f"step {step} {name} (resident rows {rows})")
        ours_past, ort_past = (ours["prk"], ours["prv"]), (ref[1], ref[2])
    assert exe.stats.recompiles == 0 and exe.stats.reallocs == 0


def qk_norm_models(eps: float) -> tuple[object, object]:
    """(GQA with q/k-norm inputs, the same with explicit norms) on packed QKV, rotary inside GQA."""
    rng = np.random.default_rng(11)
    angles = rng.random((64, HEAD // 2)).astype(np.float32) * 3
    inits = {"cos": np.cos(angles), "sin": np.sin(angles),
             "q_w": (1 + 0.3 * rng.standard_normal(HEAD)).astype(np.float32),
             "k_w": (1 + 0.3 * rng.standard_normal(HEAD)).astype(np.float32)}
    width = (QH + 2 * KVH) * HEAD
    inputs = [("qkv", np.float32, [1, "S", width]), ("pk", np.float32, [1, KVH, "P", HEAD]),
              ("pv", np.float32, [1, KVH, "P", HEAD]), ("sl", np.int32, [1]), ("tl", np.int32, [])]
    attrs = dict(domain="com.microsoft", num_heads=QH, kv_num_heads=KVH, do_rotary=1)
    fused = helper.make_node("GroupQueryAttention", ["qkv", "", "", "pk", "pv", "sl", "tl", "cos", "sin", "", "", "",
                                                     "", "", "q_w", "k_w"], ["o", "prk", "prv"],
                             qk_norm_epsilon=eps, **attrs)
    shapes = {"split": np.array([QH * HEAD, KVH * HEAD, KVH * HEAD], np.int64),
              "qs": np.array([0, 0, QH, HEAD], np.int64), "ks": np.array([0, 0, KVH, HEAD], np.int64),
              "flat": np.array([0, 0, -1], np.int64)}
    explicit = [helper.make_node("Split", ["qkv", "split"], ["q", "k", "v"], axis=-1)]
    for x, w, s in (("q", "q_w", "qs"), ("k", "k_w", "ks")):
        explicit += [helper.make_node("Reshape", [x, s], [x + "4"]),
                     helper.make_node("SimplifiedLayerNormalization", [x + "4", w], [x + "n"], axis=-1,
                                      epsilon=eps, stash_type=1),
                     helper.make_node("Reshape", [x + "n", "flat"], [x + "f"])]
    explicit.append(helper.make_node("GroupQueryAttention", ["qf", "kf", "v", "pk", "pv", "sl", "tl", "cos", "sin"],
                                     ["o", "prk", "prv"], **attrs))
    outs = ["o", "prk", "prv"]
    return (make_model([fused], inputs, outs, inits, extra_opsets=MS),
            make_model(explicit, inputs, outs, {**inits, **shapes}, extra_opsets=MS))


@pytest.mark.parametrize("cpu", [0, 1], ids=["gpu-kernel", "cpu-kernel"])
def test_gqa_qk_norm_matches_explicit_norms(runtime, cpu):
    eps = 1e-6
    fused, explicit = qk_norm_models(eps)
    exe = runtime.load_model(compile_model(fused, {"S": 6, "P": 0}))
    exe.assume_adapter("cpu" if cpu else "gpu")
    rng = np.random.default_rng(2)
    past = ref_past = (np.zeros((1, KVH, 0, HEAD), np.float32),) * 2
    total = 0
    for step in range(4):
        seq = 6 if step == 0 else 1
        exe.update_dimensions({"S": seq, "P": total})
        total += seq
        f = {"qkv": rng.standard_normal((1, seq, (QH + 2 * KVH) * HEAD), dtype=np.float32) * 3,
             "sl": np.array([total - 1], np.int32), "tl": np.array(total, np.int32)}
        ref = run_ort(explicit, {**f, "pk": ref_past[0], "pv": ref_past[1]})
        ours = exe.run({**f, "pk": past[0], "pv": past[1]})
        np.testing.assert_allclose(ours["o"], ref[0], rtol=1e-4, atol=1e-5, err_msg=f"step {step}")
        np.testing.assert_allclose(ours["prk"], ref[1], rtol=1e-5, atol=1e-5, err_msg=f"step {step} key")
        past, ref_past = (ours["prk"], ours["prv"]), (ref[1], ref[2])


def int4_matmul(k: int, n: int, block: int, accuracy: int, zero_points: bool, seed: int = 0) -> object:
    rng = np.random.default_rng(seed)
    blocks = (k + block - 1) // block
    packed = rng.integers(0, 256, (n, blocks, block // 2), dtype=np.uint8)
    scales = (rng.random(n * blocks).astype(np.float32) * 0.1 + 0.01)
    inputs = ["a", "w", "s"] + (["z"] if zero_points else [])
    inits = {"w": packed, "s": scales}
    if zero_points:
        inits["z"] = rng.integers(0, 256, (n * ((blocks + 1) // 2),), dtype=np.uint8)
    node = helper.make_node("MatMulNBits", inputs, ["y"], domain="com.microsoft", K=k, N=n, bits=4,
                            block_size=block, accuracy_level=accuracy)
    return make_model([node], [("a", np.float32, ["M", k])], ["y"], inits, extra_opsets=MS)


@pytest.fixture(scope="module")
def runtime_without_subgroups(wgpu_adapter):
    return onyxia.Runtime(wgpu_adapter, subgroups=False)


@pytest.fixture(scope="module")
def runtime_narrow_reads(wgpu_adapter):
    return onyxia.Runtime(wgpu_adapter, wide_reads=False)


# (K, N, block, zero points): the chunked kernel's forms on a CPU-type adapter: two blocks an
# iteration (block 32, even block count: 64, 256, 128), one (96: 3 blocks), two word groups of a
# block (block 128); B and scales in tiles (N 128, 192); and shapes it leaves to the coalesced
# kernel (block 16, K % block != 0).
@pytest.mark.parametrize("k,n,block,zp", [(64, 48, 32, True), (128, 40, 16, False), (96, 33, 32, True),
                                          (256, 64, 128, False), (80, 24, 32, True), (256, 40, 32, True),
                                          (128, 24, 32, False), (128, 128, 32, True), (256, 192, 32, False)])
@pytest.mark.parametrize("m", [1, 7])
@pytest.mark.parametrize("packed_dot", [True, False], ids=["dot4I8Packed", "plain"])
@pytest.mark.parametrize("reads", ["subgroups", "no-subgroups", "narrow"])
def test_matmulnbits_accuracy_level_4_quantizes_the_activation(runtime, runtime_without_subgroups,
                                                               runtime_narrow_reads, k, n, block, zp, m, packed_dot,
                                                               reads):
    """Both kernel families against onnxruntime; the chunked kernel with its lanes sharing the
    activation's loads through subgroups and without (each lane loads every pair word), and with
    32-bit loads only (`narrow`: no shader-int64 in use)."""
    model = int4_matmul(k, n, block, accuracy=4, zero_points=zp)
    a = np.random.default_rng(m).standard_normal((m, k)).astype(np.float32)
    a[0, :block] = 0.0  # an all-zero block: scale 0, quantized to zeros
    ref = run_ort(model, {"a": a})[0]
    registry = core_operator_registry().copy().register(MatMulNBits(packed_dot=packed_dot))
    compiled = CompilerPipeline(registry).compile(onyxia.load_model(model), {"M": m})
    chunked = block >= 32 and k % block == 0  # where the chunked variant applies (CPU-type adapters)
    assert {s.label for s in compiled.shaders} == {"quantize_q8", "matmul_nbits_q8"} | (
        {"quantize_q8_chunked", "matmul_nbits_chunked"} if chunked else set())
    rt = {"subgroups": runtime, "no-subgroups": runtime_without_subgroups, "narrow": runtime_narrow_reads}[reads]
    if reads == "subgroups" and "subgroup" not in rt.features:
        pytest.skip(f"{rt.info.summary} has no subgroups")
    assert not runtime_narrow_reads.wide_reads
    exe = rt.load_model(compiled)
    for cpu in (0, 1) if chunked else (None,):  # each variant, whatever this adapter is
        if cpu is not None:
            exe.assume_adapter("cpu" if cpu else "gpu")
        ours = exe.run({"a": a})["y"]
        np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()), err_msg=f"cpu={cpu}")
    # ... and it differs measurably from the f32-activation product (accuracy_level 0)
    exact = run_ort(int4_matmul(k, n, block, accuracy=0, zero_points=zp), {"a": a})[0]
    assert float(np.abs(exact - ref).max()) > 1e-4 * float(np.abs(ref).max())


def test_chunked_int4_kernel_reads_64_bit_words(runtime):
    """Where the adapter is CPU-type and has shader-int64, the chunked kernel reads each column's
    words of two blocks as one vec4<u64> and their two scales as one u64 (lavapipe loads storage
    one lane and one component at a time: the kernel ran ~25-40% faster than with 32-bit loads)."""
    cpu = runtime.info.adapter_type == "CPU"
    assert runtime.wide_reads == (cpu and "shader-int64" in runtime.adapter.features)
    compiled = compile_model(int4_matmul(256, 40, 32, accuracy=4, zero_points=False), {"M": 1})
    spec = next(s for s in compiled.shaders if s.label == "matmul_nbits_chunked")
    assert dict(spec.defs)["PAIRED"]
    code = render(spec, compiled.templates[spec.template], compiled.dims, wide_reads=True)
    assert "b_buf: array<vec4<u64>>" in code and "scales_buf: array<u64>" in code
    narrow = render(spec, compiled.templates[spec.template], compiled.dims, wide_reads=False)
    assert "b_buf: array<vec4<u32>>" in narrow and "scales_buf: array<f32>" in narrow


@pytest.mark.parametrize("m", [1, 6])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_matmulnbits_accuracy_level_4_extreme_products(runtime, m, sign):
    """The chunked kernel sums two int8 x 4-bit products per 16-bit lane of an i32 multiply: at
    the extremes (every weight 15, every activation +-127: 60,960 a block) the lanes' sums must
    stay exact, as onnxruntime's integer dots are."""
    k, n, block = 256, 72, 32
    model = int4_matmul(k, n, block, accuracy=4, zero_points=False)
    weights = next(t for t in model.graph.initializer if t.name == "w")
    weights.CopyFrom(onnx.numpy_helper.from_array(np.full((n, k // block, block // 2), 0xFF, np.uint8), "w"))
    a = np.full((m, k), 3.0 * sign, np.float32)
    a[:, 1::7] *= 0.5  # not every value at the block's maximum
    ref = run_ort(model, {"a": a})[0]
    exe = runtime.load_model(compile_model(model, {"M": m}))
    for cpu in (0, 1):
        exe.assume_adapter("cpu" if cpu else "gpu")
        np.testing.assert_allclose(exe.run({"a": a})["y"], ref, rtol=1e-6, err_msg=f"cpu={cpu}")


@pytest.mark.parametrize("k", [64, 128])
def test_matmulnbits_accuracy_level_4_float16(runtime, k):
    """float16 activations and scales (WebGPU-target int4 folders): quantized from their float16 values."""
    model = int4_matmul(k, 40, 32, accuracy=4, zero_points=False)
    model.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    model.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    scales = next(t for t in model.graph.initializer if t.name == "s")
    scales.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(scales).astype(np.float16), "s"))
    a = np.random.default_rng(3).standard_normal((5, k)).astype(np.float16)
    ref = run_ort(model, {"a": a})[0].astype(np.float32)
    ours = runtime.load_model(compile_model(model, {"M": 5})).run({"a": a})["y"].astype(np.float32)
    np.testing.assert_allclose(ours, ref, rtol=2e-3, atol=2e-3 * float(np.abs(ref).max()))


@pytest.mark.parametrize("prompt,past", [(30, 0), (1, 29)], ids=["prefill", "decode"])
def test_gqa_float16_rounds_the_rotated_query_as_onnxruntime(runtime, prompt, past):
    """WebGPU-target folders: onnxruntime's CPU kernel writes the rotated query to a float16 tensor
    before the Q.K product; computing with the unrounded f32 rotation moves ~30% of the outputs by
    an ulp, which int8 activations (MatMulNBits accuracy_level 4) turn into whole steps."""
    capacity, rng = 64, np.random.default_rng(7)
    angles = rng.random((128, HEAD // 2)) * 3
    node = helper.make_node("GroupQueryAttention", ["qkv", "", "", "pk", "pv", "sl", "tl", "cos", "sin"],
                            ["o", "prk", "prv"], domain="com.microsoft", num_heads=QH, kv_num_heads=KVH,
                            do_rotary=1, scale=0.25)
    cache = [1, KVH, capacity, HEAD]
    model = make_model([node], [("qkv", np.float16, [1, prompt, (QH + 2 * KVH) * HEAD]), ("pk", np.float16, cache),
                                ("pv", np.float16, cache), ("sl", np.int32, [1]), ("tl", np.int32, [1])], ["o"],
                       {"cos": np.cos(angles).astype(np.float16), "sin": np.sin(angles).astype(np.float16)},
                       extra_opsets=MS)
    pk, pv = (np.zeros((1, KVH, capacity, HEAD), np.float16) for _ in range(2))
    pk[:, :, :past] = rng.standard_normal((1, KVH, past, HEAD))
    pv[:, :, :past] = rng.standard_normal((1, KVH, past, HEAD))
    feeds = {"qkv": rng.standard_normal((1, prompt, (QH + 2 * KVH) * HEAD)).astype(np.float16), "pk": pk, "pv": pv,
             "sl": np.array([past + prompt - 1], np.int32), "tl": np.array([past + prompt], np.int32)}
    ref = run_ort(model, feeds)[0].astype(np.float32)
    ours = runtime.load_model(compile_model(model, {})).run(feeds)["o"].astype(np.float32)
    # f32 rounding-order noise may still land a value on the other side of a float16 tie, rarely
    ulp = np.spacing(np.abs(ref).astype(np.float16)).astype(np.float32)
    assert np.all(np.abs(ours - ref) <= ulp)
    assert np.count_nonzero(ours != ref) <= ref.size // 100
