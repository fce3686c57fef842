"""Index semantics against onnxruntime (issue 12, root cause 2): indices outside [-dim, dim) are
refused naming the node (onnxruntime raises; clamping them returned a wrong row silently), a
Reshape's -1 is recomputed after update_dimensions, and ReduceMax/ReduceMin/ArgMax see NaN as
onnxruntime does."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

from onyxia.errors import ComputeError, ShapeInferenceError
from tests.helpers import assert_matches_ort, compile_model, make_model, run_ort

F, I64 = np.float32, np.int64
DATA = np.arange(8, dtype=F).reshape(4, 2)


def index_case(kind: str, index: np.ndarray, reduction: str = "none"):
    """(model, feeds) of one indexing op named 'idx' over DATA [4, 2] with the indices fed."""
    if kind == "Gather":
        node = h.make_node("Gather", ["d", "i"], ["y"], name="idx")
    elif kind == "GatherElements":
        node = h.make_node("GatherElements", ["d", "i"], ["y"], name="idx", axis=0)
    elif kind == "GatherND":
        node = h.make_node("GatherND", ["d", "i"], ["y"], name="idx")
    elif kind == "ScatterND":
        node = h.make_node("ScatterND", ["d", "i", "u"], ["y"], name="idx", reduction=reduction)
    else:
        node = h.make_node("ScatterElements", ["d", "i", "u"], ["y"], name="idx", axis=0, reduction=reduction)
    inputs = [("d", F, [4, 2]), ("i", I64, list(index.shape))]
    feeds = {"d": DATA, "i": index}
    if kind == "ScatterND":
        upd = -np.ones(index.shape[:-1] + DATA.shape[index.shape[-1]:], F)
        inputs.append(("u", F, list(upd.shape)))
        feeds["u"] = upd
    elif kind == "ScatterElements":
        inputs.append(("u", F, list(index.shape)))
        feeds["u"] = -np.ones(index.shape, F)
    return make_model([node], inputs, ["y"], opset=18), feeds


OUT_OF_RANGE = [
    ("Gather", I64([1, 9])),
    ("Gather", I64([-5])),
    ("GatherElements", I64([[0, 7]])),
    ("GatherND", I64([[5, 0]])),
    ("GatherND", I64([[0, -3]])),
    ("ScatterND", I64([[9]])),
    ("ScatterElements", I64([[0, 4]])),
]


@pytest.mark.parametrize("kind, index", OUT_OF_RANGE)
def test_fed_indices_out_of_range_raise_naming_the_node(runtime, kind, index):
    model, feeds = index_case(kind, index)
    with pytest.raises(Exception):  # the oracle refuses too
        run_ort(model, feeds)
    exe = runtime.load_model(compile_model(model))
    with pytest.raises(ComputeError, match=rf"node 'idx' \({kind}\): an index outside"):
        exe.run(feeds)
    # The report is cleared: the executor serves the next (valid) run.
    good = {**feeds, "i": np.zeros_like(index)}
    np.testing.assert_array_equal(exe.run(good)["y"], run_ort(model, good)[0])


@pytest.mark.parametrize("reduction", ["add", "max"])
def test_scatter_reductions_report_out_of_range_targets(runtime, reduction):
    model, feeds = index_case("ScatterElements", I64([[1, 0], [3, -5]]), reduction)
    with pytest.raises(ComputeError, match=r"node 'idx' \(ScatterElements\): an index outside"):
        runtime.load_model(compile_model(model)).run(feeds)


@pytest.mark.parametrize("kind, index", OUT_OF_RANGE)
def test_constant_indices_out_of_range_are_refused_at_compile_time(kind, index):
    model, feeds = index_case(kind, index)
    init = h.make_tensor("i", 7, index.shape, index.reshape(-1).tolist())
    model.graph.input.remove(next(i for i in model.graph.input if i.name == "i"))
    model.graph.initializer.append(init)
    with pytest.raises(ShapeInferenceError, match=rf"node 'idx' \({kind}\).*index -?\d+ is outside"):
        compile_model(model)


@pytest.mark.parametrize("kind, index", [
    ("Gather", I64([-1, -4, 3, 0])),
    ("GatherElements", I64([[-4, 3], [0, -1]])),
    ("GatherND", I64([[-4, -2], [3, 1]])),
    ("ScatterND", I64([[-1], [0]])),
    ("ScatterElements", I64([[-4, 3]])),
])
def test_indices_at_the_edges_of_the_range_match_onnxruntime(runtime, kind, index):
    model, feeds = index_case(kind, index)
    assert_matches_ort(runtime, model, feeds)
