"""com.microsoft GroupQueryAttention and RotaryEmbedding against onnxruntime.

GQA runs as an LLM would: one compile, a prefill (past length 0), then decode steps of one
token feeding present back as past, with the lengths changed through update_dimensions and
no recompilation. Both KV cache layouts are covered: growing (present = past + new) and the
shared buffer (past and present have a fixed capacity; onnxruntime picks it because its
present length is max(total, past)).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.operators import core_operator_registry
from onyxia.operators.attention.gqa import SHARE_BUFFER_ATTR
from tests.builders.attention import HEAD, KV_HEADS, MS, Q_HEADS, gqa_model
from tests.helpers import compile_model, make_model, run_ort


def compile_shared(model, dims):
    """Compile with the shared-buffer layout requested on the IR node (onnxruntime rejects the attribute)."""
    graph = onyxia.load_model(model)
    for node in graph.nodes:
        node.attributes[SHARE_BUFFER_ATTR] = 1
    return CompilerPipeline(core_operator_registry()).compile(graph, dims)


def feeds_for(rng, *, packed, batch, seq, head=HEAD):
    hidden = (Q_HEADS + 2 * KV_HEADS) * head if packed else Q_HEADS * head
    f = {"q": rng.standard_normal((batch, seq, hidden), dtype=np.float32)}
    if not packed:
        f["k"] = rng.standard_normal((batch, seq, KV_HEADS * head), dtype=np.float32)
        f["v"] = rng.standard_normal((batch, seq, KV_HEADS * head), dtype=np.float32)
    return f


CASES = {
    "separate": dict(packed=False, batch=1),
    "packed-rotary-softcap-scale": dict(packed=True, batch=1, rotary=True, softcap=1.5, scale=0.2),
    "separate-rotary-interleaved-window": dict(packed=False, batch=1, rotary=True, rotary_interleaved=1,
                                               local_window_size=3),
    "packed-window-softcap-batch2": dict(packed=True, batch=2, local_window_size=2, softcap=3.0),
    # more keys than a workgroup (64) and a head wider than one (2 columns per thread)
    "long-prompt-wide-head-rotary": dict(packed=False, batch=1, rotary=True, head=80, prompt=70),
    "long-prompt-window": dict(packed=True, batch=1, local_window_size=67, head=32, prompt=70),
}


@pytest.mark.parametrize("cpu", [0, 1], ids=["gpu-kernel", "cpu-kernel"])
@pytest.mark.parametrize("layout", ["growing", "shared"])
@pytest.mark.parametrize("case", list(CASES))
def test_gqa_prefill_then_decode(runtime, case, layout, cpu):
    """Each attention kernel (64 threads for a GPU, 8 for a CPU-type adapter: assume_adapter),
    whatever this adapter is."""
    cfg = dict(CASES[case])
    packed, batch, head = cfg["packed"], cfg["batch"], cfg.get("head", HEAD)
    prompt, steps = cfg.pop("prompt", 5), 3
    capacity = prompt + steps + 4
    shared = layout == "shared"
    model = gqa_model(cache=capacity if shared else "P", **cfg)
    dims = {"S": prompt} if shared else {"S": prompt, "P": 0}
    compiled = compile_shared(model, dims) if shared else compile_model(model, dims)
    exe = runtime.load_model(compiled)
    exe.assume_adapter("cpu" if cpu else "gpu")
    rng = np.random.default_rng(hash(case) % 1000)

    cache_len = capacity if shared else 0
    zeros = np.zeros((batch, KV_HEADS, cache_len, head), np.float32)
    ours_past = ort_past = (zeros, zeros)
    total = 0
    for step in range(steps + 1):
        seq = prompt if step == 0 else 1
        total += seq
        if step:
            exe.update_dimensions({"S": 1} if shared else {"S": 1, "P": total - 1})
        f = feeds_for(rng, packed=packed, batch=batch, seq=seq, head=head)
        f["sl"] = np.full(batch, total - 1, np.int32)
        f["tl"] = np.array(total, np.int32)
        ref = run_ort(model, {**f, "pk": ort_past[0], "pv": ort_past[1]})
        ours = exe.run({**f, "pk": ours_past[0], "pv": ours_past[1]})
        np.testing.assert_allclose(ours["o"], ref[0], rtol=1e-4, atol=1e-5, err_msg=f"step {step} output")
        for name, r in zip(("prk", "prv"), ref[1:]):
            assert ours[name].shape == r.shape
            # onnxruntime leaves rows past total_sequence_length of an unshared present undefined
            np.testing.assert_allclose(ours[name][:, :, :total], r[:, :, :total], rtol=1e-5, atol=1e-6,
                                       err_msg=f"step {step} {name}")
        ours_past, ort_past = (ours["prk"], ours["prv"]), (ref[1], ref[2])
    assert exe.stats.recompiles == 0


def test_gqa_shared_buffer_zero_copy_with_device_tensors(runtime):
    """present aliases the past input's buffer: feeding it back as a DeviceTensor copies nothing."""
    capacity, prompt = 10, 4
    model = gqa_model(packed=False, batch=1, cache=capacity, rotary=True)
    compiled = compile_shared(model, {"S": prompt})
    assert compiled.tensors["prk"].alias_of == "pk"
    exe = runtime.load_model(compiled)
    rng = np.random.default_rng(3)
    past = np.zeros((1, KV_HEADS, capacity, HEAD), np.float32)
    ort_past = (past, past)
    ours_past: tuple = (past, past)
    total = 0
    for step in range(4):
        seq = prompt if step == 0 else 1
        total += seq
        exe.update_dimensions({"S": seq})
        f = {**feeds_for(rng, packed=False, batch=1, seq=seq), "sl": np.array([total - 1], np.int32),
             "tl": np.array(total, np.int32)}
        ref = run_ort(model, {**f, "pk": ort_past[0], "pv": ort_past[1]})
        ours = exe.run({**f, "pk": ours_past[0], "pv": ours_past[1]}, outputs=["o"], device_outputs=["prk", "prv"])
        np.testing.assert_allclose(ours["o"], ref[0], rtol=1e-4, atol=1e-5, err_msg=f"step {step}")
        key = exe.read_tensor(ours["prk"])
        np.testing.assert_allclose(key[:, :, :total], ref[1][:, :, :total], rtol=1e-5, atol=1e-6)
        ours_past, ort_past = (ours["prk"], ours["prv"]), (ref[1], ref[2])


