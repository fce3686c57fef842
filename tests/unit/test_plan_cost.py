"""The plan cost model (onyxia/plan/cost.py): exact bytes and flops for known kernels, peak live
activations, and the decode-step traffic of a decoder with a past KV cache."""

import numpy as np
from onnx import helper as h

from onyxia.plan import Select
from onyxia.plan.cost import activation_memory, cost_summary, decode_cost, plan_cost
from tests.helpers import compile_model, compile_with_default_passes, make_model


def _matmul_add(k=16, n=8):
    """MatMul -> Relu, the product also an output (so the Relu does not run in its epilogue)."""
    w = np.ones((k, n), np.float32)
    nodes = [h.make_node("MatMul", ["x", "w"], ["t"]), h.make_node("Relu", ["t"], ["y"])]
    return make_model(nodes, [("x", np.float32, ["m", k])], ["y", "t"], {"w": w})


def test_matmul_bytes_and_flops_are_exact_at_the_dims():
    compiled = compile_model(_matmul_add(), {"m": 4})
    for m in (4, 1, 7):
        cost = plan_cost(compiled, {"m": m})
        (mm,) = [d for d in cost.live if d.op_type == "MatMul"]
        assert mm.flops == 2 * m * 8 * 16
        assert mm.read_bytes == 4 * (m * 16 + 16 * 8)
        assert mm.written_bytes == 4 * m * 8
        (relu,) = [d for d in cost.live if d.op_type == "Relu"]
        assert (relu.read_bytes, relu.written_bytes, relu.flops) == (4 * m * 8, 4 * m * 8, m * 8)
        assert cost.bytes == sum(d.bytes for d in cost.live)


def test_fused_epilogue_costs_the_product_and_its_operands():
    w, b = np.ones((16, 8), np.float32), np.ones(8, np.float32)
    nodes = [h.make_node("MatMul", ["x", "w"], ["t"]), h.make_node("Add", ["t", "b"], ["u"]),
             h.make_node("Relu", ["u"], ["y"])]
    compiled = compile_model(make_model(nodes, [("x", np.float32, ["m", 16])], ["y"], {"w": w, "b": b}), {"m": 4})
    for m in (4, 1, 7):
        (mm,) = plan_cost(compiled, {"m": m}).live
        assert (mm.op_type, mm.flops) == ("MatMulEpilogue", 2 * m * 8 * 16)
        assert (mm.read_bytes, mm.written_bytes) == (4 * (m * 16 + 16 * 8 + 8), 4 * m * 8)


def test_fused_attention_counts_both_products_on_every_kernel():
    """4·B·H·S·T·D for the encoder attention AttentionFusionPass fuses (its operands read
    through views), at any sequence length and on whichever kernel the adapter replays."""
    from onyxia.plan import AdapterFacts
    from tests.builders.encoder_attention import attention_block, static_sequence

    compiled = compile_model(attention_block("eager", None, heads=2, head=8), {"batch": 2, "seq": 5})
    assert any(op.op_type == "FusedAttention" for op in compiled.operations)
    for seq in (5, 40):
        for facts in (AdapterFacts("cpu"), AdapterFacts("gpu")):
            attention = [d for d in plan_cost(compiled, {"batch": 2, "seq": seq}, adapter=facts).live
                         if d.op_type == "FusedAttention"]
            assert max(d.flops for d in attention) == 4 * 2 * 2 * seq * seq * 8, (seq, facts.kind)
    # many static keys over heads of 128: a CPU-type adapter replays the products alternative (T off
    # its softmax) where the scores fit a binding; heads of 32 take the register tiles
    for head in (128, 32):
        compiled = compile_model(static_sequence(attention_block("eager", None, heads=2, head=head), 516), {"batch": 2})
        for facts in (AdapterFacts("cpu"), AdapterFacts("cpu", limits=(("maxStorageBufferBindingSize", 1 << 30),)),
                      AdapterFacts("gpu")):
            attention = [d for d in plan_cost(compiled, {"batch": 3}, adapter=facts).live
                         if d.op_type == "FusedAttention"]
            assert max(d.flops for d in attention) == 4 * 3 * 2 * 516 * 516 * head, facts
            products = head == 128 and facts.limits != ()
            assert ("rownorm_softmax" in {d.shader for d in attention}) == products, facts
            assert ("fused_attention_tiles" in {d.shader for d in attention}) == (head == 32 and facts.kind == "cpu")


