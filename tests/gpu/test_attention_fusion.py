"""FusedAttention, as AttentionFusionPass makes it from spelled-out attention, against onnxruntime
on the unfused graph: every spelling and mask, each kernel of the Select (flash, register rows, 8-
and 64-thread workgroups; the products alternative where the keys are many and static), a
symbolic sequence changed without recompiling, keys long enough that one invocation would pass
lavapipe's loop cap, and the committed encoder exports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onyxia.runtime.replay import SelectCommand
from tests.builders.encoder_attention import (
    MASKS,
    SPELLINGS,
    attention_block,
    block_feeds,
    packed_qkv_block,
    static_sequence,
)
from tests.helpers import compile_model

ENCODERS = Path(__file__).resolve().parent.parent / "data" / "exported" / "encoders"
KERNELS = ("flash", "rows", "workgroup8", "workgroup64")  # (and "tiles", "products" where offered)


def _ort(model: onnx.ModelProto, feeds) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _kernels(exe) -> list[SelectCommand]:
    found = [c for c in exe.commands if isinstance(c, SelectCommand) and "workgroup64" in c.step.labels]
    assert found, "no FusedAttention Select in the plan"
    return found


def _run_each_kernel(exe, model, feeds, out: str = "y", atol: float = 1e-4, kernels=KERNELS) -> list[str]:
    """Every kernel eligible at these dims against onnxruntime; the labels that ran."""
    want = _ort(model, feeds)[0]
    for c in _kernels(exe):
        assert list(c.step.labels) == list(kernels)
    ran = []
    for k, label in enumerate(kernels):
        if not all(c.eligible[k] for c in _kernels(exe)):
            continue  # the flash kernel past its key bound
        for c in _kernels(exe):
            exe.choose(c, k)
        got = exe.run(feeds)[out]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol, err_msg=f"kernel {label}")
        ran.append(label)
    return ran


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_spelling_matches_onnxruntime_as_the_sequence_changes(runtime, spelling, mask):
    model = attention_block(spelling, mask, heads=2, head=8)
    compiled = compile_model(model, {"batch": 2, "seq": 5})
    assert "FusedAttention" in {op.op_type for op in compiled.operations}
    exe = runtime.load_model(compiled)
    for step, seq in enumerate((5, 11, 3)):
        exe.update_dimensions({"batch": 2, "seq": seq})
        _run_each_kernel(exe, model, block_feeds(model, 2, seq, seed=step))
    assert exe.stats.recompiles == 0


def _cross_attention(head: int, masked: bool, keys: int | str = "T") -> onnx.ModelProto:
    """softmax(Q K^T / sqrt(D) + mask) V with Q [1, 2, S, D] and K, V [1, 2, T, D] given as
    inputs (the views are the tensors themselves), mask [1, 1, 1, T]; `keys`: T, or its value."""
    n = helper.make_node
    inputs = [helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 2, "S", head])]
    inputs += [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 2, keys, head]) for x in "kv"]
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["qk"]),
             n("Mul", ["qk", "scale"], ["scores"])]
    if masked:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, 1, keys]))
        nodes.append(n("Add", ["scores", "mask"], ["masked"]))
    nodes += [n("Softmax", ["masked" if masked else "scores"], ["p"], axis=3), n("MatMul", ["p", "v"], ["y"])]
    scale = numpy_helper.from_array(np.array(head ** -0.5, np.float32), "scale")
    graph = helper.make_graph(nodes, "cross", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [scale])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("masked", [False, True])
def test_keys_past_the_loop_cap_are_split(runtime, masked):
    """70,000 keys: one invocation walking them all would spend over 65,535 loop iterations
    (lavapipe silently stops it); each kernel splits the keys and combines the splits."""
    head, keys = 8, 70_000
    model = _cross_attention(head, masked)
    compiled = compile_model(model, {"S": 3, "T": keys})
    assert [op.op_type for op in compiled.operations] == ["FusedAttention"]
    exe = runtime.load_model(compiled)
    rng = np.random.default_rng(1)
    feeds = {"q": rng.standard_normal((1, 2, 3, head)).astype(np.float32),
             "k": rng.standard_normal((1, 2, keys, head)).astype(np.float32),
             "v": rng.standard_normal((1, 2, keys, head)).astype(np.float32)}
    if masked:
        feeds["mask"] = np.where(rng.random((1, 1, 1, keys)) < 0.5, -np.inf, 0.0).astype(np.float32)
        feeds["mask"][..., -1] = 0.0  # the last key (past every unsplit loop) stays live
    # a strong last key: a kernel that stopped early would miss it
    feeds["k"][:, :, -1, :] = feeds["q"][:, :, 0, :] * 4
    # the flash kernel walks at most fused.FLASH_MAX_KEYS keys (no split): not eligible here
    assert _run_each_kernel(exe, model, feeds, atol=1e-5) == list(KERNELS[1:])


def _scaled_v(where: str) -> onnx.ModelProto:
    """An encoder block whose V is multiplied by a constant: on the 4-D heads (after the
    Transpose), or on the 3-D projection before the head-splitting Reshape."""
    model = attention_block("eager", None, heads=2, head=8)
    graph = model.graph
    target = "v" if where == "4d" else "v2"
    producer = next(node for node in graph.node if target in node.output)
    producer.output[list(producer.output).index(target)] = f"{target}_unscaled"
    graph.initializer.append(numpy_helper.from_array(np.array(3.0, np.float32), "v_factor"))
    graph.node.insert(list(graph.node).index(producer) + 1,
                      helper.make_node("Mul", [f"{target}_unscaled", "v_factor"], [target]))
    return model


@pytest.mark.parametrize("where", ["4d", "3d"])
def test_a_scaled_v_scales_the_output_not_the_scores(runtime, where):
    """V * c: the factor multiplies the output, so it must not join the scores' scale (the fused
    node once folded it into softmax's argument: |error| 3.3 on outputs of 5.6)."""
    model = _scaled_v(where)
    compiled = compile_model(model, {"batch": 2, "seq": 7})
    assert "FusedAttention" in {op.op_type for op in compiled.operations}
    exe = runtime.load_model(compiled)
    assert _run_each_kernel(exe, model, block_feeds(model, 2, 7, seed=3)) == list(KERNELS)


