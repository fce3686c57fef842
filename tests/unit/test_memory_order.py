"""The memory-aware operation order (compiler/lowering/ordering.py): never a higher peak of live
activations than the plain topological order, lower where the model's order is wasteful, and
deterministic. Results against onnxruntime: tests/gpu/test_memory_order.py."""

from __future__ import annotations

import pytest

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.plan.cost import activation_memory
from tests.builders.memory_order import branches, chain
from tests.models import bert_encoder, gpt2_block, mixer_block

LLAMA = "tests/data/llm/optimum/llama/model.onnx"
GENAI_INT4 = "tests/data/llm/genai/llama-cpu-int4/model.onnx"


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
