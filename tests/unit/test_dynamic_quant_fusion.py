"""DynamicQuantFusionPass (compiler/passes/dynamic_quant_fusion.py): which q8 chains it fuses, and
the reason it gives for each one it leaves as written. The fused kernels' results are checked
against onnxruntime in tests/gpu/test_dynamic_quant_matmul.py."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.compiler.pass_api import Stage
from onyxia.operators import core_operator_registry
from tests.builders.dynamic_quant import q8_model


def run(model: onnx.ModelProto, dims=None):
    pipeline = CompilerPipeline(core_operator_registry())
    graph = pipeline.run_passes(onyxia.load_model(model), dims or {"m": 1}, until=Stage.INFERENCE)
    return graph, pipeline.context.reports["dynamic-quant-fusion"]


def ops(graph) -> list[str]:
    return sorted(n.op_type for n in graph.nodes)


def test_chains_on_one_activation_share_a_range():
    graph, report = run(q8_model(32, [16, 8], "int8", "tensor", ("m",)))
    assert ops(graph) == ["DynamicQuantMatMul", "DynamicQuantMatMul", "DynamicRange"]
    assert report.fused == {"x": ["y0", "y1"]} and report.skipped == {}
    ranges = [n for n in graph.nodes if n.op_type == "DynamicRange"][0].outputs[0]
    assert all(n.inputs[4] == ranges for n in graph.nodes if n.op_type == "DynamicQuantMatMul")


def test_a_lone_chain_has_no_shared_range_and_keeps_absent_zero_points_absent():
    graph, report = run(q8_model(32, [8], "uint8", "none", ("m",)))
    (node,) = graph.nodes
    assert node.op_type == "DynamicQuantMatMul" and node.inputs[3:] == [None]


def _variant(change: str) -> onnx.ModelProto:
    model = q8_model(32, [8, 6 if change == "n" else 8], "int8", "tensor", ("m",))
    g = model.graph
    if change == "weight_input":  # B1 fed at run time, not a constant
        b1 = next(i for i in g.initializer if i.name == "b1")
        g.input.append(helper.make_tensor_value_info("b1", TensorProto.INT8, list(b1.dims)))
        g.initializer.remove(b1)
    if change == "acc_output":  # the int32 product is also a graph output
        g.output.append(helper.make_empty_tensor_value_info("acc1"))
    if change == "cast":  # Cast to float16: not the float32 chain (run only up to the pass)
        next(node for node in g.node if node.output[0] == "f1").attribute[0].i = TensorProto.FLOAT16
    return model


def test_every_chain_left_as_written_says_why():
    expected = {"weight_input": "B is not a constant int8 / uint8 matrix",
                "acc_output": "the int32 product is not read by one Cast to float alone",
                "n": "the fused kernel takes N a multiple of 4",
                "cast": "the int32 product is not read by one Cast to float alone"}
    for change, reason in expected.items():
        pipeline = CompilerPipeline(core_operator_registry())
        graph = pipeline.run_passes(onyxia.load_model(_variant(change)), {"m": 1}, until=Stage.RESOLUTION)
        report = pipeline.context.reports["dynamic-quant-fusion"]
        (name, why), = report.skipped.items()
        assert reason in why, (change, why)
        assert report.fused == {"x": ["y0"]}, change
        # the DynamicQuantizeLinear stays for the chain left as written
        assert "DynamicQuantizeLinear" in ops(graph), change