@pytest.fixture(scope="module")
def plain_runtime():
    """The same adapter with its subgroup operations unused: the flash kernel's per-lane loads."""
    from onyxia.runtime import Runtime

    return Runtime(subgroups=False)


@pytest.mark.parametrize("subgroups", [True, False])
@pytest.mark.parametrize("head", [8, 40, 64, 128])
@pytest.mark.parametrize("masked", [False, True])
def test_flash_kernel_head_sizes(runtime, plain_runtime, subgroups, head, masked):
    """sdpa_flash.wgsl over every slice count (head sizes up to 32, 64, 128; 40: a second slice
    mostly past the head), rows not a multiple of its 8 (S = 13), keys not a multiple of its 4
    (T = 30 and 1502), with and without a key mask (-inf on ~30 % of the keys; per-row masks are
    the spelling and encoder tests'), with the lanes sharing K/V rows through subgroup
    broadcasts and without, against onnxruntime."""
    model = _cross_attention(head, masked)
    compiled = compile_model(model, {"S": 13, "T": 30})
    exe = (runtime if subgroups else plain_runtime).load_model(compiled)
    rng = np.random.default_rng(head)
    for keys in (30, 1502):
        exe.update_dimensions({"S": 13, "T": keys})
        feeds = {"q": rng.standard_normal((1, 2, 13, head)).astype(np.float32),
                 "k": rng.standard_normal((1, 2, keys, head)).astype(np.float32),
                 "v": rng.standard_normal((1, 2, keys, head)).astype(np.float32)}
        if masked:
            feeds["mask"] = np.where(rng.random((1, 1, 1, keys)) < 0.3, -np.inf, 0.0).astype(np.float32)
        for c in _kernels(exe):
            exe.choose(c, list(c.step.labels).index("flash"))
        got = exe.run(feeds)["y"]
        np.testing.assert_allclose(got, _ort(model, feeds)[0], rtol=1e-4, atol=1e-5, err_msg=f"{keys} keys")
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("subgroups", [True, False])
@pytest.mark.parametrize("head", [32, 64])
def test_tiles_kernel_against_onnxruntime(runtime, plain_runtime, subgroups, head):
    """sdpa_tiles.wgsl at both head sizes (an invocation's one or two column groups), query rows
    past and short of its 16 (S = 13, 40; one, 1), keys one partial block (30; one key), many blocks
    ending in a partial one (1502, 33) and whole ones (64), with the lanes handing values round by subgroup
    operations and through workgroup memory, a key much stronger than the rest at the last
    position (the running maxima raised late); against onnxruntime, without recompiling."""
    model = _cross_attention(head, False)
    compiled = compile_model(model, {"S": 13, "T": 30})
    exe = (runtime if subgroups else plain_runtime).load_model(compiled)
    rng = np.random.default_rng(head)
    for rows, keys in ((13, 30), (40, 1502), (13, 64), (1, 1), (1, 33)):
        exe.update_dimensions({"S": rows, "T": keys})
        feeds = {"q": rng.standard_normal((1, 2, rows, head)).astype(np.float32),
                 "k": rng.standard_normal((1, 2, keys, head)).astype(np.float32),
                 "v": rng.standard_normal((1, 2, keys, head)).astype(np.float32)}
        feeds["k"][:, :, -1, :] = feeds["q"][:, :, 0, :]
        for c in _kernels(exe):
            exe.choose(c, list(c.step.labels).index("tiles"))
        got = exe.run(feeds)["y"]
        np.testing.assert_allclose(got, _ort(model, feeds)[0], rtol=1e-4, atol=1e-5, err_msg=f"{rows} x {keys}")
    assert exe.stats.recompiles == 0


