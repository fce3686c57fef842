"""The few-rows matmul heuristic (operators/matmul/gemv.py), replayed without a GPU: which kernel each
adapter kind runs for each row count, from one plan, with nothing rebuilt when either changes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from onnx import helper as h

from onyxia.runtime.device import AdapterInfo, has_guarded_loads, has_wide_register_tiles
from onyxia.runtime.null import NULL_LIMITS, null_executor
from onyxia.runtime.select import adapter_facts
from tests.builders.gemv_heuristic import running
from tests.helpers import compile_model, make_model

pytestmark = pytest.mark.usefixtures("heuristic")  # the heuristic's choice is under test: no tuning


def weight_matmul(k: int, n: int, dtype=np.float32):
    w = np.zeros((k, n), dtype)
    return make_model([h.make_node("MatMul", ["a", "w"], ["y"])], [("a", dtype, ["m", k])], ["y"], {"w": w})


# cpu: 0 a GPU, 1 a CPU-type adapter, 2 one with wide register tiles (lavapipe before Mesa 25)
@pytest.mark.parametrize("cpu,m,expected", [
    (1, 1, ["gemv_chunked/1"]), (1, 3, ["gemv_chunked/4"]), (1, 5, ["gemv_chunked/16"]),
    (1, 16, ["gemv_chunked/16"]), (2, 16, ["gemv_chunked/16"]), (1, 17, ["gemv_chunked/16"]),
    (2, 17, ["gemv_chunked/32"]), (1, 64, ["gemv_chunked/16"]), (2, 64, ["gemv_chunked/32"]),
    (1, 65, ["gemv_chunked/16"]), (2, 65, ["gemv_chunked/32"]),  # many rows: gemm_variants' register variants
    (2, 1, ["gemv_chunked/1"]),
    (0, 1, ["gemv", "splitk"]), (0, 8, ["gemv", "splitk"]), (0, 9, ["gemm"]), (0, 65, ["gemm"]),  # split-K fills a GPU
])
def test_one_kernel_runs_per_adapter_kind_and_row_count(cpu, m, expected):
    exe = null_executor(compile_model(weight_matmul(512, 1024), {"m": 80}))
    exe.update_dimensions({"m": m})
    exe.assume_adapter("cpu" if cpu else "gpu", ("wide-register-tiles",) if cpu == 2 else ())
    assert running(exe) == expected
    assert exe.stats.recompiles == 0 and exe.stats.reallocs == 0


@pytest.mark.parametrize("m,wide,expected", [(40, True, "gemv_chunked/32"), (40, False, "gemv_chunked/16"),
                                             (16, True, "gemv_chunked/16"), (300, False, "gemv_chunked/16")])
def test_a_static_row_count_takes_the_tile_its_adapter_runs_fastest(m, wide, expected):
    """A static M of 17 or more plans both tiles: 32 rows where the adapter has wide register
    tiles (lavapipe before Mesa 25), 16 elsewhere; fewer rows plan their class alone."""
    exe = null_executor(compile_model(weight_matmul(512, 1024), {"m": m}, static=["m"]))
    exe.assume_adapter("cpu", ("wide-register-tiles",) if wide else ())
    assert running(exe) == [expected]


@pytest.mark.parametrize("driver,kind,wide,guarded", [
    ("Mesa 22.3.6 (LLVM 15.0.6)", "CPU", True, False), ("Mesa 24.2.8", "CPU", True, False),
    ("Mesa 25.0.7-2~bpo12+1 (LLVM 15.0.6)", "CPU", False, True), ("Mesa 26.1.0", "CPU", False, True),
    ("Mesa 22.3.6", "IntegratedGPU", False, False), ("Mesa 25.0.7", "IntegratedGPU", False, False),
    ("", "CPU", False, False),
])
def test_the_lavapipe_traits_follow_its_mesa_version(driver, kind, wide, guarded):
    # wide-register-tiles before Mesa 25, guarded-loads from it on; neither on other adapters
    info = AdapterInfo("llvmpipe (LLVM 15.0.6, 256 bits)", kind, "Vulkan", "summary", "llvmpipe", driver)
    assert (has_wide_register_tiles(info), has_guarded_loads(info)) == (wide, guarded)
    limits = replace(NULL_LIMITS, cpu_adapter=True, wide_register_tiles=wide, guarded_loads=guarded)
    assert adapter_facts(limits).traits == frozenset(name for name, has in (("wide-register-tiles", wide),
                                                                            ("guarded-loads", guarded)) if has)


def test_the_runtime_takes_the_adapter_kind_from_its_limits():
    model = compile_model(weight_matmul(64, 32), {"m": 1})
    assert model.adapter_dependent and set(model.dims) == {"m"}  # no symbol of the runtime's own
    assert running(null_executor(model, limits=replace(NULL_LIMITS, cpu_adapter=True))) == ["gemv_chunked/1"]
    assert running(null_executor(model, limits=replace(NULL_LIMITS, cpu_adapter=False))) == ["gemv"]


@pytest.mark.parametrize("k,n,dtype", [(30, 64, np.float32), (64, 30, np.float32), (64, 32, np.int32)])
def test_the_chunked_kernel_needs_vec4_rows_of_floats(k, n, dtype):
    # K or N not a multiple of 4, or an integer product: no chunked kernel. A CPU-type adapter
    # runs gemv's barrier-free 8-lane form (LANES8: squeeze-excite products), a GPU the coalesced one.
    model = compile_model(weight_matmul(k, n, dtype), {"m": 3})
    assert "matmul/gemv_chunked" not in {s.label for s in model.shaders}
    exe = null_executor(model)
    for kind, lanes in (("cpu", True), ("gpu", False)):
        exe.assume_adapter(kind)
        shaders = [exe.model.shaders[d.shader] for d in exe.dispatch_commands() if all(d.workgroups)]
        assert [s.label for s in shaders] == ["matmul/gemv"], kind
        assert bool(dict(shaders[0].defs).get("LANES8")) == lanes, kind


def test_a_k_longer_than_one_walk_is_split():
    model = compile_model(weight_matmul(40_000, 8), {"m": 1})
    exe = null_executor(model, limits=replace(NULL_LIMITS, cpu_adapter=True))
    assert running(exe) == ["gemv_chunked/1", "splitk"]
    chunked = next(s for s in model.shaders if s.label == "matmul/gemv_chunked")
    params = {p.name: v for p, v in chunked.constants}
    assert params["SPLITS"] == 3 and params["KCHUNK"] * 3 >= 40_000 and params["KCHUNK"] <= 16384


def test_squeeze_excite_convs_share_their_one_row_kernel():
    # Pointwise convs over a pooled [N, C, 1, 1] map (squeeze-excite: a CNN has a dozen of other
    # sizes) take their sizes as immediates in the one-row chunked kernel, so both share it;
    # a MatMul's one-row kernel (decode) keeps its sizes baked.
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 16, 1, 1)).astype(np.float32)
    w2 = rng.standard_normal((16, 8, 1, 1)).astype(np.float32)
    se = make_model([h.make_node("Conv", ["x", "w1"], ["h"]), h.make_node("Relu", ["h"], ["r"]),
                     h.make_node("Conv", ["r", "w2"], ["g"]), h.make_node("Relu", ["g"], ["y"])],
                    [("x", np.float32, ["n", 16, 1, 1])], ["y"], {"w1": w1, "w2": w2})
    one_row = [s for s in compile_model(se, {"n": 1}).shaders
               if s.label == "matmul/gemv_chunked" and dict(s.defs)["ROWS"] == 1]
    assert len(one_row) == 1 and not one_row[0].constants, one_row
    decode = [s for s in compile_model(weight_matmul(64, 32), {"m": 1}).shaders
              if s.label == "matmul/gemv_chunked" and dict(s.defs)["ROWS"] == 1]
    assert decode and all({p.name for p, _ in s.constants} >= {"K", "N"} for s in decode), decode
