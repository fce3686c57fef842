"""Vision stems as optimum exports them (`pixel_values: [batch_size, num_channels, height, width]`)
run through InferenceSession with num_channels given, at two image shapes, against onnxruntime;
a feed with another channel count gets another plan (or a clear error), never a wrong answer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import onyxia
from onyxia.errors import ShapeInferenceError
from tests.builders import vision_stems as stems
from tests.helpers import run_ort

SHAPES = [(2, 16, 12), (1, 8, 20)]  # (batch, height, width): the second only updates dimensions


def _feeds(model, batch: int, height: int, width: int, channels: int = 3) -> dict[str, np.ndarray]:
    feeds = {"pixel_values": stems.pixels(batch, height, width, channels, seed=height)}
    if any(i.name == "pixel_mask" for i in model.graph.input):
        mask = np.ones((batch, height, width), np.int64)
        mask[:, :, width // 2:] = 0
        feeds["pixel_mask"] = mask
    return feeds


def _assert_matches(sess, model, feeds) -> None:
    for name, ours, ref in zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), run_ort(model, feeds)):
        assert ours.shape == ref.shape, name
        np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("build", [stems.vit_patch_embedding, stems.clip_vision_stem, stems.detr_backbone_stem,
                                   stems.grouped_conv, stems.channel_split_reshape])
def test_stem_with_num_channels_given_matches_onnxruntime_at_two_shapes(runtime, build):
    model = build()
    sess = onyxia.InferenceSession(model, runtime=runtime, dims={"num_channels": 3})
    for shape in SHAPES:
        _assert_matches(sess, model, _feeds(model, *shape))
    assert sess.stats.compiles == 1, "a new image shape updates dimensions, it does not recompile"
    assert sess.executor.stats.dimension_updates >= 1


def test_num_channels_bound_from_the_feed(runtime):
    model = stems.vit_patch_embedding()
    sess = onyxia.InferenceSession(model, runtime=runtime)
    for shape in SHAPES:
        _assert_matches(sess, model, _feeds(model, *shape))
    assert sess.stats.compiles == 1
    # The weights take 3 channels: a 1-channel image is the model's error, named at its node.
    with pytest.raises(ShapeInferenceError, match="projection/Conv"):
        sess.run(None, _feeds(model, 1, 8, 8, channels=1))


def test_a_new_channel_count_recompiles_instead_of_a_wrong_answer(runtime):
    """LRN works for any channel count, but its plan bakes the one it was compiled for: a feed
    with another one compiles another plan (sess.stats), and going back reuses the first."""
    model = stems.channel_lrn()
    sess = onyxia.InferenceSession(model, runtime=runtime)
    _assert_matches(sess, model, _feeds(model, 2, 6, 5, channels=3))
    _assert_matches(sess, model, _feeds(model, 1, 4, 7, channels=3))
    assert sess.stats.compiles == 1 and sess.stats.recompiles == []
    _assert_matches(sess, model, _feeds(model, 2, 6, 5, channels=5))
    assert sess.stats.compiles == 2
    # The stats say which symbol changed and which node needs it concrete.
    [why] = sess.stats.recompiles
    assert (why.symbol, why.old, why.new) == ("num_channels", 3, 5)
    assert (why.node, why.reason) == ("lrn", "the channel axis")
    _assert_matches(sess, model, _feeds(model, 1, 3, 3, channels=3))
    assert sess.stats.compiles == 2 and len(sess.stats.recompiles) == 1


EXPORTED = Path(__file__).resolve().parents[1] / "data/exported/optimum/vit_patch_embedding.torchscript.onnx"


@pytest.mark.parametrize("dims", [{"num_channels": 3}, None])
def test_torch_exported_vit_patch_embedding_matches_onnxruntime(runtime, dims):
    """torch.onnx's TorchScript export with optimum's axis names (tools/export_vit_patch_embedding.py)."""
    model = onnx.load(str(EXPORTED))
    sess = onyxia.InferenceSession(model, runtime=runtime, dims=dims)
    for shape in SHAPES:
        _assert_matches(sess, model, _feeds(model, *shape))
    assert sess.stats.compiles == 1
