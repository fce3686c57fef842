"""The few-rows matrix product's variants (operators/matmul/gemv.py) against onnxruntime, each run on
this adapter whatever the heuristic would pick for it: assume_adapter("cpu") runs the chunked kernel,
0 the coalesced one. Sizes include K past lavapipe's ~65k loop-iteration cap (split-K by
construction), row counts in every row class, Gemm's epilogue, batched and float16 weights."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

from tests.builders.gemv_heuristic import running as rows_running
from tests.helpers import compile_model, make_model, run_ort

RNG = np.random.default_rng(7)


pytestmark = pytest.mark.usefixtures("heuristic")  # the heuristic's choice is under test: no tuning


def expected(cpu: int, m: int) -> str:
    """The heuristic: chunked up to 64 rows on a CPU-type adapter (above: gemm_variants'
    register-tiled variant, the same kernel), coalesced up to 8 elsewhere."""
    if cpu:
        return "gemv_chunked"
    return "gemv" if m <= 8 else "gemm"


def running(exe) -> set[str]:
    """Labels of the dispatches a run launches now (empty grids are skipped)."""
    return {exe.model.shaders[d.shader].label.removeprefix("matmul/")
            for d in exe.dispatch_commands() if all(d.workgroups)}


def check(runtime, model, dims, feeds_for, rows_list, cpu, rtol=2e-5, atol=2e-5):
    exe = runtime.load_model(compile_model(model, dims))
    exe.assume_adapter("cpu" if cpu else "gpu")
    for m in rows_list:
        if "m" in dims:
            exe.update_dimensions({"m": m})
        feeds = feeds_for(m)
        got = exe.run(feeds)
        assert expected(cpu, m) in running(exe), (m, running(exe))
        for name, ref in zip(exe.model.outputs, run_ort(model, feeds)):
            np.testing.assert_allclose(got[name], ref, rtol=rtol, atol=atol, err_msg=f"M={m} cpu={cpu}")
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("cpu", [1, 0])
@pytest.mark.parametrize("k,n", [(512, 1408), (68, 72), (16388, 8)])
def test_weight_product_every_row_class(runtime, cpu, k, n):
    w = RNG.standard_normal((k, n)).astype(np.float32)
    model = make_model([h.make_node("MatMul", ["a", "w"], ["y"])], [("a", np.float32, [1, "m", k])], ["y"], {"w": w})
    rows = [1, 3, 4, 5, 14, 16, 17, 37, 64, 65, 100] if k < 16384 else [1, 5]
    check(runtime, model, {"m": 100}, lambda m: {"a": RNG.standard_normal((1, m, k)).astype(np.float32)}, rows, cpu,
          rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def runtime_without_subgroups(wgpu_adapter):
    import onyxia

    return onyxia.Runtime(wgpu_adapter, subgroups=False)


@pytest.mark.parametrize("k,n", [(512, 136), (16388, 8)])
def test_chunked_kernel_without_subgroups(runtime_without_subgroups, k, n):
    """The chunked kernel shares A's rows through subgroups where the adapter has them; without
    (rendered without ONYXIA_SUBGROUPS) every invocation loads them: the same products."""
    assert "subgroup" not in runtime_without_subgroups.features
    w = (RNG.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)  # outputs of order 1
    model = make_model([h.make_node("MatMul", ["a", "w"], ["y"])], [("a", np.float32, [1, "m", k])], ["y"], {"w": w})
    rows = [1, 3, 5, 14, 17, 64, 70] if k < 16384 else [1, 5, 40]
    check(runtime_without_subgroups, model, {"m": 70},
          lambda m: {"a": RNG.standard_normal((1, m, k)).astype(np.float32)}, rows, 1, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("subgroups", [True, False])
def test_transposed_a_every_row_class(runtime, runtime_without_subgroups, subgroups):
    """Gemm with transA (A stored [K, M], as a pointwise conv's k-major weights are): the chunked
    kernel's every row class and the register variant past 64 rows read A four values M apart,
    sharing them through subgroups or not."""
    k, n = 68, 40
    b = (RNG.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    c = RNG.standard_normal((n,)).astype(np.float32)
    gemm = make_model([h.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1)], [("a", np.float32, [k, "m"])], ["y"],
                      {"b": b, "c": c})
    check(runtime if subgroups else runtime_without_subgroups, gemm, {"m": 100},
          lambda m: {"a": RNG.standard_normal((k, m)).astype(np.float32)}, [1, 3, 4, 5, 8, 14, 17, 37, 64, 65, 100], 1,
          rtol=1e-4, atol=1e-4)


def running_chunked(exe) -> list[tuple[int, dict]]:
    """(shader, defs) of the chunked kernels a run launches now."""
    return [(d.shader, dict(exe.model.shaders[d.shader].defs)) for d in exe.dispatch_commands()
            if all(d.workgroups) and exe.model.shaders[d.shader].label == "matmul/gemv_chunked"]


def test_transposed_a_reads_4_rows_a_lane_in_one_kernel_for_every_m_and_c_once_elsewhere(runtime):
    """A k-major A is read 4 rows a lane (A_QUADS): one vec4 where M is a multiple of 4, four
    loads where not, in the same kernel (a Select of two kernels compiled both where a network's
    maps come in both kinds); Gemm's one-row C read per output there (C_ROW doubled that kernel's
    compile), once an invocation (C_ROW) where A is row-major. Each M against onnxruntime, with
    C scaled (beta) and the product (alpha), rows past M included."""
    k, n = 132, 48
    b = (RNG.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    c = RNG.standard_normal((n,)).astype(np.float32)
    for trans_a, sizes in ((1, (60, 61, 4, 5, 12, 18, 63)), (0, (20, 3))):
        gemm = make_model([h.make_node("Gemm", ["a", "b", "c"], ["y"], transA=trans_a, alpha=0.5, beta=3.0)],
                          [("a", np.float32, [k, "m"] if trans_a else ["m", k])], ["y"], {"b": b, "c": c})
        exe = runtime.load_model(compile_model(gemm, {"m": sizes[0]}))
        exe.assume_adapter("cpu")
        kernels: dict[int, set[int]] = {}
        for m in sizes:
            exe.update_dimensions({"m": m})
            a = RNG.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
            np.testing.assert_allclose(exe.run({"a": a})["y"], run_ort(gemm, {"a": a})[0], rtol=1e-5, atol=1e-5,
                                       err_msg=f"M={m} transA={trans_a}")
            (shader, defs), = running_chunked(exe)
            assert bool(defs.get("A_QUADS")) == bool(trans_a) != bool(defs.get("C_ROW")), (m, trans_a)
            kernels.setdefault(defs["ROWS"], set()).add(shader)
        assert all(len(shaders) == 1 for shaders in kernels.values()), kernels  # one kernel a row class
        assert exe.stats.recompiles == 0


@pytest.mark.parametrize("cpu", [1, 0])
def test_k_past_the_loop_cap(runtime, cpu):
    # 70000 / 4 = 17500 iterations of one loop would pass 65535 only with several loops per
    # invocation; the split keeps each invocation's walk at MAX_KCHUNK.
    k = 70_000
    w = (RNG.standard_normal((k, 8)) / 64).astype(np.float32)
    model = make_model([h.make_node("MatMul", ["a", "w"], ["y"])], [("a", np.float32, ["m", k])], ["y"], {"w": w})
    check(runtime, model, {"m": 3}, lambda m: {"a": RNG.standard_normal((m, k)).astype(np.float32)}, [1, 3], cpu,
          rtol=1e-4, atol=1e-4)
    # A stored [K, M] (TRANS_A): the same split over its strided reads
    gemm = make_model([h.make_node("Gemm", ["a", "w"], ["y"], transA=1)], [("a", np.float32, [k, "m"])], ["y"],
                      {"w": w})
    check(runtime, gemm, {"m": 3}, lambda m: {"a": RNG.standard_normal((k, m)).astype(np.float32)}, [1, 3], cpu,
          rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("wide", [True, False])
def test_register_tiles_past_the_loop_cap(runtime, wide):
    # The register kernels' 32- and 16-row tiles (a CPU adapter with and without the
    # wide-register-tiles trait), K = 270,000: unsplit one invocation would walk 67,500 steps,
    # past lavapipe's ~65,535; split at MAX_KCHUNK each walks 4,096. Rows in both tiles' range.
    k = 270_000
    w = (RNG.standard_normal((k, 8)) / 512).astype(np.float32)
    model = make_model([h.make_node("MatMul", ["a", "w"], ["y"])], [("a", np.float32, ["m", k])], ["y"], {"w": w})
    exe = runtime.load_model(compile_model(model, {"m": 40}))
    exe.assume_adapter("cpu", ("wide-register-tiles",) if wide else ())
    for m in (20, 40, 70):
        exe.update_dimensions({"m": m})
        a = RNG.standard_normal((m, k)).astype(np.float32)
        np.testing.assert_allclose(exe.run({"a": a})["y"], run_ort(model, {"a": a})[0], rtol=1e-4, atol=1e-4,
                                   err_msg=f"M={m} wide={wide}")
        assert rows_running(exe) == [f"gemv_chunked/{32 if wide else 16}", "splitk"], m


@pytest.mark.parametrize("cpu", [1, 0])
def test_gemm_epilogue_and_batched_weights(runtime, cpu):
    b, c = RNG.standard_normal((64, 24)).astype(np.float32), RNG.standard_normal((24,)).astype(np.float32)
    gemm = make_model([h.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.5, beta=2.0)],
                      [("a", np.float32, ["m", 64])], ["y"], {"b": b, "c": c})
    check(runtime, gemm, {"m": 8}, lambda m: {"a": RNG.standard_normal((m, 64)).astype(np.float32)}, [1, 2, 8], cpu)
    bb = RNG.standard_normal((3, 32, 12)).astype(np.float32)
    batched = make_model([h.make_node("MatMul", ["a", "b"], ["y"])], [("a", np.float32, [3, "m", 32])], ["y"],
                         {"b": bb})
    check(runtime, batched, {"m": 4}, lambda m: {"a": RNG.standard_normal((3, m, 32)).astype(np.float32)}, [1, 4], cpu)


@pytest.mark.parametrize("cpu", [1, 0])
def test_float16_weights(runtime, cpu):
    w = RNG.standard_normal((256, 96)).astype(np.float16)
    model = make_model([h.make_node("MatMul", ["a", "w"], ["y"])], [("a", np.float16, ["m", 256])], ["y"], {"w": w})
    check(runtime, model, {"m": 6}, lambda m: {"a": RNG.standard_normal((m, 256)).astype(np.float16)}, [1, 6], cpu,
          rtol=2e-2, atol=5e-2)


@pytest.fixture(scope="module")
def runtime_narrow_reads(wgpu_adapter):
    import onyxia

    return onyxia.Runtime(wgpu_adapter, wide_reads=False)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("wide", [True, False], ids=["64-bit", "32-bit"])
def test_chunked_kernel_reads_b_with_and_without_64_bit_loads(runtime, runtime_narrow_reads, dtype, wide):
    """Where the adapter is CPU-type and has shader-int64 the chunked kernel reads B's vec4s as
    64-bit words (two u64 for float32, one for float16: decode ~20% faster on lavapipe); with
    32-bit loads only (`wide_reads=False`) it reads them as before: the same products."""
    rt = runtime if wide else runtime_narrow_reads
    assert not runtime_narrow_reads.wide_reads
    if wide and not rt.wide_reads:
        pytest.skip(f"{rt.info.summary} reads 32-bit words only (not CPU-type, or no shader-int64)")
    w = (RNG.standard_normal((512, 136)) / np.sqrt(512)).astype(dtype)
    model = make_model([h.make_node("MatMul", ["a", "w"], ["y"])], [("a", dtype, [1, "m", 512])], ["y"], {"w": w})
    compiled = compile_model(model, {"m": 14})
    spec = next(s for s in compiled.shaders if s.label.endswith("gemv_chunked"))
    assert ("b", True) in [(b.name, b.wide) for b in spec.buffers]
    tol = 1e-4 if dtype == np.float32 else 2e-2
    check(rt, model, {"m": 14}, lambda m: {"a": RNG.standard_normal((1, m, 512)).astype(dtype)}, [1, 5, 14], 1,
          rtol=tol, atol=tol)


def lanes_running(exe) -> list[bool]:
    """Per gemv dispatch that runs now: whether it is the 8-lane CPU form (LANES8)."""
    return [bool(dict(exe.model.shaders[d.shader].defs).get("LANES8")) for d in exe.dispatch_commands()
            if all(d.workgroups) and exe.model.shaders[d.shader].label == "matmul/gemv"]


@pytest.mark.parametrize("cpu", [1, 0])
@pytest.mark.parametrize("k,n,split", [(144, 6, False), (37, 30, False), (9000, 10, True), (70_000, 6, True)])
def test_lanes_kernel_where_the_chunked_one_does_not_apply(runtime, cpu, k, n, split):
    # N or K not a multiple of 4 (squeeze-excite products: 144 -> 6): on a CPU-type adapter gemv's
    # barrier-free 8-lane form, its K walked in splits of at most LANES_KCHUNK (9000: three) added
    # by splitk (70,000 x 8 rows: far past lavapipe's ~65,535 loop steps an invocation unsplit);
    # elsewhere the coalesced 256-thread form. Rows 1 to 8, a fused bias + Relu, a
    # batched B read transposed.
    w = (RNG.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = RNG.standard_normal((n,)).astype(np.float32)
    model = make_model([h.make_node("MatMul", ["a", "w"], ["p"]), h.make_node("Add", ["p", "bias"], ["q"]),
                        h.make_node("Relu", ["q"], ["y"])],
                       [("a", np.float32, ["m", k])], ["y"], {"w": w, "bias": bias})
    exe = runtime.load_model(compile_model(model, {"m": 8}))
    exe.assume_adapter("cpu" if cpu else "gpu")
    for m in (1, 3, 8):
        exe.update_dimensions({"m": m})
        a = RNG.standard_normal((m, k)).astype(np.float32)
        np.testing.assert_allclose(exe.run({"a": a})["y"], run_ort(model, {"a": a})[0], rtol=1e-4, atol=1e-4,
                                   err_msg=f"M={m} cpu={cpu}")
        assert lanes_running(exe) == [bool(cpu)], (m, running(exe))
        if cpu:
            assert ("splitk" in running(exe)) == split, running(exe)
    bt = (RNG.standard_normal((2, n, k)) / np.sqrt(k)).astype(np.float32)  # O(1) outputs, as w gives
    batched = make_model([h.make_node("Transpose", ["b"], ["bt"], perm=[0, 2, 1]),
                          h.make_node("MatMul", ["a", "bt"], ["y"])],
                         [("a", np.float32, [2, "m", k]), ("b", np.float32, [2, n, k])], ["y"])
    exe = runtime.load_model(compile_model(batched, {"m": 4}))
    exe.assume_adapter("cpu" if cpu else "gpu")
    for m in (1, 4):
        exe.update_dimensions({"m": m})
        feeds = {"a": RNG.standard_normal((2, m, k)).astype(np.float32), "b": bt}
        np.testing.assert_allclose(exe.run(feeds)["y"], run_ort(batched, feeds)[0], rtol=1e-4, atol=1e-4,
                                   err_msg=f"batched M={m} cpu={cpu}")
        assert lanes_running(exe) == [bool(cpu)], (m, running(exe))
    assert exe.stats.recompiles == 0