def test_convolution_flops_on_every_path():
    """2 * outputs * C/group * kernel size, whichever kernel runs (the pointwise path binds W as
    the product's A; a pooled-map convolution reads W^T) and with an epilogue fused."""
    rng = np.random.default_rng(0)
    cases = {  # name: (input [N, C, S, S], weight [M, C/group, k, k], group)
        "pointwise": ((2, 16, 6, 6), (24, 16, 1, 1), 1), "pooled": ((2, 32, 1, 1), (16, 32, 1, 1), 1),
        "gemm": ((2, 8, 6, 6), (16, 8, 3, 3), 1), "depthwise": ((2, 8, 6, 6), (8, 1, 3, 3), 8)}
    for name, (x, w, group) in cases.items():
        nodes = [h.make_node("Conv", ["x", "w"], ["c"], group=group), h.make_node("Relu", ["c"], ["y"])]
        model = make_model(nodes, [("x", np.float32, list(x))], ["y"], {"w": rng.random(w).astype(np.float32)})
        for compiled in (compile_model(model, {}), compile_with_default_passes(model, {})[1]):
            (conv,) = [d for d in plan_cost(compiled).live if d.op_type.startswith("Conv")]
            out = x[0] * w[0] * (x[2] - w[2] + 1) ** 2
            assert conv.flops == 2 * out * int(np.prod(w[1:])), (name, conv)


def test_only_the_chosen_alternative_costs():
    compiled = compile_model(_matmul_add(), {"m": 4})
    [tunable] = [s for s in compiled.steps if isinstance(s, Select) and s.tuned]
    # MatMul plans its kernel variants as a Select: the cost follows the alternative replayed
    # (the heuristic's by default, or the executor's choice), and within it the row class's.
    for choice in (None, *range(len(tunable.labels))):
        cost = plan_cost(compiled, choices=None if choice is None else {id(tunable): choice})
        assert len(cost.dispatches) < compiled.num_dispatches
        assert [d.op_type for d in cost.live].count("MatMul") == 1
        assert all(not d.live for d in cost.dispatches if d not in cost.live)
    labels = {label: [d.shader for d in plan_cost(compiled, choices={id(tunable): k}).live if d.op_type == "MatMul"]
              for k, label in enumerate(tunable.labels)}
    assert labels == {"chunked": ["matmul/gemv_chunked"], "coalesced": ["matmul/gemv"],
                      "register": ["matmul/gemv_chunked"], "register16": ["matmul/gemv_chunked"],
                      "shared": ["matmul/gemm"]}


def test_peak_activations_count_overlapping_lifetimes():
    # x -> a -> b -> c -> y with a and c both alive at the last Add.
    nodes = [h.make_node("Neg", ["x"], ["a"]), h.make_node("Exp", ["a"], ["b"]),
             h.make_node("MatMul", ["b", "w"], ["c"]), h.make_node("Add", ["c", "a"], ["y"])]
    model = make_model(nodes, [("x", np.float32, [4, 4])], ["y"], {"w": np.eye(4, dtype=np.float32)})
    memory = activation_memory(compile_model(model, {}))
    # a lives to the end; b and c overlap a: never more than three 64-byte buffers at once.
    assert memory.peak_bytes <= 3 * 64
    assert memory.peak_bytes >= 2 * 64
    assert memory.allocated_bytes >= memory.peak_bytes


def _decoder():
    """One attention-free 'layer' over a past cache: y = concat(past, x·w) read back through MatMul."""
    hidden = 8
    nodes = [
        h.make_node("Gather", ["embed", "input_ids"], ["x"]),  # [b, s, hidden]
        h.make_node("MatMul", ["x", "w"], ["kv"]),
        h.make_node("Unsqueeze", ["kv", "one"], ["kv4"]),  # [b, 1, s, hidden]
        h.make_node("Concat", ["past_key", "kv4"], ["present_key"], axis=2),
        h.make_node("ReduceSum", ["present_key", "two"], ["ctx"], keepdims=0),  # [b, 1, hidden]
        h.make_node("MatMul", ["ctx", "head"], ["logits"]),
    ]
    rng = np.random.default_rng(0)
    inits = {"embed": rng.standard_normal((32, hidden)).astype(np.float32),
             "w": rng.standard_normal((hidden, hidden)).astype(np.float32),
             "head": rng.standard_normal((hidden, 32)).astype(np.float32),
             "one": np.array([1], np.int64), "two": np.array([2], np.int64)}
    return make_model(nodes, [("input_ids", np.int64, ["batch", "seq"]),
                              ("past_key", np.float32, ["batch", 1, "past", hidden])],
                      ["logits", "present_key"], inits)


def test_decode_step_traffic_against_weights_and_kv():
    compiled = compile_model(_decoder(), {"batch": 1, "seq": 5, "past": 12})
    step = decode_cost(compiled)
    assert step is not None
    assert step.dims["seq"] == 1 and step.dims["past"] == 12
    assert step.weight_bytes == 4 * (32 * 8 + 8 * 8 + 8 * 32)
    assert step.kv_bytes == 4 * 12 * 8
    assert step.plan_bytes == plan_cost(compiled, step.dims).bytes
    assert step.ratio > 0
    lines = cost_summary(compiled)
    assert any(line.startswith("decode traffic:") for line in lines)


def test_no_decode_line_without_a_past_cache():
    compiled = compile_model(_matmul_add(), {"m": 4})
    assert decode_cost(compiled) is None
    assert not any("decode" in line for line in cost_summary(compiled))


