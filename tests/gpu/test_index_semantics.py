"""Index semantics against onnxruntime (issue 12, root cause 2): indices outside [-dim, dim) are
refused naming the node (onnxruntime raises; clamping them returned a wrong row silently), a
Reshape's -1 is recomputed after update_dimensions, and ReduceMax/ReduceMin/ArgMax see NaN as
onnxruntime does."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

from onyxia.errors import ComputeError, ShapeInferenceError
from tests.helpers import assert_matches_ort, compile_model, make_model, run_onyxia, run_ort

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


# ---- NaN in Max/Min reductions ----------------------------------------------------------------
# The oracle is onnx.reference (numpy): NaN propagates through the max and the min, and the arg
# reductions give the first (select_last_index: last) NaN. onnxruntime is no oracle here: its
# ReduceMax gives NaN only when the row starts with one, and otherwise even a wrong number
# (row 0..7 with a NaN at index 1 gives 6, not 7).

NAN_ROWS = np.float32([[1, np.nan, 3], [4, 5, 6], [np.nan, -np.inf, 0], [7, 8, np.nan], [np.nan, np.nan, 1],
                       [-np.inf, -np.inf, -np.inf], [np.inf, np.nan, np.inf]])


def assert_matches_reference(runtime, model, feeds):
    from onnx.reference import ReferenceEvaluator

    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = run_onyxia(runtime, model, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes", [[0], [1], [0, 1]])
def test_reduce_max_min_propagate_nan(runtime, op, axes):
    model = make_model([h.make_node(op, ["x"], ["y"], keepdims=0, axes=axes)], [("x", F, [7, 3])], ["y"], opset=17)
    assert_matches_reference(runtime, model, {"x": NAN_ROWS})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reductions_take_the_nan(runtime, op, last):
    model = make_model([h.make_node(op, ["x"], ["y"], axis=1, keepdims=0, select_last_index=last)],
                       [("x", F, [7, 3])], ["y"])
    assert_matches_reference(runtime, model, {"x": NAN_ROWS})


# ---- Reshape's -1 after update_dimensions -----------------------------------------------------

@pytest.mark.parametrize("target", [[2, -1], [-1, 2], [4, -1]])
def test_reshape_minus_one_is_rechecked_after_update_dimensions(runtime, target):
    from onyxia.errors import DimensionError

    # Compiled for batch 4, the -1 of x [batch, 3] -> target is an expression of batch; a batch
    # whose element count the target's other dims do not divide is refused, naming the node.
    model = make_model([h.make_node("Reshape", ["x", "s"], ["y"], name="reshape")], [("x", F, ["batch", 3])], ["y"],
                       {"s": I64(target)})
    exe = runtime.load_model(compile_model(model, {"batch": 4}))
    for batch in (1, 2, 3, 8):
        x = np.arange(3 * batch, dtype=F).reshape(batch, 3)
        if (3 * batch) % (-np.prod(target)) == 0:
            exe.update_dimensions({"batch": batch})
            np.testing.assert_array_equal(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0])
        else:
            with pytest.raises(Exception):
                run_ort(model, {"x": x})
            with pytest.raises(DimensionError, match="node 'reshape'"):
                exe.update_dimensions({"batch": batch})
                exe.run({"x": x})
