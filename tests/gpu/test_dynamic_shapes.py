"""Dynamic shapes as real exporters write them, against onnxruntime on the same files.

- tests/data/dynamic/: a tiny FPN and U-Net exported by torch.onnx (TorchScript and dynamo) with
  dynamic batch, height and width (tools/export_vision_models.py);
- tests/data/paddle/: a PP-OCR-style classifier and detector exported by paddle2onnx, and the
  same files with the dims paddle2onnx 0.x wrote, `[-1, 3, "?", "?"]` (tools/export_paddle_models.py).

The FPN and the detector add an upsampled stride-32 map to a stride-16 one (`2 * ceil(h/32)`
against `ceil(h/16)`), the U-Net concatenates a skip connection with an upsampled pooled map
(`2 * (h // 4)` against `h // 2`): equal for the sizes the models are meant for, not symbolically.
One InferenceSession per file is built before any feed, runs at several sizes (one plan: only
dimensions are updated), and a size that breaks the equality is a DimensionError naming both
expressions and the node, as onnxruntime fails on it too; the session stays usable after it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as h

import onyxia
from onyxia.errors import DimensionError
from tests.helpers import make_model, run_ort

DATA = Path(__file__).resolve().parent.parent / "data"
RTOL = ATOL = 1e-4


@dataclass(frozen=True)
class Case:
    path: str
    sizes: tuple[tuple[int, int, int], ...]  # (batch, height, width), valid for the model
    invalid: tuple[int, int, int] | None  # a size that breaks an equality the model relies on
    op: str = ""  # the op type of the node that needs it


FPN_SIZES = ((1, 64, 96), (2, 64, 160), (1, 224, 96), (1, 64, 96))
UNET_SIZES = ((1, 64, 96), (2, 8, 20), (1, 28, 12))
DET_SIZES = ((1, 64, 96), (2, 96, 64), (1, 160, 128))
CLS_SIZES = ((1, 48, 192), (3, 48, 100), (2, 64, 64))
CASES = [
    Case("dynamic/fpn.torchscript.onnx", FPN_SIZES, (1, 80, 64), "Add"),
    Case("dynamic/fpn.dynamo.onnx", FPN_SIZES, (1, 80, 64), "Add"),
    Case("dynamic/unet.torchscript.onnx", UNET_SIZES, (1, 6, 8), "Concat"),
    Case("dynamic/unet.dynamo.onnx", UNET_SIZES, (1, 6, 8), "Concat"),
    Case("paddle/text_det.onnx", DET_SIZES, (1, 80, 64), "Add"),
    Case("paddle/text_det.legacy_dims.onnx", DET_SIZES, (1, 80, 64), "Add"),
    Case("paddle/text_cls.onnx", CLS_SIZES, None),
    Case("paddle/text_cls.legacy_dims.onnx", CLS_SIZES, None),
]


def _image(batch: int, height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, height, width)).astype(np.float32)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.path)
def test_one_session_runs_every_valid_size_and_names_a_broken_equality(case, runtime):
    path = str(DATA / case.path)
    model = onnx.load(path)
    name = model.graph.input[0].name
    sess = onyxia.InferenceSession(path, runtime=runtime)  # no feed yet: nothing may fail here
    assert all(a.type == "tensor(float)" for a in sess.get_outputs())
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for size in case.sizes:
        x = _image(*size)
        (got,), (want,) = sess.run(None, {name: x}), ref.run(None, {name: x})
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{case.path} at {size}")
    assert len(sess._executors) == 1 and sess.executor.stats.recompiles == 0, "one plan for every size"
    assert sess.executor.stats.dimension_updates == len(case.sizes) - 1
    if case.invalid is None:
        return
    bad = _image(*case.invalid)
    with pytest.raises(Exception, match="broadcast|mismatched"):  # onnxruntime refuses it as well
        ref.run(None, {name: bad})
    with pytest.raises(DimensionError) as info:
        sess.run(None, {name: bad})
    message = str(info.value)
    node = re.search(r"node '([^']+)'", message)
    ops = {n.name: n.op_type for n in model.graph.node}
    assert node and ops.get(node.group(1)) == case.op, message
    assert re.search(r"dimensions .+ = \d+ and .+ = \d+ must be equal \(with .+=\d+", message), message
    # Nothing changed: the session still runs the last valid size, without recompiling.
    x = _image(*case.sizes[0], seed=1)
    np.testing.assert_allclose(sess.run(None, {name: x})[0], ref.run(None, {name: x})[0], rtol=RTOL, atol=ATOL)
    assert sess.executor.stats.recompiles == 0


def test_update_dimensions_checks_the_recorded_equality(runtime):
    """The plan itself carries the equality: update_dimensions refuses a height that breaks it."""
    graph = onyxia.load_model(DATA / "paddle/text_det.legacy_dims.onnx")
    compiled = onyxia.CompilerPipeline(onyxia.core_operator_registry()).compile(
        graph, {"x_dim0": 1, "x_dim2": 64, "x_dim3": 96})
    assert compiled.constraints, "the detector's Add relies on an equality"
    exe = runtime.load_model(compiled)
    with pytest.raises(DimensionError, match=r"must be equal \(with x_dim2=80\): node 'Add\.\d+'"):
        exe.update_dimensions({"x_dim2": 80})
    exe.update_dimensions({"x_dim2": 96, "x_dim3": 64})
    x = _image(1, 96, 64)
    want = run_ort(onnx.load(DATA / "paddle/text_det.legacy_dims.onnx"), {"x": x})[0]
    np.testing.assert_allclose(exe.run({"x": x})["save_infer_model/scale_0.tmp_1"], want, rtol=RTOL, atol=ATOL)


def test_legacy_dims_are_separate_symbols_bound_from_the_feed(runtime):
    """[-1, 3, "?", "?"]: three symbols, so height and width may differ."""
    sess = onyxia.InferenceSession(DATA / "paddle/text_cls.legacy_dims.onnx", runtime=runtime)
    assert sess.get_inputs()[0].shape == ["x_dim0", 3, "x_dim2", "x_dim3"]
    assert sess.get_outputs()[0].shape == ["x_dim0", 2]


def _half_size_resize():
    """Resize to floor(0.5 * (h, w)), the size computed from Shape in float, as exporters write
    interpolate(scale_factor=..., recompute_scale_factor=True)."""
    nodes = [h.make_node("Shape", ["x"], ["s"]),
             h.make_node("Slice", ["s", "two", "four"], ["hw"]),
             h.make_node("Cast", ["hw"], ["hwf"], to=TensorProto.FLOAT),
             h.make_node("Mul", ["hwf", "half"], ["hwh"]),
             h.make_node("Floor", ["hwh"], ["hwfl"]),
             h.make_node("Cast", ["hwfl"], ["hwi"], to=TensorProto.INT64),
             h.make_node("Slice", ["s", "zero", "two"], ["nc"]),
             h.make_node("Concat", ["nc", "hwi"], ["sizes"], axis=0),
             h.make_node("Resize", ["x", "", "", "sizes"], ["r"], mode="nearest"),
             h.make_node("Relu", ["r"], ["y"])]
    inits = {"zero": np.array([0]), "two": np.array([2]), "four": np.array([4]),
             "half": np.array(0.5, np.float32)}
    return make_model(nodes, [("x", np.float32, ["n", 3, "h", "w"])], ["y"], inits)


def test_sizes_symbolic_inference_cannot_follow_specialize_on_sizes_not_pixels(runtime):
    model = _half_size_resize()
    sess = onyxia.InferenceSession(model, runtime=runtime)
    plans = set()
    for seed, size in enumerate([(1, 8, 8), (1, 8, 8), (3, 8, 8), (1, 10, 6), (2, 10, 6)]):
        x = _image(*size, seed=seed)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], run_ort(model, {"x": x})[0], rtol=RTOL, atol=ATOL)
        plans.add(id(sess.executor))
    assert sess._value_inputs == (), "the image's values are never baked into the plan"
    assert len(plans) == 2, "one plan per (h, w); images and batch sizes reuse it"
