"""ConvBatchNormPass: which Conv -> BatchNormalization pairs fold, which stay and why (the folded
values are checked against onnxruntime in tests/gpu/test_conv_epilogue.py)."""

from __future__ import annotations

import numpy as np
import onnx.reference
import pytest
from onnx import helper

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.compiler.pass_api import Pass, PassResult, Stage
from onyxia.compiler.passes import ConvBatchNormPass
from onyxia.operators import core_operator_registry
from tests.helpers import compile_with_default_passes, make_model


def _model(extra=(), outputs=("y",), feed_mean=False, bias=True):
    rng = np.random.default_rng(0)
    inits = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32),
             "s": rng.standard_normal(4).astype(np.float32), "bb": rng.standard_normal(4).astype(np.float32),
             "m": rng.standard_normal(4).astype(np.float32), "v": rng.random(4).astype(np.float32) + 0.5}
    inputs = [("x", np.float32, [1, 3, 6, 6])]
    if feed_mean:
        del inits["m"]
        inputs.append(("m", np.float32, [4]))
    if not bias:
        del inits["b"]
    nodes = [helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["c"], name="conv"),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["y"], name="bn", epsilon=1e-3),
             *extra]
    return make_model(nodes, inputs, list(outputs), inits, opset=15)


def _report(model):
    pipeline, compiled = compile_with_default_passes(model, {})
    return pipeline.context.reports["conv-batchnorm"], compiled


def test_folds_into_the_conv_weights():
    report, compiled = _report(_model())
    assert report.folded == {"bn": "conv"}
    assert [op.op_type for op in compiled.operations if op.steps] == ["Conv"]


class _Capture(Pass):
    """Keeps the graph as the passes before it left it."""

    name = "capture"
    stage = Stage.OPTIMIZATION

    def run(self, graph, ctx) -> PassResult:
        self.graph = graph
        return PassResult(False, "")


@pytest.mark.parametrize("bias", [True, False])
def test_folded_weights_compute_the_pair(bias):
    """The rewritten Conv's constants against onnx.reference running the original pair."""
    model = _model(bias=bias)
    pipeline, capture = CompilerPipeline(core_operator_registry(), optimize=False), _Capture()
    pipeline.add_pass(ConvBatchNormPass())
    pipeline.add_pass(capture)
    pipeline.compile(onyxia.load_model(model), {})
    (conv,) = [capture.graph.node(n) for n in capture.graph.topological_order()]
    assert conv.op_type == "Conv"
    w, b = (capture.graph.tensor(t).value for t in conv.inputs[1:])
    x = np.random.default_rng(1).standard_normal((1, 3, 6, 6)).astype(np.float32)
    ref = onnx.reference.ReferenceEvaluator(model).run(None, {"x": x})[0]
    folded = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"])], [("x", np.float32, [1, 3, 6, 6])],
                        ["y"], {"w": w, "b": b}, opset=15)
    ours = onnx.reference.ReferenceEvaluator(folded).run(None, {"x": x})[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


def test_leaves_alone_with_reasons():
    cases = {
        "not a constant": _model(feed_mean=True),
        "read by 2 nodes": _model(extra=[helper.make_node("Relu", ["c"], ["r"])], outputs=("y", "r")),
    }
    for why, model in cases.items():
        report, _ = _report(model)
        assert not report.folded and why in report.skipped["bn"], (why, report)
