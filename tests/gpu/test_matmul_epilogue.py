"""EpilogueFusionPass on MatMul and Gemm: a bias Add, activations, a residual Add and broadcast
operands run in the product's epilogue, against onnxruntime, for every kernel variant of the
product's Select (chunked, coalesced, register, register16, shared; each forced in turn, and the heuristic on
both adapter kinds), the split-K finish pass, a symbolic M moving between few and many rows,
float32 and float16 storage, tuning off and on. Declines (with their reasons): tests/unit/
test_epilogue_decline.py."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.compiler.passes import default_optimization_passes
from onyxia.operators import core_operator_registry
from onyxia.runtime.select import SelectCommand
from onyxia.runtime.tuner import TuneSettings
from tests.builders.matmul_epilogue import LONG_K, F, K, N, _rand, weight_model
from tests.helpers import make_model, run_ort

pytestmark = pytest.mark.gpu
PRODUCT_KERNELS = {"matmul/gemv_chunked", "matmul/gemv", "matmul/gemm", "matmul/splitk"}
VARIANTS = ("chunked", "coalesced", "register", "register16", "shared")
OWN_KERNEL = {"chunked": "matmul/gemv_chunked", "lanes": "matmul/gemv", "coalesced": "matmul/gemv",
              "register": "matmul/gemv_chunked", "register16": "matmul/gemv_chunked", "shared": "matmul/gemm"}


def compile_fused(model, dims):
    pipeline = CompilerPipeline(core_operator_registry())
    compiled = pipeline.compile(onyxia.load_model(model), dims)
    report = pipeline.context.reports["epilogue-fusion"]
    assert report.fused and not report.skipped, report
    assert not any(op.op_type in ("MatMul", "Gemm", "FusedElementwise") for op in compiled.operations)
    return compiled


def feeds_for(model, dims, rng):
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value or dims[d.dim_param] for d in i.type.tensor_type.shape.dim]
        dtype = np.float16 if i.type.tensor_type.elem_type == 10 else F
        out[i.name] = _rand(rng, shape, dtype)
    return out


def launched(exe) -> set[str]:
    return {exe.model.shaders[d.shader].label for d in exe.dispatch_commands() if all(d.workgroups)}


def compile_unfused(model, dims):
    pipeline = CompilerPipeline(core_operator_registry(), optimize=False)
    for p in default_optimization_passes():
        if p.name != "epilogue-fusion":
            pipeline.add_pass(p)
    return pipeline.compile(onyxia.load_model(model), dims)


def check_every_variant(runtime, model, rows, tol=2e-5, tuning=None, expect_split=False):
    """For each M in `rows` and adapter kind: the heuristic's kernels, then every alternative of
    the product's Select forced in turn (eligible ones), each against onnxruntime and equal to the unfused
    plan's result with the same kernel (the epilogue reads the product as stored, so fusing
    changes no bit, float16 included); no separate elementwise dispatch ever runs and nothing
    recompiles. `tuning` None: the heuristic's choices, whatever ONYXIA_TUNE says."""
    compiled = compile_fused(model, {"M": max(rows)})
    exe = runtime.load_model(compiled, tuning=tuning or TuneSettings(enabled=False))
    plain = runtime.load_model(compile_unfused(model, {"M": max(rows)}), tuning=TuneSettings(enabled=False))
    rng = np.random.default_rng(1)
    seen: set[str] = set()
    by_variant: dict[str, set[str]] = {}
    for m in rows:
        feeds = feeds_for(model, {"M": m}, rng)
        ref = run_ort(model, feeds)[0].astype(F)
        tol_abs = tol * max(1.0, float(np.abs(ref).max()))
        for cpu in (0, 1) if exe.model.adapter_dependent else (None,):  # (a plan may not depend on it)
            for e in (exe, plain):
                e.update_dimensions({"M": m})
                if cpu is not None:
                    e.assume_adapter("cpu" if cpu else "gpu")
            tunables = [c for c in exe.commands if isinstance(c, SelectCommand) and c.tuned]
            plain_tunables = [c for c in plain.commands if isinstance(c, SelectCommand) and c.tuned]
            # every alternative eligible at this M (a few-rows kernel is not past its rows)
            choices = [None] + [k for k, ok in enumerate(tunables[0].eligible) if ok] if tunables else [None]
            for choice in choices:
                if choice is not None:
                    for e, cmds in ((exe, tunables), (plain, plain_tunables)):
                        for c in cmds:
                            e.choose(c, choice)
                out = exe.run(feeds)["y"]
                if tuning is None:  # the same kernel in both plans (a tuner may re-choose at a run)
                    np.testing.assert_array_equal(out, plain.run(feeds)["y"], err_msg=f"M={m} cpu={cpu} {choice}")
                ours = out.astype(F)
                ran = launched(exe)
                variant = tunables[0].step.labels[choice] if choice is not None else "heuristic"
                where = f"M={m} cpu={cpu} variant={variant}"
                assert ran <= PRODUCT_KERNELS, (where, ran)
                seen |= ran
                by_variant.setdefault(variant, set()).update(ran)
                np.testing.assert_allclose(ours, ref, rtol=tol, atol=tol_abs, err_msg=where)
    assert exe.stats.recompiles == 0
    for variant, kernels in by_variant.items():  # each alternative ran its own kernel somewhere
        assert variant == "heuristic" or OWN_KERNEL[variant] in kernels, (variant, kernels)
    assert ("matmul/splitk" in seen) == expect_split, seen
    return exe