def test_gqa_without_past_and_bidirectional(runtime):
    """A prefill-only node (no past inputs) with causal=0."""
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "sl", "tl"], ["o", "prk", "prv"],
                            domain="com.microsoft", num_heads=Q_HEADS, kv_num_heads=KV_HEADS, causal=0)
    seq = 6
    model = make_model([node], [("q", np.float32, [1, "S", Q_HEADS * HEAD]),
                                ("k", np.float32, [1, "S", KV_HEADS * HEAD]),
                                ("v", np.float32, [1, "S", KV_HEADS * HEAD]),
                                ("sl", np.int32, [1]), ("tl", np.int32, [])], ["o", "prk", "prv"], extra_opsets=MS)
    f = {**feeds_for(np.random.default_rng(5), packed=False, batch=1, seq=seq),
         "sl": np.array([seq - 1], np.int32), "tl": np.array(seq, np.int32)}
    exe = runtime.load_model(compile_model(model, {"S": seq}))
    ours = exe.run(f)
    for name, r in zip(("o", "prk", "prv"), run_ort(model, f)):
        np.testing.assert_allclose(ours[name], r, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("layout", ["bsnh", "bnsh"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("positions", ["ids", "offset"])
def test_rotary_embedding(runtime, layout, interleaved, positions):
    rng = np.random.default_rng(11)
    batch, seq, heads, head, max_pos = 2, 3, 2, 16, 20
    partial = positions == "offset"  # rotate only the first half of each head in these cases
    rot = head // 2 if partial else head
    shape = [batch, heads, "S", head] if layout == "bnsh" else [batch, "S", heads * head]
    concrete = [seq if d == "S" else d for d in shape]
    attrs = {"interleaved": interleaved}
    if partial:
        attrs.update(rotary_embedding_dim=rot, num_heads=heads)
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft", **attrs)
    pos_shape = [1] if positions == "offset" else [batch, "S"]
    angles = rng.random((max_pos, rot // 2)).astype(np.float32) * 3
    model = make_model([node], [("x", np.float32, shape), ("pos", np.int64, pos_shape)], ["y"],
                       {"cos": np.cos(angles), "sin": np.sin(angles)}, extra_opsets=MS)
    exe = runtime.load_model(compile_model(model, {"S": seq}))
    for s in (seq, 1):  # symbolic sequence length: same plan for prefill and decode
        exe.update_dimensions({"S": s})
        concrete = [s if d == "S" else d for d in shape]
        pos = (np.array([4], np.int64) if positions == "offset"
               else rng.integers(0, max_pos, (batch, s)).astype(np.int64))
        f = {"x": rng.standard_normal(concrete, dtype=np.float32), "pos": pos}
        np.testing.assert_allclose(exe.run(f)["y"], run_ort(model, f)[0], rtol=1e-5, atol=1e-5)
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("layout", ["growing", "shared"])
def test_gqa_ragged_batch_decode(runtime, layout):
    """Batch entries at different lengths: seqlens_k says where each one's new token goes."""
    rng = np.random.default_rng(13)
    cache, shared = 6, layout == "shared"
    model = gqa_model(packed=False, batch=2, cache=cache if shared else "P", rotary=True)
    compiled = compile_shared(model, {"S": 1}) if shared else compile_model(model, {"S": 1, "P": cache})
    lengths = np.array([3, 5], np.int32)  # seqlens_k = total - 1 per entry
    f = {**feeds_for(rng, packed=False, batch=2, seq=1), "sl": lengths, "tl": np.array(6, np.int32),
         "pk": rng.standard_normal((2, KV_HEADS, cache, HEAD), dtype=np.float32),
         "pv": rng.standard_normal((2, KV_HEADS, cache, HEAD), dtype=np.float32)}
    ours, ref = runtime.load_model(compiled).run(f), run_ort(model, f)
    np.testing.assert_allclose(ours["o"], ref[0], rtol=1e-4, atol=1e-5)
    for b, last in enumerate(lengths):
        np.testing.assert_allclose(ours["prk"][b, :, :last + 1], ref[1][b, :, :last + 1], rtol=1e-5, atol=1e-6)


# ---- prompts: the tiled kernel (CPU-type adapters, S >= 2) -----------------------------------

@pytest.fixture(scope="module")
def runtime_without_subgroups(wgpu_adapter):
    """gqa_flash.wgsl rendered without ONYXIA_SUBGROUPS: every invocation loads every K/V row."""
    return onyxia.Runtime(wgpu_adapter, subgroups=False)


PROMPT_CASES = {
    # head 16: 4 vec4 columns, fewer than the workgroup's 8 lanes; prompts of 1, 2 and 3 blocks
    "head16": dict(packed=False, head=16, prompts=[2, 8, 17]),
    # head 80: 20 vec4 columns, the third slice of 8 partly used; rotary, a window inside a block
    "head80-rotary-window": dict(packed=True, head=80, rotary=True, local_window_size=5, prompts=[9, 3]),
    # head 128: four full slices; softcap and scale
    "head128-softcap": dict(packed=False, head=128, softcap=2.0, scale=0.3, prompts=[12]),
    # head 160: past the kernel's 4 slices, the per-row kernel runs prompts too
    "head160": dict(packed=False, head=160, prompts=[6]),
    # a first prompt of two batch entries (onnxruntime takes several only without a past), rotary
    # interleaved
    "batch2-first-prompt": dict(packed=False, head=32, batch=2, rotary=True, rotary_interleaved=1, prompts=[10],
                                past=0),
}


@pytest.mark.parametrize("subgroups", [True, False], ids=["subgroups", "no-subgroups"])
@pytest.mark.parametrize("layout", ["growing", "shared"])
@pytest.mark.parametrize("case", list(PROMPT_CASES))
def test_gqa_prompts_after_a_past(runtime, runtime_without_subgroups, case, layout, subgroups):
    """Prompts of several lengths after a cached past (a chunked prefill: S > 1 rows whose keys
    start at past_b), each run by the tiled kernel (assume_adapter("cpu")) against onnxruntime, with
    and without subgroups; the per-row kernel (assume_adapter("gpu")) gives the same."""
    cfg = dict(PROMPT_CASES[case])
    prompts, head, batch, past = cfg.pop("prompts"), cfg.pop("head"), cfg.pop("batch", 1), cfg.pop("past", 11)
    rt = runtime if subgroups else runtime_without_subgroups
    if subgroups and "subgroup" not in rt.features:
        pytest.skip(f"{rt.info.summary} has no subgroups")
    capacity = past + max(prompts) + 3
    shared = layout == "shared"
    model = gqa_model(cache=capacity if shared else "P", batch=batch, head=head, **cfg)
    dims = {"S": max(prompts)} if shared else {"S": max(prompts), "P": past}
    compiled = compile_shared(model, dims) if shared else compile_model(model, dims)
    assert ("gqa_flash" in {s.label for s in compiled.shaders}) == (head <= 128)
    exe = rt.load_model(compiled)
    rng = np.random.default_rng(head + len(prompts))
    for seq in prompts:
        exe.update_dimensions({"S": seq} if shared else {"S": seq, "P": past})
        lengths = np.full(batch, past + seq - 1, np.int32)  # seqlens_k = total - 1
        cache_len = capacity if shared else past
        f = {**feeds_for(rng, packed=cfg["packed"], batch=batch, seq=seq, head=head), "sl": lengths,
             "tl": np.array(past + seq, np.int32),
             "pk": rng.standard_normal((batch, KV_HEADS, cache_len, head), dtype=np.float32),
             "pv": rng.standard_normal((batch, KV_HEADS, cache_len, head), dtype=np.float32)}
        ref = run_ort(model, f)
        for cpu in (1, 0):
            exe.assume_adapter("cpu" if cpu else "gpu")
            ours = exe.run(f)
            np.testing.assert_allclose(ours["o"], ref[0], rtol=1e-4, atol=1e-5, err_msg=f"S={seq} cpu={cpu}")
            for b, last in enumerate(lengths):
                np.testing.assert_allclose(ours["prk"][b, :, :last + 1], ref[1][b, :, :last + 1], rtol=1e-5,
                                           atol=1e-6, err_msg=f"S={seq} cpu={cpu} key")
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("subgroups", [True, False], ids=["subgroups", "no-subgroups"])
@pytest.mark.parametrize("heads", [(6, 2), (12, 3), (8, 1), (16, 1)], ids=lambda h: f"{h[0]}q-{h[1]}kv")
def test_gqa_tiled_kernel_head_groups(runtime, runtime_without_subgroups, heads, subgroups):
    """The tiled kernel's workgroups hold HB query heads of a KV group (the largest power of two
    up to 8 dividing the group: 1, 4, 8 and 8 here) by 8 / HB rows: a prompt of 11 rows, then
    decode steps (one row: HB heads per workgroup), against onnxruntime."""
    rt = runtime if subgroups else runtime_without_subgroups
    if subgroups and "subgroup" not in rt.features:
        pytest.skip(f"{rt.info.summary} has no subgroups")
    q_heads, kv_heads = heads
    model = gqa_model(packed=True, batch=1, cache="P", rotary=True, heads=heads, softcap=3.0)
    exe = rt.load_model(compile_model(model, {"S": 11, "P": 0}))
    exe.assume_adapter("cpu")
    rng = np.random.default_rng(q_heads)
    past = (np.zeros((1, kv_heads, 0, HEAD), np.float32),) * 2
    ref_past, total = past, 0
    for step in range(3):
        seq = 11 if step == 0 else 1
        exe.update_dimensions({"S": seq, "P": total})
        total += seq
        f = {"q": rng.standard_normal((1, seq, (q_heads + 2 * kv_heads) * HEAD), dtype=np.float32),
             "sl": np.array([total - 1], np.int32), "tl": np.array(total, np.int32)}
        ref = run_ort(model, {**f, "pk": ref_past[0], "pv": ref_past[1]})
        ours = exe.run({**f, "pk": past[0], "pv": past[1]})
        np.testing.assert_allclose(ours["o"], ref[0], rtol=1e-4, atol=1e-5, err_msg=f"step {step}")
        past, ref_past = (ours["prk"], ours["prv"]), (ref[1], ref[2])
