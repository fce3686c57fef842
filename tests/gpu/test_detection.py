"""Detection graphs end to end (tests/data/exported/detection/, written by
tools/export_detection_models.py) against onnxruntime on the same file, and the NonMaxSuppression
path for more boxes than one workgroup ranks.

The exported files are what torchvision emits with the TorchScript exporter: per-class score
filters (Greater → NonZero → GatherND), TopK over a data-dependent count, an If on
`boxes.numel() == 0` around NonMaxSuppression over thousands of concatenated candidates, and
labels built by ConstantOfShape of data-dependent sizes; Faster R-CNN's RoiAlign over the RPN's
proposals; a YOLO's boxes[keep] / scores[keep] / labels[keep] (three NonZero of one mask). Each
family (SSDlite, Faster R-CNN MobileNetV3-FPN, RetinaNet, YOLO) runs at two image sizes; boxes and
scores within 1e-4 of onnxruntime (relative to the largest), labels exact, and the empty twin (a
score threshold no box passes) gives empty outputs as onnxruntime does. The fixtures' scores are
spread so that no two kept scores are within 1e-5: rounding cannot decide their order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onyxia
from onyxia.operators.selection.unique_nms import MAX_NMS_BOXES, NMS_CHUNK

DATA = Path(__file__).resolve().parent.parent / "data" / "exported" / "detection"
SHAPES = [(3, 320, 320), (3, 240, 400)]  # torchvision models take one [3, height, width] image
BATCHED = [(1, 3, 320, 320), (1, 3, 240, 400)]  # the YOLO takes a batch of one
# file -> input shapes; each family has a twin `*_empty.onnx` whose score threshold no box passes.
FAMILIES = {"ssdlite": SHAPES, "faster_rcnn": SHAPES, "retinanet": SHAPES, "yolo": BATCHED}
CASES = [(f"{family}{suffix}.onnx", shapes, not suffix)
         for family, shapes in FAMILIES.items() for suffix in ("", "_empty")]

def _compare(ref: list[np.ndarray], ours: list[np.ndarray]) -> None:
    assert len(ref) == len(ours)
    for r, u in zip(ref, ours):
        assert r.shape == u.shape and r.dtype == u.dtype, (r.shape, u.shape, r.dtype, u.dtype)
        if r.dtype.kind == "f":
            scale = max(float(np.abs(r).max()), 1e-30) if r.size else 1.0
            np.testing.assert_allclose(u, r, rtol=0, atol=1e-4 * scale)
        else:
            np.testing.assert_array_equal(u, r)


@pytest.mark.parametrize("name, shapes, detections", CASES, ids=[c[0] for c in CASES])
def test_exported_detection_matches_onnxruntime(name: str, shapes: list[tuple[int, ...]], detections: bool) -> None:
    path = str(DATA / name)
    ref_session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    session = onyxia.InferenceSession(path)
    feed_name = ref_session.get_inputs()[0].name
    assert {o.name for o in ref_session.get_outputs()} == {"boxes", "scores", "labels"}
    for shape in shapes:
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        ref = ref_session.run(None, {feed_name: x})
        assert (len(ref[0]) > 0) == detections, f"the fixture should {'' if detections else 'not '}detect"
        _compare(ref, session.run(None, {feed_name: x}))

def _nms_model(path: Path, max_out: int) -> None:
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_min"], ["selected"])
    graph = helper.make_graph(
        [node], "nms",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, "n", 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2, "n"])],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, ["k", 3])],
        [helper.make_tensor("max_out", TensorProto.INT64, [1], [max_out]),
         helper.make_tensor("iou", TensorProto.FLOAT, [1], [0.5]),
         helper.make_tensor("score_min", TensorProto.FLOAT, [1], [0.2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


@pytest.mark.parametrize("max_out", [2**63 - 1, 700])
def test_nms_past_one_workgroup(tmp_path: Path, max_out: int) -> None:
    """More boxes than the one-workgroup kernel ranks, and more than one scan chunk: int64-max
    max_output_boxes_per_class (what torchvision exports) and a cap that stops each class early."""
    path = tmp_path / "nms.onnx"
    _nms_model(path, max_out)
    session = onyxia.InferenceSession(str(path))
    ref_session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for n in (MAX_NMS_BOXES + 500, NMS_CHUNK + 900):
        xy = rng.random((1, n, 2), dtype=np.float32) * 100
        boxes = np.concatenate([xy, xy + rng.random((1, n, 2), dtype=np.float32) * 10 + 1], -1)
        scores = rng.random((1, 2, n), dtype=np.float32)
        feeds = {"boxes": boxes, "scores": scores}
        _compare(ref_session.run(None, feeds), session.run(None, feeds))


def test_shape_only_use_of_a_data_dependent_count_still_sets_it(tmp_path: Path) -> None:
    """ConstantOfShape(Shape(NonZero(x > t))): NonZero's output feeds only a Shape, yet its
    count sizes the result, so NonZero must stay in the plan (torchvision's per-class labels)."""
    nodes = []
    for i in range(3):
        nodes += [helper.make_node("Greater", ["x", "t"], [f"g{i}"]),
                  helper.make_node("NonZero", [f"g{i}"], [f"nz{i}"]),
                  helper.make_node("Shape", [f"nz{i}"], [f"s{i}"], start=1),
                  helper.make_node("ConstantOfShape", [f"s{i}"], [f"c{i}"],
                                   value=helper.make_tensor("v", TensorProto.INT64, [1], [i + 1]))]
    nodes.append(helper.make_node("Concat", ["c0", "c1", "c2"], ["y"], axis=0))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, ["m"])],
                              [helper.make_tensor("t", TensorProto.FLOAT, [], [0.5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "labels.onnx"
    onnx.save(model, str(path))
    session = onyxia.InferenceSession(str(path))
    ref_session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for n in (10, 37):
        x = {"x": np.random.default_rng(n).random(n).astype(np.float32)}
        _compare(ref_session.run(None, x), session.run(None, x))


def test_slice_end_clamps_to_a_data_dependent_count(tmp_path: Path) -> None:
    """Slice(NonZero(x > t), 2, 5) along the count: 0..3 rows as the count falls short of the end
    or passes it (torchvision's `keep[:detections_per_img]`)."""
    nodes = [helper.make_node("Greater", ["x", "t"], ["g"]), helper.make_node("NonZero", ["g"], ["nz"]),
             helper.make_node("Slice", ["nz", "starts", "ends", "axes"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [1, "m"])],
                              [helper.make_tensor("t", TensorProto.FLOAT, [], [0.5]),
                               helper.make_tensor("starts", TensorProto.INT64, [1], [2]),
                               helper.make_tensor("ends", TensorProto.INT64, [1], [5]),
                               helper.make_tensor("axes", TensorProto.INT64, [1], [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "slice.onnx"
    onnx.save(model, str(path))
    session = onyxia.InferenceSession(str(path))
    ref_session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for hits in (0, 1, 3, 4, 9):
        x = np.zeros(12, np.float32)
        x[np.random.default_rng(hits).permutation(12)[:hits]] = 1.0
        ref = ref_session.run(None, {"x": x})
        assert ref[0].shape[1] == min(max(hits - 2, 0), 3)
        _compare(ref, session.run(None, {"x": x}))



def test_detr_matches_onnxruntime() -> None:
    """transformers DETR (no NMS: logits and boxes per query) at two batch / image sizes."""
    path = str(DATA / "detr.onnx")
    ref_session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    session = onyxia.InferenceSession(path)
    for shape in ((1, 3, 64, 96), (2, 3, 80, 64)):
        x = {"pixel_values": np.random.default_rng(0).random(shape, dtype=np.float32)}
        _compare(ref_session.run(None, x), session.run(None, x))