def test_tiles_kernel_bounds_its_keys():
    """The register tiles' guard: eligible up to the keys whose blocks keep an invocation's loop
    trips within SPLIT_TRIPS, the workgroup-memory path's included (lavapipe stops an invocation's
    loops after ~65,535), not past them."""
    from onyxia.operators.attention.fused import TILES_BLOCK_TRIPS, TILES_KEYS
    from onyxia.operators.attention.split_kv import SPLIT_TRIPS
    from onyxia.plan import AdapterFacts

    compiled = compile_model(_cross_attention(64, False), {"S": 13, "T": 30})
    [select] = [s for s in compiled.steps if getattr(s, "key", "") == "fused_attention"]
    tiles = list(select.labels).index("tiles")
    per_block = 64 // 4 + TILES_BLOCK_TRIPS
    bound = TILES_KEYS * (SPLIT_TRIPS // per_block)
    assert bound // TILES_KEYS * per_block <= SPLIT_TRIPS < 65_535
    def eligible(keys: int) -> bool:
        values = [v if isinstance(v, int) else v.evaluate({"S": 13, "T": keys}) for v in select.values()]
        return select.evaluate(values, AdapterFacts("cpu"))[0][tiles]

    assert eligible(bound) and not eligible(bound + 1)


@pytest.mark.parametrize("head,expected,guarded", [(8, "rows", "flash"), (16, "flash", "flash"), (32, "tiles", "tiles"),
                                                   (64, "tiles", "tiles"), (128, "rows", "rows")])
def test_the_cpu_heuristics_choice_by_head_size(head, expected, guarded):
    # fused.FLASH_PREFERRED_HEAD: past 64 the flash kernel compiles for seconds and runs no
    # faster than the register kernel; under 16 its 32-column slices are mostly idle, yet where
    # the adapter guards its loads (lavapipe from Mesa 25) the register kernel's load sites
    # compile for seconds and run slower. Heads of 32 and 64 take the register tiles (unmasked).
    from onyxia.plan import AdapterFacts

    compiled = compile_model(_cross_attention(head, False), {"S": 13, "T": 30})
    [select] = [s for s in compiled.steps if getattr(s, "key", "") == "fused_attention"]
    assert select.labels[select.choose({"S": 13, "T": 30}, AdapterFacts("cpu"))] == expected
    guarding = AdapterFacts("cpu", traits=frozenset({"guarded-loads"}))
    assert select.labels[select.choose({"S": 13, "T": 30}, guarding)] == guarded
    assert select.labels[select.choose({"S": 13, "T": 30}, AdapterFacts("gpu"))] == "workgroup64"


@pytest.mark.parametrize("head,keys,expected", [(64, 512, "tiles"), (32, 516, "tiles"), (16, 512, "flash"),
                                               (64, 256, "tiles"), (64, 20_000, "products"), (128, 128, "products"),
                                               (128, 124, "rows")])
def test_the_cpu_heuristic_by_static_keys(head, keys, expected):
    # fused.PRODUCTS_MIN_KEYS: from 512 keys (heads of 32 or more; past 64 from 128) the two
    # register-tiled products around a softmax outrun the flash kernel on either lavapipe; heads
    # of 32 and 64 take the register tiles up to their key bound (fused.TILES_KEYS)
    from onyxia.plan import AdapterFacts

    compiled = compile_model(_cross_attention(head, False, keys), {"S": 13})
    [select] = [s for s in compiled.steps if getattr(s, "key", "") == "fused_attention"]
    scores = 4 * 2 * 13 * keys
    roomy = (("maxStorageBufferBindingSize", scores),)
    assert select.labels[select.choose({"S": 13}, AdapterFacts("cpu", limits=roomy))] == expected
    assert select.labels[select.choose({"S": 13}, AdapterFacts("gpu", limits=roomy))] == "workgroup64"
    if expected == "products":  # the scores must fit one binding
        cramped = (("maxStorageBufferBindingSize", scores - 4),)
        assert select.labels[select.choose({"S": 13}, AdapterFacts("cpu", limits=cramped))] != "products"


def test_the_products_softmax_runs_in_place_over_the_scores():
    """One [B, H, S, T] buffer, not two: the Softmax normalizes the scores where they are
    (rownorm X_IN_Y, the buffer bound once read-write) and PV reads them there."""
    from onyxia.plan import Select, walk_steps

    compiled = compile_model(_cross_attention(64, False, 512), {"S": 13})
    [select] = [s for s in compiled.steps if getattr(s, "key", "") == "fused_attention"]
    products = select.alternatives[select.labels.index("products")].steps
    dispatches = [d for s in walk_steps(products) if not isinstance(s, Select) for d in s.dispatches()]
    assert not [t for t in compiled.tensors if t.endswith("/probabilities")]
    [scores] = [t for t in compiled.tensors if t.endswith("/scores")]
    softmax = [d for d in dispatches if compiled.shaders[d.shader].label == "rownorm_softmax"]
    assert softmax and all(dict(compiled.shaders[d.shader].defs).get("X_IN_Y") for d in softmax)
    for d in softmax:
        bound = [b.tensor for b in d.bindings]
        assert bound.count(scores) == 1, bound


@pytest.mark.parametrize("spelling,output_transpose", [("eager", True), ("dynamo", False), ("sdpa", True)])
def test_products_alternative_matches_onnxruntime(runtime, spelling, output_transpose):
    """The products alternative (K^T and head copies, QK^T * scale, Softmax, PV; y stored through
    its view or directly) at 516 static keys of heads of 32, the batch changed without
    recompiling, against onnxruntime like every other kernel of the Select (the register tiles
    over 17 blocks of keys, the last one partial, included)."""
    seq = 516
    model = static_sequence(attention_block(spelling, None, heads=2, head=32, output_transpose=output_transpose), seq)
    compiled = compile_model(model, {"batch": 2})
    exe = runtime.load_model(compiled)
    for step, batch in enumerate((2, 3)):
        exe.update_dimensions({"batch": batch})
        ran = _run_each_kernel(exe, model, block_feeds(model, batch, seq, seed=step),
                               kernels=("tiles", "products", *KERNELS))
        assert ran == ["tiles", "products", *KERNELS]
    assert exe.stats.recompiles == 0


def test_products_alternative_over_symbolic_keys(runtime):
    """Heads of 128 over a symbolic sequence (a VAE's mid-block attention): the products
    alternative runs where the keys are whole vec4s and at least 128 (its guard; K splits, the
    scores' N symbolic), every other kernel elsewhere, against onnxruntime, without recompiling."""
    model = attention_block("eager", None, heads=1, head=128)
    compiled = compile_model(model, {"batch": 1, "seq": 132})
    exe = runtime.load_model(compiled)
    for step, (batch, seq) in enumerate(((1, 132), (2, 256), (1, 130), (1, 124))):
        exe.update_dimensions({"batch": batch, "seq": seq})
        ran = _run_each_kernel(exe, model, block_feeds(model, batch, seq, seed=step), kernels=("products", *KERNELS))
        assert ("products" in ran) == (seq % 4 == 0 and seq >= 128), (seq, ran)
    assert exe.stats.recompiles == 0


def test_products_alternative_for_cross_attention(runtime):
    """Queries and keys of different lengths (13 against 132 static keys, heads of 128), the
    operands contiguous already (no copies but K's transpose) and y stored directly."""
    model = _cross_attention(128, False, keys=132)
    compiled = compile_model(model, {"S": 13})
    exe = runtime.load_model(compiled)
    rng = np.random.default_rng(7)
    for rows in (13, 5):
        exe.update_dimensions({"S": rows})
        feeds = {"q": rng.standard_normal((1, 2, rows, 128)).astype(np.float32),
                 "k": rng.standard_normal((1, 2, 132, 128)).astype(np.float32),
                 "v": rng.standard_normal((1, 2, 132, 128)).astype(np.float32)}
        assert _run_each_kernel(exe, model, feeds, kernels=("products", *KERNELS)) == ["products", *KERNELS]
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("seq,expected", [(132, "products"), (128, "products"), (130, "rows"), (124, "rows")])
def test_the_cpu_heuristic_takes_the_products_over_symbolic_keys(seq, expected):
    from onyxia.plan import AdapterFacts

    compiled = compile_model(attention_block("eager", None, heads=1, head=128), {"batch": 1, "seq": seq})
    [select] = [s for s in compiled.steps if getattr(s, "key", "") == "fused_attention"]
    facts = AdapterFacts("cpu", limits=(("maxStorageBufferBindingSize", 1 << 30),))
    assert select.labels[select.choose({"batch": 1, "seq": seq}, facts)] == expected


def test_products_alternative_past_the_loop_cap(runtime):
    """70,000 keys (symbolic), heads of 128: the products alternative (the heuristic's pick)
    splits its PV product's K (no invocation walks them all: lavapipe stops its loops after
    ~65,535 steps) and its Softmax walks each row in parts; a strong last key it must not miss."""
    keys = 70_000
    model = _cross_attention(128, False)
    exe = runtime.load_model(compile_model(model, {"S": 3, "T": keys}))
    [select] = [c for c in exe.commands if isinstance(c, SelectCommand) and c.step.key == "fused_attention"]
    assert select.step.labels[select.chosen] == "products", select.step.labels
    rng = np.random.default_rng(2)
    feeds = {"q": rng.standard_normal((1, 2, 3, 128)).astype(np.float32),
             "k": rng.standard_normal((1, 2, keys, 128)).astype(np.float32),
             "v": rng.standard_normal((1, 2, keys, 128)).astype(np.float32)}
    feeds["k"][:, :, -1, :] = feeds["q"][:, :, 0, :] * 4
    np.testing.assert_allclose(exe.run(feeds)["y"], _ort(model, feeds)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("path", sorted(ENCODERS.glob("whisper*.onnx")), ids=lambda p: p.name)
def test_products_alternative_on_exported_encoders(runtime, path, monkeypatch):
    """The committed Whisper exports (torch.onnx's TorchScript and dynamo exporters, eager and
    sdpa attention: their Q/K/V views and output layouts) through the products alternative, its
    key and head thresholds lowered to these small heads (8) and keys (16), against onnxruntime."""
    from onyxia.operators.attention import fused

    monkeypatch.setattr(fused, "PRODUCTS_MIN_KEYS", 16)
    monkeypatch.setattr(fused, "PRODUCTS_MIN_HEAD", 8)
    model = onnx.load(str(path))
    compiled = compile_model(model, {"batch": 2})
    exe = runtime.load_model(compiled)
    for step, batch in enumerate((2, 3)):
        exe.update_dimensions({"batch": batch})
        ran = _run_each_kernel(exe, model, _encoder_feeds(path.name, batch, 0, step), out=compiled.outputs[0],
                               kernels=("products", *KERNELS))
        assert ran[0] == "products", ran
    assert exe.stats.recompiles == 0


def _encoder_feeds(name: str, batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if name.startswith("bert"):
        mask = np.ones((batch, seq), np.int64)
        mask[-1, seq // 2:] = 0
        return {"input_ids": rng.integers(0, 1000, (batch, seq)).astype(np.int64), "attention_mask": mask}
    if name.startswith("vit"):
        return {"pixel_values": rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)}
    return {"input_features": rng.standard_normal((batch, 8, 32)).astype(np.float32)}


@pytest.mark.parametrize("path", sorted(ENCODERS.glob("*.onnx")), ids=lambda p: p.name)
def test_exported_encoders_match_onnxruntime(runtime, path):
    """The committed exports (tools/export_encoders.py), fused, against onnxruntime on the file,
    at two batch sizes (and sequence lengths for BERT) without recompiling, on each kernel."""
    model = onnx.load(str(path))
    bert = path.name.startswith("bert")
    sizes = [(2, 7), (3, 12)] if bert else [(2, 0), (3, 0)]
    dims = [{"batch": b, "sequence": s} if bert else {"batch": b} for b, s in sizes]
    compiled = compile_model(model, dims[0])
    exe = runtime.load_model(compiled)
    out = compiled.outputs[0]
    for step, ((b, s), d) in enumerate(zip(sizes, dims)):
        exe.update_dimensions(d)
        _run_each_kernel(exe, model, _encoder_feeds(path.name, b, s, step), out=out)
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("path", sorted((ENCODERS / "heads32").glob("*.onnx")), ids=lambda p: p.name)
def test_tiles_kernel_on_exported_encoders(runtime, path):
    """The register tiles on real exports with heads of 32 (tools/export_encoders.py --size
    heads32: transformers' ViT and Whisper encoders through torch.onnx's TorchScript and dynamo
    exporters, eager and sdpa attention, their own Q/K/V views and output layouts): the CPU
    heuristic's choice, and with every other kernel against onnxruntime at two batch sizes. The
    dynamo exporter's ViT adds the attention mask transformers builds (a Where-made float mask):
    the tiles, which take no mask, are not offered there and the masked kernels run."""
    model = onnx.load(str(path))
    compiled = compile_model(model, {"batch": 2})
    exe = runtime.load_model(compiled)
    masked = path.name.startswith("vit.") and ".dynamo." in path.name
    kernels = KERNELS if masked else ("tiles", *KERNELS)
    assert {c.step.labels[c.chosen] for c in _kernels(exe)} == {"flash" if masked else "tiles"}
    for step, batch in enumerate((2, 3)):
        exe.update_dimensions({"batch": batch})
        ran = _run_each_kernel(exe, model, _encoder_feeds(path.name, batch, 0, step), out=compiled.outputs[0],
                               kernels=kernels)
        assert ran == list(kernels)
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("unbind", ["split", "gather"])
def test_packed_qkv_is_read_in_place(runtime, unbind):
    """timm's packed QKV projection: the FusedAttention reads q, k and v as parts of the one
    projection output (View.parts, the kernels' OFFSETS), no Transpose, Split or Gather left;
    every kernel against onnxruntime as the sequence changes (the register tiles reading the parts
    through OFFSETS), the products alternative (its head copies from the offsets) where the keys
    allow it."""
    model = packed_qkv_block(unbind, heads=2, head=32)
    compiled = compile_model(model, {"batch": 2, "seq": 7})
    ops = {op.op_type for op in compiled.operations if op.steps}
    assert "FusedAttention" in ops and not ops & {"Transpose", "Split", "Gather", "Squeeze"}, ops
    fused = next(op for op in compiled.operations if op.op_type == "FusedAttention")
    reads = {t for s in fused.steps for t, written in s.uses() if not written} - set(fused.scratch)
    assert len(reads) == 1, reads  # the projection's output, three times
    exe = runtime.load_model(compiled)
    for step, (batch, seq) in enumerate(((2, 7), (1, 13), (2, 512))):
        exe.update_dimensions({"batch": batch, "seq": seq})
        ran = _run_each_kernel(exe, model, block_feeds(model, batch, seq, seed=step),
                               kernels=("tiles", "products", *KERNELS))
        assert ("products" in ran) == (seq >= 512) and "tiles" in ran, (seq, ran)
    assert exe.stats.recompiles == 0


def test_timm_vit_reads_its_packed_qkv_in_place():
    """timm's ViT as its exporter writes it (the committed reduced-width fixture): every layer's
    attention reads the qkv projection in place: no Split or Squeeze left, and of the Transposes
    only the patch embedding's (tests/gpu/test_exported_models.py runs it against onnxruntime)."""
    from tests.builders.families import models

    info = {m.name: m for m in models()}["timm_vit_tiny"]
    model = onnx.load(str(info.path))
    layers = sum(n.op_type == "Split" for n in model.graph.node)
    compiled = compile_model(model, info.sizes[0])
    ops = [(op.op_type, op.name) for op in compiled.operations if op.steps]
    assert layers and [t for t, _ in ops].count("FusedAttention") == layers, ops
    assert not {"Split", "Squeeze"} & {t for t, _ in ops}, ops
    assert [name for t, name in ops if t == "Transpose"] == ["/patch_embed/Transpose"], ops