def test_compile_prints_the_decode_step_of_an_llm_folder(capsys):
    from onyxia.cli import main

    assert main(["compile", "tests/data/llm/genai/llama-cpu-fp32", "--dim", "max_length=32"]) == 0
    out = capsys.readouterr().out
    assert "bytes per run:" in out and "peak activations:" in out
    assert "decode step:" in out and "sequence_length=1" in out
    ratio = float(out.split("decode traffic:")[1].split("x")[0])
    assert 1.0 <= ratio < 2.0


def test_attention_touches_the_valid_keys_and_the_new_rows_of_a_shared_cache():
    """With KvRows, a shared-buffer GQA reads `read` rows of its 32-row cache and writes one."""
    from onyxia.plan.cost import KvRows
    from tests.builders.contrib_infer import compile_graph, gqa

    compiled = compile_graph(gqa(cache=32), {"S": 4}, share=True)
    dims = {"S": 1}
    whole, valid = plan_cost(compiled, dims), plan_cost(compiled, dims, kv=KvRows(read=5, written=1))
    row = 2 * 16 * 4  # kv heads x head size x 4 bytes
    by_shader = {c.shader: c for c in valid.live}
    full = {c.shader: c for c in whole.live}
    assert full["gqa_attention"].read_bytes - by_shader["gqa_attention"].read_bytes == 2 * (32 - 5) * row
    assert full["gqa_kv"].written_bytes == 2 * 32 * row and by_shader["gqa_kv"].written_bytes == 2 * row


def test_decode_weights_read_count_the_gathered_rows_of_a_table():
    compiled = compile_model(_decoder(), {"batch": 1, "seq": 5, "past": 12})
    step = decode_cost(compiled)
    # w and head whole, one row of the 32-row embedding table (batch 1, one token)
    assert step.weight_read_bytes == 4 * (8 + 8 * 8 + 8 * 32)
    assert step.ratio == step.plan_bytes / (step.weight_read_bytes + step.kv_bytes)


def test_conv_flops_count_the_weights_on_every_kernel():
    # A pointwise conv's matrix product binds W first, the conv kernels the input first: both
    # count 2 * output elements * C/group * kernel size (the GPU's and the CPU's choice).
    from onyxia.plan import AdapterFacts
    from tests.builders.conv import conv_model

    for w_shape, attrs, per_out in (([32, 16, 1, 1], {}, 16), ([32, 8, 3, 3], dict(group=2, pads=[1, 1, 1, 1]), 72),
                                    ([16, 1, 3, 3], dict(group=16, pads=[1, 1, 1, 1]), 9)):
        compiled = compile_model(conv_model("Conv", [2, 16, "h", "w"], w_shape, **attrs), {"h": 7, "w": 5})
        for kind in ("cpu", "gpu"):
            cost = plan_cost(compiled, {"h": 7, "w": 5}, adapter=AdapterFacts(kind))
            conv = [d for d in cost.live if d.op_type == "Conv"]
            assert sum(d.flops for d in conv) == 2 * (2 * w_shape[0] * 35) * per_out, (w_shape, kind, conv)


def test_strided_conv_patches_cost_their_product_and_a_copy():
    # A patch embedding (kernel = stride) runs on a CPU-type adapter as a strided copy of the
    # patches and a matrix product (operators/conv/pointwise.py): the conv's flops go to the
    # product, and the copy reads no more than it writes (not the whole input). A strided 1x1
    # conv's product reads its positions out of the input (window+product): the product alone,
    # reading the K values of each position, not the whole input.
    from onyxia.plan import AdapterFacts
    from tests.builders.conv import conv_model

    for w_shape, positions in (([32, 16, 1, 1], 4 * 3), ([32, 16, 2, 2], 3 * 2)):
        model = conv_model("Conv", [2, 16, "h", "w"], w_shape, strides=[2, 2])
        compiled = compile_with_default_passes(model, {"h": 7, "w": 5})[1]
        cost = plan_cost(compiled, {"h": 7, "w": 5}, adapter=AdapterFacts("cpu"))
        dispatches = [d for d in cost.live if d.op_type == "Conv"]
        taps = int(np.prod(w_shape[1:]))
        if w_shape[2] == 1:  # one tap
            (product,) = dispatches
            assert product.shader == "matmul/gemv_chunked", cost.live
            weights = 4 * 32 * 16
            assert product.read_bytes == weights + 4 * 32 + 4 * 2 * 16 * positions  # + bias + positions
            assert product.flops == 2 * (2 * 32 * positions) * taps
            continue
        copy, product = dispatches
        assert (copy.shader, product.shader) == ("strided_copy", "matmul/gemv_chunked"), cost.live
        assert product.flops == 2 * (2 * 32 * positions) * taps and copy.flops == copy.written_bytes // 4
        assert copy.read_bytes == copy.written_bytes == 4 * 2 * taps * positions

