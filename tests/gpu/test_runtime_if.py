"""If whose condition is known only at run time and whose branches give outputs of different
sizes, against onnxruntime: optimum's merged encoder-decoder decoders (use_cache_branch picks the
graph without or with a cache, present KV of new vs past + new tokens), torchvision's batched_nms
shape (an empty int64[0] vs a data-dependent count), and errors naming the branch and its node."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

import onyxia
from onyxia.errors import ComputeError, InputError, ShapeInferenceError
from onyxia.plan import BranchStep, walk_steps
from tests.control_models import arms_differ_model, vi
from tests.helpers import compile_model, make_model, run_ort

SEQ2SEQ = Path(__file__).resolve().parent.parent / "data" / "exported" / "seq2seq"
RNG = np.random.default_rng(5)


def assert_rel_close(ours, ref, rel: float = 1e-4) -> None:
    """Each output: same dtype and shape, max |ours - ref| <= rel * max |ref|."""
    assert len(ours) == len(ref)
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, a.shape, b.dtype, b.shape)
        if b.size:
            scale = max(float(np.abs(b).max()), 1e-6)
            assert float(np.abs(a.astype(np.float64) - b).max()) <= rel * scale, f"output {i}"


# ---- merged decoders ----------------------------------------------------------------------------

def decoder_feeds(ref, batch: int, seq: int, enc: int, past: int, cache: bool) -> dict[str, np.ndarray]:
    """Feeds for a merged decoder: random encoder states and past KV (empty on a first step)."""
    feeds = {}
    for arg in ref.get_inputs():
        name, shape = arg.name, arg.shape
        lengths = {"batch_size": batch, "encoder_sequence_length": enc, "past_decoder_sequence_length": past,
                   "decoder_sequence_length": seq}
        if name == "use_cache_branch":
            feeds[name] = np.array([cache])
            continue
        dims = [d if isinstance(d, int) else lengths[d] for d in shape]
        if name == "input_ids":  # the decoder's tokens, or the encoder's (their length: enc)
            feeds[name] = RNG.integers(0, 96, (batch, seq if "decoder_sequence_length" in shape else enc))
        elif arg.type == "tensor(int64)":  # attention masks
            feeds[name] = np.ones(dims, np.int64)
        else:
            feeds[name] = RNG.standard_normal(dims).astype(np.float32)
    return feeds


@pytest.mark.parametrize("model", ["whisper", "t5", "bart"])
def test_merged_decoder_runs_either_branch_like_onnxruntime(model):
    import onnxruntime as ort
    path = str(SEQ2SEQ / model / "merged" / "decoder_model_merged.onnx")
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    sess = onyxia.InferenceSession(path)
    enc = 50 if model == "whisper" else 6
    # First steps (no cache: present KV of the new tokens) and later ones (past + new), two
    # shapes each, through one plan.
    for batch, seq, past, cache in [(1, 3, 0, False), (2, 1, 4, True), (2, 2, 0, False), (1, 1, 7, True)]:
        feeds = decoder_feeds(ref, batch, seq, enc, past, cache)
        assert_rel_close(sess.run(None, feeds), ref.run(None, feeds))
    # One plan for both branches and every length (T5 slices its position bias by
    # -decoder_sequence_length: dim arithmetic, tests/gpu/test_symbolic_slice.py).
    assert sess.stats.compiles == 1 and sess.stats.recompiles == []
    branches = [s for s in walk_steps(sess.executor.model.steps) if isinstance(s, BranchStep)]
    assert len(branches) == 1 and branches[0].then_dims and branches[0].orelse_dims


@pytest.mark.parametrize("path", sorted(str(p.relative_to(SEQ2SEQ)) for p in SEQ2SEQ.glob("*/split/*.onnx")))
def test_encoders_and_split_decoders_match_onnxruntime_at_two_shapes(path):
    import onnxruntime as ort
    ref = ort.InferenceSession(str(SEQ2SEQ / path), providers=["CPUExecutionProvider"])
    sess = onyxia.InferenceSession(str(SEQ2SEQ / path))
    for batch, seq, enc, past in [(1, 3, 5, 4), (2, 1, 7, 6)]:
        feeds = decoder_feeds(ref, batch, seq, 50 if "whisper" in path else enc, past, False)
        assert_rel_close(sess.run(None, feeds), ref.run(None, feeds))


# ---- models built here ----------------------------------------------------------------------------

@pytest.mark.parametrize("device_cond", [False, True])
def test_if_whose_arms_give_different_sizes_runs_either(runtime, device_cond):
    model = arms_differ_model(device_cond)
    compiled = compile_model(model, {"n": 3})
    branch = next(s for s in compiled.steps if isinstance(s, BranchStep))
    assert [name for name, _ in branch.then_dims] == [name for name, _ in branch.orelse_dims] != []
    exe = runtime.load_model(compiled)
    for n in (3, 5, 1, 4):
        exe.update_dimensions({"n": n})
        x = RNG.standard_normal(n).astype(np.float32)
        for cond in (True, False):
            if device_cond:
                x = np.abs(x) * (1 if cond else -1)
                feeds = {"x": x}
            else:
                feeds = {"x": x, "c": np.array(cond)}
            out = exe.run(feeds)
            assert_rel_close([out[k] for k in compiled.outputs], run_ort(model, feeds), 1e-6)
    assert exe.stats.recompiles == 0


def nms_like_model():
    """torchvision's batched_nms: If(numel(boxes) == 0) gives int64[0], else a data-dependent
    count of indices (here the positions of x > 0, NonZero's count), then + 1 after the If."""
    then = h.make_graph([h.make_node("Constant", [], ["empty"], value=h.make_tensor("v", TP.INT64, [0], []))],
                        "then", [], [vi("empty", TP.INT64, None)])
    orelse = h.make_graph([h.make_node("Greater", ["x", "zero"], ["pos"]), h.make_node("NonZero", ["pos"], ["nz"]),
                           h.make_node("Reshape", ["nz", "flat"], ["keep"])], "else", [],
                          [vi("keep", TP.INT64, None)])
    nodes = [h.make_node("Size", ["x"], ["size"]), h.make_node("Equal", ["size", "zero_i"], ["empty_x"]),
             h.make_node("If", ["empty_x"], ["keep_idx"], then_branch=then, else_branch=orelse, name="nms_if"),
             h.make_node("Add", ["keep_idx", "one"], ["plus_one"])]
    inits = {"zero": np.array(0, np.float32), "zero_i": np.array(0, np.int64), "one": np.array(1, np.int64),
             "flat": np.array([-1], np.int64)}
    return make_model(nodes, [("x", np.float32, ["n"])], ["keep_idx", "plus_one"], inits)


def test_empty_versus_data_dependent_count_like_batched_nms(runtime):
    model = nms_like_model()
    exe = runtime.load_model(compile_model(model, {"n": 4}))
    for x in (np.array([1.0, -2.0, 3.0, 0.5], np.float32), np.zeros(0, np.float32),
              np.array([-1.0, 2.0, -3.0, -4.0, 5.0, 6.0], np.float32), np.array([-1.0], np.float32)):
        exe.update_dimensions({"n": len(x)})
        out = exe.run({"x": x})
        ref = run_ort(model, {"x": x})
        for ours, theirs in zip([out["keep_idx"], out["plus_one"]], ref):
            assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
            np.testing.assert_array_equal(ours, theirs)


# ---- errors ------------------------------------------------------------------------------------

def test_a_branch_that_fails_inference_names_the_branch_and_node():
    then = h.make_graph([h.make_node("Add", ["x", "three"], ["t"], name="bad_add")], "then", [],
                        [vi("t", TP.FLOAT, None)])
    orelse = h.make_graph([h.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", TP.FLOAT, None)])
    model = make_model([h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=orelse, name="pick")],
                       [("x", np.float32, [4]), ("c", np.bool_, [])], ["y"], {"three": np.ones(3, np.float32)})
    with pytest.raises(ShapeInferenceError, match=r"pick.*then_branch.*bad_add"):
        compile_model(model)


def test_a_branch_whose_kernel_fails_at_run_time_names_the_branch_and_node(runtime):
    then = h.make_graph([h.make_node("Gather", ["x", "i"], ["t"], name="take")], "then", [],
                        [vi("t", TP.FLOAT, None)])
    orelse = h.make_graph([h.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", TP.FLOAT, None)])
    model = make_model([h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=orelse, name="pick")],
                       [("x", np.float32, [4]), ("i", np.int64, [2]), ("c", np.bool_, [])], ["y"])
    exe = runtime.load_model(compile_model(model))
    x = np.arange(4, dtype=np.float32)
    bad = {"x": x, "i": np.array([1, 9], np.int64), "c": np.array(True)}
    with pytest.raises(ComputeError, match=r"node 'pick/then_branch/take' \(Gather\): an index outside"):
        exe.run(bad)
    good = {**bad, "i": np.array([3, 0], np.int64)}
    np.testing.assert_array_equal(exe.run(good)["y"], run_ort(model, good)[0])
    np.testing.assert_array_equal(exe.run({**bad, "c": np.array(False)})["y"], -x)  # the other arm


def test_a_branch_whose_host_step_fails_names_the_if_and_branch(runtime):
    """A Loop inside the taken arm asked for more host iterations than the runtime allows."""
    body = h.make_graph([h.make_node("Identity", ["cin"], ["cout"]), h.make_node("Add", ["acc", "one"], ["acc2"])],
                        "body", [vi("i", TP.INT64, []), vi("cin", TP.BOOL, []), vi("acc", TP.FLOAT, [1])],
                        [vi("cout", TP.BOOL, []), vi("acc2", TP.FLOAT, [1])])
    then = h.make_graph([h.make_node("Loop", ["m", "", "x"], ["t"], body=body, name="count")], "then", [],
                        [vi("t", TP.FLOAT, None)])
    orelse = h.make_graph([h.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", TP.FLOAT, None)])
    model = make_model([h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=orelse, name="pick")],
                       [("x", np.float32, [1]), ("m", np.int64, []), ("c", np.bool_, [])], ["y"],
                       {"one": np.ones(1, np.float32)})
    exe = runtime.load_model(compile_model(model))
    x = np.zeros(1, np.float32)
    with pytest.raises(InputError, match=r"If 'pick' then_branch: Loop 'pick/then_branch/count' would run 2000000 "):
        exe.run({"x": x, "m": np.array(2_000_000, np.int64), "c": np.array(True)})
    feeds = {"x": x, "m": np.array(3, np.int64), "c": np.array(True)}
    np.testing.assert_array_equal(exe.run(feeds)["y"], run_ort(model, feeds)[0])
