"""com.microsoft contrib operators without a GPU: shape inference, errors, plans, the pack pass."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import onyxia
from onyxia.compiler import CompilerPipeline, Stage
from onyxia.errors import OnyxiaError, ShapeInferenceError
from onyxia.ir.shapes import SymDim, dim_symbols, evaluate_dim
from onyxia.operators import core_operator_registry
from onyxia.operators.attention.gqa import SHARE_BUFFER_ATTR
from onyxia.plan import CopyBuffer, Dispatch, Select
from tests.builders.contrib_infer import MS, compile_graph, gqa
from tests.helpers import live_dispatches, make_model

S, P = SymDim.symbol("S"), SymDim.symbol("P")


def infer(model, dims=None, *, share: bool = False, passes=()):
    """The graph after shape inference (and optimization when `passes` are given)."""
    graph = onyxia.load_model(model)
    if share:
        for node in graph.nodes:
            node.attributes[SHARE_BUFFER_ATTR] = 1
    pipeline = CompilerPipeline(core_operator_registry())
    for p in passes:
        pipeline.add_pass(p)
    if dims is None:  # every symbol of the inputs at 2
        dims = {sym: 2 for t in graph.inputs for d in graph.tensor(t).shape for sym in dim_symbols(d)}
    return pipeline.run_passes(graph, dims, until=Stage.OPTIMIZATION if passes else Stage.INFERENCE)


# ---- GroupQueryAttention ------------------------------------------------------------------


def test_gqa_growing_cache_shapes_are_symbolic():
    g = infer(gqa())
    assert g.tensor("o").shape == (1, S, 64)
    assert g.tensor("prk").shape == (1, 2, P + S, 16)


def test_gqa_packed_qkv_head_size():
    g = infer(gqa(packed=True))
    assert g.tensor("o").shape == (1, S, 64) and g.tensor("prv").shape == (1, 2, P + S, 16)


def test_gqa_shared_buffer_keeps_the_capacity():
    assert infer(gqa(cache=32), share=True).tensor("prk").shape == (1, 2, 32, 16)
    # a constant total_sequence_length decides as onnxruntime does: present = max(total, past)
    assert infer(gqa(cache=32, total=9)).tensor("prk").shape == (1, 2, 32, 16)
    assert infer(gqa(cache=5, total=9), {"S": 4}).tensor("prk").shape == (1, 2, 5 + S, 16)


def test_gqa_shared_buffer_aliases_a_graph_input_past():
    compiled = compile_graph(gqa(cache=32), {"S": 4}, share=True)
    assert compiled.tensors["prk"].alias_of == "pk" and compiled.tensors["prv"].alias_of == "pv"
    assert not any(isinstance(s, CopyBuffer) for s in compiled.steps)


def test_gqa_plan_takes_lengths_as_immediates():
    """Sequence and past lengths change per decode step: they must never be baked into shaders."""
    compiled = compile_graph(gqa(), {"S": 5, "P": 0})
    # the new K/V, then a Select of the attention kernels (64 threads for a GPU, 8 for a CPU-type
    # adapter, the tiled prompt kernel), each with the merge of its key splits (itself a Select:
    # none for one split)
    assert compiled.num_dispatches == 7
    for spec in compiled.shaders:
        baked = {p.name for p, _ in spec.constants}
        assert not baked & {"S", "T", "N", "SPLITS"}, spec.label
        lengths = {"S", "SPLITS"} if spec.label == "attention_combine" else {"S", "T"}
        assert lengths <= {p.name for p in spec.immediates}, spec.label
    assert all(isinstance(s, (Dispatch, Select)) for s in compiled.steps)


def _live_attention(compiled, dims, adapter: str) -> list[str]:
    """Labels (with workgroup size) of the attention dispatches a run at `dims` encodes."""
    live = []
    for step in live_dispatches(compiled, dims, adapter):
        spec = compiled.shaders[step.shader]
        live.append(f"{spec.label}/{dict(spec.defs).get('ATT_WG', '')}".rstrip("/"))
    return live


@pytest.mark.parametrize("share", [False, True])
def test_gqa_on_a_cpu_adapter_runs_the_tiled_kernel(share):
    """One plan: a CPU-type adapter runs gqa_flash.wgsl (8 (head, row) pairs per workgroup) for
    prompts and decode steps, a GPU-type adapter the 64-thread per-row kernel; switching costs no
    recompilation (grids only)."""
    compiled = compile_graph(gqa(cache=40 if share else "P"), {"S": 9} if share else {"S": 9, "P": 3}, share=share)
    assert "gqa_flash" in {s.label for s in compiled.shaders}
    past = {} if share else {"P": 3}
    for seq, cpu, kernel in ((9, 1, "gqa_flash"), (2, 1, "gqa_flash"), (1, 1, "gqa_flash"),
                             (9, 0, "gqa_attention/64"), (1, 0, "gqa_attention/64")):
        live = _live_attention(compiled, {"S": seq, **past}, "cpu" if cpu else "gpu")
        assert live == ["gqa_kv", kernel], (seq, cpu, live)
    flash = next(s for s in compiled.steps for d in s.dispatches() if compiled.shaders[d.shader].label == "gqa_flash")
    assert dict(compiled.shaders[flash.shader].defs)["HB"] == 2  # the 2 query heads of a KV head
    for seq, grid in ((17, [2, 5, 1]), (1, [2, 1, 1])):  # 2 head pairs, ceil(S / 4) row blocks, batch
        env = {**compiled.dims, "S": seq, **past}
        assert [evaluate_dim(w, env) for w in flash.workgroups] == grid


def test_gqa_large_heads_keep_the_per_row_kernel():
    heads, kv, d = 2, 1, 160
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "sl", "tl"], ["o", "prk", "prv"],
                            domain="com.microsoft", num_heads=heads, kv_num_heads=kv)
    model = make_model([node], [("q", np.float32, [1, "S", heads * d]), ("k", np.float32, [1, "S", kv * d]),
                                ("v", np.float32, [1, "S", kv * d]), ("sl", np.int32, [1]), ("tl", np.int32, [])],
                       ["o", "prk", "prv"], extra_opsets=MS)
    compiled = compile_graph(model, {"S": 6})
    assert "gqa_flash" not in {s.label for s in compiled.shaders}
    assert _live_attention(compiled, {}, "cpu") == ["gqa_kv", "gqa_attention/8"]


@pytest.mark.parametrize("kwargs,needle", [
    (dict(num_heads=3), "multiple of kv_num_heads"),
    (dict(smooth_softmax=1), "smooth_softmax"),
    (dict(do_rotary=1), "cos_cache"),
    (dict(extra_inputs=("", "", "", "bias")), "attention_bias"),
])
def test_gqa_rejects_clearly(kwargs, needle):
    extra = kwargs.pop("extra_inputs", ())
    model = gqa(extra_inputs=extra, **kwargs) if "num_heads" not in kwargs else None
    if model is None:  # num_heads is set by gqa(); rebuild the node with the bad value
        model = gqa()
        for a in model.graph.node[0].attribute:
            if a.name == "num_heads":
                a.i = kwargs["num_heads"]
    with pytest.raises(ShapeInferenceError, match=needle) as err:
        infer(model)
    assert "gqa" in str(err.value)


# ---- RotaryEmbedding ----------------------------------------------------------------------

def test_rotary_embedding_shape_and_errors():
    angles = np.zeros((16, 4), np.float32)
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft",
                            name="rope")
    model = make_model([node], [("x", np.float32, [2, "S", 16]), ("pos", np.int64, [2, "S"])], ["y"],
                       {"cos": angles, "sin": angles}, extra_opsets=MS)
    assert infer(model).tensor("y").shape == (2, S, 16)
    node.attribute.extend([helper.make_attribute("is_packed_batching", 1)])
    bad = make_model([node], [("x", np.float32, [2, "S", 16]), ("pos", np.int64, [2, "S"])], ["y"],
                     {"cos": angles, "sin": angles}, extra_opsets=MS)
    with pytest.raises(ShapeInferenceError, match="is_packed_batching"):
        infer(bad)


# ---- MatMulNBits / GatherBlockQuantized ---------------------------------------------------

def nbits(k=64, n=8, block=32, bits=4, extra=(), zero_points=True, **attrs):
    nblk = -(-k // block)
    inits = {"B": np.arange(n * nblk * block // 2, dtype=np.uint8).reshape(n, nblk, block // 2),
             "s": np.ones(n * nblk, np.float32), "zp": np.full(n * ((nblk + 1) // 2), 0x88, np.uint8)}
    names = ["A", "B", "s", "zp" if zero_points else "", *extra]
    for name in extra:
        if name:
            inits[name] = np.zeros(n, np.int32 if name == "g_idx" else np.float32)
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft", name="mm", K=k, N=n,
                            bits=bits, block_size=block, **attrs)
    return make_model([node], [("A", np.float32, [2, "S", k])], ["Y"], inits, extra_opsets=MS)


def test_matmul_nbits_shape():
    assert infer(nbits()).tensor("Y").shape == (2, S, 8)


@pytest.mark.parametrize("kwargs,needle", [
    (dict(bits=8), "attribute 'bits' = 8"),
    (dict(block=24), "block_size"),
    (dict(extra=("g_idx",)), "g_idx"),
    (dict(extra=("", "bias")), None),  # a bias is fine
])
def test_matmul_nbits_rejects_clearly(kwargs, needle):
    if needle is None:
        infer(nbits(**kwargs))
        return
    with pytest.raises(OnyxiaError, match=needle) as err:
        infer(nbits(**kwargs))
    assert "'mm'" in str(err.value) and "MatMulNBits" in str(err.value)


def test_matmul_nbits_symbolic_rows_plan_both_kernels():
    compiled = compile_graph(nbits(), {"S": 1})
    labels = sorted(compiled.shaders[d.shader].label for s in compiled.steps for d in s.dispatches())
    # + the chunked kernel (CPU-type adapters), one dispatch for decode and one for more rows
    assert labels == ["matmul_nbits_chunked", "matmul_nbits_chunked", "matmul_nbits_gemv", "matmul_nbits_tiled"]


def test_nbits_weights_keep_their_packed_bytes_on_the_device():
    """uint8 is stored 4 bytes to a word: the plan uploads B and the zero points as they are."""
    compiled = onyxia.CompilerPipeline(onyxia.core_operator_registry()).compile(onyxia.load_model(nbits()), {"S": 1})
    b = compiled.tensors["B"]
    assert b.dtype == "uint8" and b.storage == "u8" and b.nbytes == b.data.size == 8 * 2 * 16
    assert compiled.tensors["zp"].nbytes == 8  # 8 zero-point bytes: two words


def gbq(**attrs):
    node = helper.make_node("GatherBlockQuantized", ["d", "i", "s"], ["y"], domain="com.microsoft", name="gbq",
                            block_size=16, **attrs)
    return make_model([node], [("i", np.int64, ["n"])], ["y"],
                      {"d": np.zeros((10, 16), np.uint8), "s": np.ones((10, 2), np.float32)}, extra_opsets=MS)


def test_gather_block_quantized_shape_and_errors():
    assert infer(gbq()).tensor("y").shape == (SymDim.symbol("n"), 32)
    with pytest.raises(ShapeInferenceError, match="attribute 'bits' = 2"):
        infer(gbq(bits=2))
    with pytest.raises(ShapeInferenceError, match="quantize_axis"):
        infer(gbq(quantize_axis=0))
