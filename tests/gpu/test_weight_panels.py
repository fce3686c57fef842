"""WeightPanelsPass: constant product weights stored in column panels, read by every kernel
variant of MatMul / Gemm on both adapter kinds, against onnxruntime; the weights it leaves
row-major and why."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.operators import core_operator_registry
from onyxia.operators.matmul.panels import PANEL_COLUMNS, from_panels, to_panels
from onyxia.runtime.select import SelectCommand
from onyxia.runtime.tuner import TuneSettings
from tests.helpers import make_model, run_ort

F = np.float32


def compile_with_report(model, dims):
    pipeline = CompilerPipeline(core_operator_registry())
    compiled = pipeline.compile(onyxia.load_model(model), dims)
    return compiled, pipeline.context.reports["weight-panels"]


@pytest.mark.parametrize("k,n", [(4, 36), (12, 68), (24, 100), (8, 128)])
def test_panel_order_round_trips_and_places_each_element(k, n):
    b = np.arange(k * n, dtype=F).reshape(k, n)
    p = to_panels(b)
    assert p.shape == b.shape
    np.testing.assert_array_equal(from_panels(p), b)
    flat = p.reshape(-1)
    for kk in range(k):
        for nn in range(n):  # the index shaders/matmul/panels.wgsl computes
            first = nn - nn % PANEL_COLUMNS
            width = min(PANEL_COLUMNS, n - first)
            assert flat[first * k + kk * width + nn - first] == b[kk, nn]


def product_model(k: int, n: int, *, gemm_trans_b: bool = False, dtype=F):
    rng = np.random.default_rng(k * 1000 + n)
    w = (rng.standard_normal((n, k) if gemm_trans_b else (k, n)) / np.sqrt(k)).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype)
    if gemm_trans_b:
        node = h.make_node("Gemm", ["a", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)
    else:
        node = h.make_node("MatMul", ["a", "w"], ["p"])
    nodes = [node] if gemm_trans_b else [node, h.make_node("Add", ["p", "c"], ["y"])]
    return make_model(nodes, [("a", dtype, ["M", k])], ["y"], {"w": w, "c": bias}, opset=20)


@pytest.mark.parametrize("k,n,gemm_trans_b", [(24, 68, False), (64, 100, True), (36, 40, False)])
def test_every_variant_reads_the_panels(runtime, k, n, gemm_trans_b):
    """Every eligible alternative of the product's Select, on both adapter kinds, for decode, short
    and long prompts: the same result as onnxruntime's from the row-major weight."""
    model = product_model(k, n, gemm_trans_b=gemm_trans_b)
    compiled, report = compile_with_report(model, {"M": 70})
    assert list(report.panels) == ["w"] and not report.skipped, report
    assert "w" not in compiled.tensors and any(t.startswith("w/panels") for t in compiled.tensors)
    exe = runtime.load_model(compiled, tuning=TuneSettings(enabled=False))
    rng = np.random.default_rng(0)
    for m in (1, 3, 20, 70):
        a = rng.standard_normal((m, k)).astype(F)
        ref = run_ort(model, {"a": a})[0]
        for cpu in (0, 1):
            exe.update_dimensions({"M": m})
            exe.assume_adapter("cpu" if cpu else "gpu")
            tunables = [c for c in exe.commands if isinstance(c, SelectCommand) and c.tuned]
            assert tunables
            for choice in range(len(tunables[0].step.labels)):
                if not tunables[0].eligible[choice]:  # a few-rows kernel past its rows
                    continue
                for c in tunables:
                    exe.choose(c, choice)
                np.testing.assert_allclose(exe.run({"a": a})["y"], ref, rtol=2e-5, atol=2e-5,
                                           err_msg=f"M={m} cpu={cpu} {tunables[0].step.labels[choice]}")
    assert exe.stats.recompiles == 0


def test_float16_weights_in_panels(runtime):
    model = product_model(32, 72, dtype=np.float16)
    compiled, report = compile_with_report(model, {"M": 1})
    assert list(report.panels) == ["w"]
    exe = runtime.load_model(compiled, tuning=TuneSettings(enabled=False))
    a = np.random.default_rng(1).standard_normal((1, 32)).astype(np.float16)
    for cpu in (0, 1):
        exe.assume_adapter("cpu" if cpu else "gpu")
        np.testing.assert_allclose(exe.run({"a": a})["y"].astype(F), run_ort(model, {"a": a})[0].astype(F),
                                   rtol=4e-3, atol=4e-3, err_msg=f"cpu={cpu}")


def test_weights_left_row_major_say_why():
    rng = np.random.default_rng(2)
    inits = {
        "tied": rng.standard_normal((40, 64)).astype(F),  # also a Gather's table: stored once
        "narrow": rng.standard_normal((64, 32)).astype(F),  # one panel wide
        "odd": rng.standard_normal((64, 42)).astype(F),  # N not a multiple of 4
    }
    nodes = [h.make_node("Gather", ["tied", "ids"], ["e"]),
             h.make_node("MatMul", ["a", "tied"], ["t"]),
             h.make_node("MatMul", ["x", "narrow"], ["u"]),
             h.make_node("MatMul", ["x", "odd"], ["v"])]
    model = make_model(nodes, [("ids", np.int64, [3]), ("a", F, [2, 40]), ("x", F, [2, 64])],
                       ["e", "t", "u", "v"], inits, opset=20)
    _, report = compile_with_report(model, {})
    assert not report.panels
    assert "Gather" in report.skipped["tied"]
    assert "fits one panel" in report.skipped["narrow"]
    assert "multiples of 4" in report.skipped["odd"]