@pytest.mark.parametrize("pattern", ["bias", "relu", "sigmoid", "tanh", "gelu", "leaky", "silu", "bias_relu",
                                     "residual", "bias_gelu_residual", "broadcast"])
def test_matmul_epilogue_every_variant(runtime, pattern):
    exe = check_every_variant(runtime, weight_model(pattern), rows=[1, 5, 70])
    [tunable] = [c for c in exe.commands if isinstance(c, SelectCommand) and c.tuned]
    assert tunable.step.labels == VARIANTS


@pytest.mark.parametrize("pattern", ["bias_relu", "broadcast"])
def test_gemm_epilogue_after_alpha_beta_c(runtime, pattern):
    check_every_variant(runtime, weight_model(pattern, gemm=True), rows=[3, 70])


@pytest.mark.parametrize("pattern", ["bias_relu", "bias_gelu_residual"])
def test_split_k_finish_runs_the_epilogue(runtime, pattern):
    # every variant splits a K this long: the epilogue runs once, in matmul/splitk.wgsl
    check_every_variant(runtime, weight_model(pattern, k=LONG_K), rows=[2, 70], tol=1e-4, expect_split=True)


def test_coalesced_split_k_with_gemm(runtime):
    # gemv.wgsl splits K = 512 over two workgroups for one 48-column block
    check_every_variant(runtime, weight_model("bias_relu", k=512, gemm=True), rows=[1, 4], tol=1e-4,
                        expect_split=True)


@pytest.mark.parametrize("pattern", ["bias_relu", "residual", "broadcast"])
def test_float16_storage(runtime, pattern):
    # Rounded as the unfused plan is (the product when stored, then the ops' result once);
    # onnxruntime rounds after each op.
    check_every_variant(runtime, weight_model(pattern, dtype=np.float16), rows=[1, 5, 70], tol=4e-3)


@pytest.mark.parametrize("pattern", ["bias_relu", "residual"])
def test_tuned_and_heuristic_runs_match(runtime, tmp_path, pattern):
    tuning = TuneSettings(enabled=True, cache_dir=tmp_path / "cache", repeats=2, share=None)
    exe = check_every_variant(runtime, weight_model(pattern), rows=[2, 70], tuning=tuning)
    assert exe.stats.tuning_timings > 0


def test_batched_scores_with_a_broadcast_mask(runtime):
    """Attention scores: q [2, 3, M, 8] @ k^T [2, 3, 8, M] / scale + mask [2, 1, M, M] (broadcast
    over heads), then a residual [2, 3, M, M]: batched B, a symbolic N (no chunked variants)."""
    nodes = [h.make_node("MatMul", ["q", "k"], ["p"]), h.make_node("Div", ["p", "scale"], ["s"]),
             h.make_node("Add", ["s", "mask"], ["t"]), h.make_node("Add", ["t", "r"], ["y"])]
    model = make_model(nodes, [("q", F, [2, 3, "M", 8]), ("k", F, [2, 3, 8, "M"]), ("mask", F, [2, 1, "M", "M"]),
                               ("r", F, [2, 3, "M", "M"])], ["y"], {"scale": np.array(2.5, F)}, opset=20)
    check_every_variant(runtime, model, rows=[1, 6, 40])


def test_one_column_product_and_vector_operands(runtime):
    """N = 1 (planned as the transposed product) with a scalar bias, and a 1-D A."""
    rng = np.random.default_rng(6)
    col = make_model([h.make_node("MatMul", ["a", "w"], ["p"]), h.make_node("Add", ["p", "b"], ["q"]),
                      h.make_node("Sigmoid", ["q"], ["y"])], [("a", F, ["M", K])], ["y"],
                     {"w": _rand(rng, (K, 1)), "b": _rand(rng, (1,))}, opset=20)
    check_every_variant(runtime, col, rows=[1, 7, 70])
    vec = make_model([h.make_node("MatMul", ["v", "b"], ["p"]), h.make_node("Add", ["p", "r"], ["y"])],
                     [("v", F, [K]), ("b", F, ["M", K, N]), ("r", F, ["M", N])], ["y"], opset=20)
    check_every_variant(runtime, vec, rows=[1, 3])


def test_saved_plan_loads_and_runs(runtime, tmp_path):
    # plan_check accepts the epilogue's buffers and broadcast params; the loaded plan computes the same
    from onyxia.plan import CompiledModel

    model = weight_model("broadcast", k=LONG_K, gemm=True)
    compile_fused(model, {"M": 9}).save(tmp_path / "m.onyxia")
    exe = runtime.load_model(CompiledModel.load(tmp_path / "m.onyxia"))
    rng = np.random.default_rng(7)
    for m in (9, 2):
        exe.update_dimensions({"M": m})
        feeds = feeds_for(model, {"M": m}, rng)
        np.testing.assert_allclose(exe.run(feeds)["y"], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)




def test_compiled_for_one_row_runs_more(runtime):
    """Compiled at M = 1 (decode), a [1, N] operand must not pin M to 1: the epilogue reads it
    broadcast (it once took it for the output's shape and recorded M = 1 as a plan constraint)."""
    model = weight_model("broadcast")
    exe = runtime.load_model(compile_fused(model, {"M": 1}), tuning=TuneSettings(enabled=False))
    rng = np.random.default_rng(4)
    for m in (1, 5, 70):
        exe.update_dimensions({"M": m})
        feeds = feeds_for(model, {"M": m}, rng)
        ref = run_ort(model, feeds)[0]
        np.testing.assert_allclose(exe.run(feeds)["y"], ref, rtol=2e-5, atol=2e-5 * float(np.abs(ref).max()))
