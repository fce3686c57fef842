"""The memory-aware operation order (compiler/lowering/ordering.py): never a higher peak of live
activations than the plain topological order, lower where the model's order is wasteful, and
deterministic. Results against onnxruntime: tests/gpu/test_memory_order.py."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.plan.cost import activation_memory
from tests.models import bert_encoder, gpt2_block, mixer_block

LLAMA = "tests/data/llm/optimum/llama/model.onnx"
GENAI_INT4 = "tests/data/llm/genai/llama-cpu-int4/model.onnx"


def branches(count: int = 4, width: int = 256) -> onnx.ModelProto:
    """`count` wide branches written producer-first (as exporters often emit Q/K/V): every wide
    tensor is computed before any is reduced, so the plain order holds all of them at once.
    (A LogSoftmax reads each product: an elementwise op there would run in its epilogue.)"""
    rng = np.random.default_rng(0)
    nodes, inits, sums = [], {}, []
    for i in range(count):
        inits[f"w{i}"] = (rng.standard_normal((8, width)) / 4).astype(np.float32)
        nodes.append(h.make_node("MatMul", ["x", f"w{i}"], [f"wide{i}"], name=f"wide{i}"))
    for i in range(count):
        nodes.append(h.make_node("LogSoftmax", [f"wide{i}"], [f"act{i}"], name=f"act{i}"))
        nodes.append(h.make_node("ReduceSum", [f"act{i}", "axis"], [f"sum{i}"], name=f"sum{i}", keepdims=1))
        sums.append(f"sum{i}")
    nodes.append(h.make_node("Sum", sums, ["y"], name="total"))
    inits["axis"] = np.array([-1], np.int64)
    graph = h.make_graph(nodes, "branches", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 8])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                         [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)], ir_version=10)


CASES = {
    "branches": (branches, {"n": 64}),
    "gpt2_block": (lambda: gpt2_block(layers=2), {"batch": 1, "seq": 64}),
    "bert_encoder": (bert_encoder, {"batch": 2, "seq": 32}),
    "mixer_block": (mixer_block, {"batch": 2, "width": 32}),
    "llama": (lambda: LLAMA, {"batch_size": 1, "sequence_length": 16, "past_sequence_length": 16}),
    "genai_int4": (lambda: GENAI_INT4, {"batch_size": 1, "sequence_length": 16, "past_sequence_length": 16,
                                        "total_sequence_length": 32, "kv_cache_dim": 16}),
}


def compile_both(name: str):
    build, dims = CASES[name]
    graph = onyxia.load_model(build())
    registry = onyxia.core_operator_registry()
    plain = CompilerPipeline(registry, memory_order=False).compile(graph, dims)
    ordered = CompilerPipeline(registry).compile(graph, dims)
    return plain, ordered


@pytest.mark.parametrize("name", sorted(CASES))
def test_memory_order_never_raises_the_peak(name):
    plain, ordered = compile_both(name)
    report = ordered.metadata["order"]
    assert report["peak_after"] <= report["peak_before"]
    assert "order" not in plain.metadata
    before, after = activation_memory(plain), activation_memory(ordered)
    print(f"{name}: live tensors peak {report['peak_before']} -> {report['peak_after']} B, buffers in use "
          f"{before.peak_bytes} -> {after.peak_bytes} B, allocated {before.allocated_bytes} -> "
          f"{after.allocated_bytes} B")
    if not report["memory_aware"]:  # kept the plain order: the same plan
        assert [op.name for op in plain.operations] == [op.name for op in ordered.operations]
    assert sorted(op.name for op in plain.operations) == sorted(op.name for op in ordered.operations)


def test_memory_order_lowers_the_peak_of_producer_first_branches():
    plain, ordered = compile_both("branches")
    report = ordered.metadata["order"]
    assert report["memory_aware"]
    wide = 64 * 256 * 4
    assert report["peak_before"] >= 4 * wide
    assert report["peak_after"] <= 2 * wide + 64 * 4 * 8
    names = [op.name for op in ordered.operations]
    # Each wide tensor is reduced right after it is made (its buffer then dies).
    assert names.index("act0") < names.index("wide1")


def test_memory_order_is_deterministic():
    _, first = compile_both("branches")
    _, second = compile_both("branches")
    assert [op.name for op in first.operations] == [op.name for op in second.operations]


def chain(dtype=np.float32) -> onnx.ModelProto:
    """Sigmoid -> MatMul -> Softmax -> Relu -> MatMul -> Softmax -> Neg...: each map's input dies
    at the map (a Softmax makes it: a map right after a MatMul would run in its epilogue)."""
    tp = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes, prev = [], "x"
    for i, op in enumerate(["Sigmoid", "MatMul", "Softmax", "Relu", "MatMul", "Softmax", "Neg", "MatMul"]):
        nodes.append(h.make_node(op, [prev, "w"] if op == "MatMul" else [prev], [f"t{i}"], name=f"n{i}"))
        prev = f"t{i}"
    nodes.append(h.make_node("Abs", [prev], ["y"], name="out"))
    w = (np.random.default_rng(3).standard_normal((8, 8)) / 3).astype(dtype)
    graph = h.make_graph(nodes, "chain", [h.make_tensor_value_info("x", tp, ["n", 8])],
                         [h.make_tensor_value_info("y", tp, None)], [onnx.numpy_helper.from_array(w, "w")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)], ir_version=10)


def test_maps_write_into_their_dying_input():
    graph = onyxia.load_model(chain())
    ordered = CompilerPipeline(onyxia.core_operator_registry()).compile(graph, {"n": 16})
    plain = CompilerPipeline(onyxia.core_operator_registry(), memory_order=False).compile(graph, {"n": 16})
    assert ordered.metadata["memory"]["in_place"] == 2  # Relu, Neg (Sigmoid reads the graph input)
    assert "in_place" not in plain.metadata["memory"]
    assert activation_memory(ordered).allocated_bytes <= activation_memory(plain).allocated_bytes
    root = {n: t.alias_of or n for n, t in ordered.tensors.items()}
    for step in ordered.steps:
        for d in step.dispatches():
            # WebGPU: a buffer bound read-write may not be bound again in the same dispatch.
            written = [root[b.tensor] for b in d.bindings if not b.read_only]
            read = [root[b.tensor] for b in d.bindings if b.read_only]
            assert not set(written) & set(read), ordered.shaders[d.shader].label
    used = {d.shader for s in ordered.steps for d in s.dispatches()}
    assert used == set(range(len(ordered.shaders))), "rewritten maps leave no unused shader behind"
