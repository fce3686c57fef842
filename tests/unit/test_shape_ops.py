"""Shape, view and indexing operators without a GPU: inference over symbolic dims, folding
(against onnxruntime), the steps planned, and the errors raised."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

from onyxia.errors import OnyxiaError, ShapeInferenceError
from onyxia.ir.shapes import SymDim
from tests.helpers import compile_model, live_dispatches, make_model, run_ort

INT64_MAX = np.iinfo(np.int64).max
batch, seq = SymDim.symbol("batch"), SymDim.symbol("seq")
X = ("x", np.float32, ["batch", "seq", 8])
DIMS = {"batch": 2, "seq": 5}


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def planned(compiled) -> dict[str, int]:
    """op_type -> number of steps, for every op that planned any."""
    out: dict[str, int] = {}
    for op in compiled.operations:
        out[op.op_type] = out.get(op.op_type, 0) + len(op.steps)
    return {k: v for k, v in out.items() if v}


def shape_of(compiled, name: str):
    return compiled.tensors[name].shape


# ---- shape chains fold to nothing ---------------------------------------------------------

def test_shape_gather_concat_reshape_chain_is_zero_steps():
    nodes = [
        h.make_node("Shape", ["x"], ["s"]),
        h.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        h.make_node("Gather", ["s", "one"], ["q"], axis=0),
        h.make_node("Unsqueeze", ["b", "ax0"], ["bu"]),
        h.make_node("Unsqueeze", ["q", "ax0"], ["qu"]),
        h.make_node("Concat", ["bu", "qu", "two", "m1"], ["shp"], axis=0),
        h.make_node("Reshape", ["x", "shp"], ["y"]),
    ]
    inits = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64), "ax0": i64(0), "two": i64(2),
             "m1": i64(-1)}
    compiled = compile_model(make_model(nodes, [X], ["y"], inits), DIMS)
    assert compiled.steps == []  # not even a WriteBuffer for the symbolic shape value
    assert shape_of(compiled, "y") == (batch, seq, 2, 4)
    assert compiled.tensors["y"].alias_of == "x"


def test_shape_slice_concat_expand_chain_plans_only_the_expand():
    nodes = [
        h.make_node("Shape", ["x"], ["s"]),
        h.make_node("Slice", ["s", "st", "en"], ["bs"]),
        h.make_node("Concat", ["bs", "eight"], ["shp"], axis=0),
        h.make_node("Expand", ["v", "shp"], ["y"]),
    ]
    inits = {"st": i64(0), "en": i64(2), "eight": i64(8), "v": np.ones((1, 1, 1), np.float32)}
    compiled = compile_model(make_model(nodes, [X], ["y"], inits), DIMS)
    assert planned(compiled) == {"Expand": 1}
    assert shape_of(compiled, "y") == (batch, seq, 8)


def test_range_over_a_symbolic_limit_is_one_kernel():
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "one"], ["n"], axis=0),
             h.make_node("Range", ["zero", "n", "one"], ["y"])]
    inits = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64)}
    compiled = compile_model(make_model(nodes, [X], ["y"], inits), DIMS)
    assert shape_of(compiled, "y") == (seq,)
    assert planned(compiled) == {"Range": 1}


def test_constant_of_shape_of_a_symbolic_shape_is_a_fill():
    nodes = [h.make_node("Shape", ["x"], ["s"]),
             h.make_node("ConstantOfShape", ["s"], ["y"], value=h.make_tensor("v", 7, [1], [3]))]
    compiled = compile_model(make_model(nodes, [X], ["y"]), DIMS)
    assert shape_of(compiled, "y") == (batch, seq, 8)
    assert compiled.tensors["y"].dtype == "int64"
    assert planned(compiled) == {"ConstantOfShape": 1}


def test_views_emit_no_steps():
    nodes = [h.make_node("Flatten", ["x"], ["f"], axis=2), h.make_node("Unsqueeze", ["f", "ax"], ["u"]),
             h.make_node("Squeeze", ["u", "ax"], ["s"]), h.make_node("Identity", ["s"], ["i"]),
             h.make_node("Dropout", ["i"], ["y"])]
    compiled = compile_model(make_model(nodes, [X], ["y"], {"ax": i64(-1)}), DIMS)
    assert compiled.steps == []
    assert shape_of(compiled, "y") == (batch * seq, 8)
    assert compiled.tensors["y"].alias_of == "x"


# ---- inference over symbolic dims ---------------------------------------------------------

@pytest.mark.parametrize("starts, ends, axes, steps, expected", [
    ([-1], [INT64_MAX], [1], [1], (batch, 1, 8)),          # last token
    ([0], [-1], [1], [1], (batch, seq - 1, 8)),            # all but the last
    ([-1], [-INT64_MAX], [1], [-1], (batch, seq, 8)),      # reversed
    ([1], [INT64_MAX], [1], [2], (batch, seq // 2, 8)),    # odd positions
    ([2, 0], [9, INT64_MAX], [2, 0], [1, 1], (batch, seq, 6)),  # static axis clamped
])
def test_slice_inference_over_symbolic_dims(starts, ends, axes, steps, expected):
    node = h.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])
    inits = {"st": i64(*starts), "en": i64(*ends), "ax": i64(*axes), "sp": i64(*steps)}
    compiled = compile_model(make_model([node], [X], ["y"], inits), DIMS)
    assert shape_of(compiled, "y") == expected


def test_slice_with_shape_derived_bounds():
    # x[:, :seq(t)] where the end comes from another input's shape
    nodes = [h.make_node("Shape", ["t"], ["s"], start=1, end=2),
             h.make_node("Slice", ["x", "zero", "s", "one"], ["y"])]
    compiled = compile_model(make_model(nodes, [X, ("t", np.float32, [1, "k"])], ["y"],
                                        {"zero": i64(0), "one": i64(1)}), {**DIMS, "k": 3})
    assert shape_of(compiled, "y") == (batch, SymDim.symbol("k"), 8)


def test_split_over_a_symbolic_dim():
    node = h.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)
    compiled = compile_model(make_model([node], [X], ["a", "b", "c"]), DIMS)
    chunk = (seq + 2) // 3
    assert [shape_of(compiled, n)[1] for n in "abc"] == [chunk, chunk, seq - 2 * chunk]
    assert planned(compiled) == {"Split": 1}  # one dispatch writes all three


def test_squeeze_without_axes_keeps_symbolic_dims():
    node = h.make_node("Squeeze", ["x"], ["y"])
    compiled = compile_model(make_model([node], [("x", np.float32, [1, "seq", 1, 4])], ["y"]), {"seq": 3})
    assert shape_of(compiled, "y") == (seq, 4)


def test_size_and_transpose_over_symbols():
    nodes = [h.make_node("Transpose", ["x"], ["t"], perm=[1, 2, 0]), h.make_node("Size", ["t"], ["n"]),
             h.make_node("Reshape", ["t", "n"], ["y"])]
    compiled = compile_model(make_model(nodes, [X], ["y"]), DIMS)
    assert shape_of(compiled, "t") == (seq, 8, batch)
    assert shape_of(compiled, "y") == (batch * seq * 8,)


def test_concat_of_many_inputs_uses_one_dispatch_per_seven():
    inputs = [(f"x{i}", np.float32, [2, "seq"]) for i in range(9)]
    node = h.make_node("Concat", [n for n, _, _ in inputs], ["y"], axis=1)
    compiled = compile_model(make_model([node], inputs, ["y"]), {"seq": 3})
    assert shape_of(compiled, "y") == (2, 9 * seq)
    for dims in ({"seq": 3}, {"seq": 4}):  # element- or quad-wise: two dispatches either way
        assert len(live_dispatches(compiled, dims)) == 2, dims


def test_empty_tensors_dispatch_nothing():
    nodes = [h.make_node("Transpose", ["x"], ["t"]), h.make_node("Concat", ["x", "x"], ["c"], axis=1),
             h.make_node("Pad", ["x", "pads"], ["p"])]
    compiled = compile_model(make_model(nodes, [("x", np.float32, [0, 3])], ["t", "c", "p"],
                                        {"pads": i64(0, 1, 0, 1)}))
    assert compiled.steps == []


# ---- folding agrees with onnxruntime ------------------------------------------------------

rng = np.random.default_rng(0)
A = rng.standard_normal((3, 4, 5)).astype(np.float32)
IDX = np.array([[0, -1], [2, 1]], np.int64)

FOLD_CASES = {
    "transpose": ([h.make_node("Transpose", ["a"], ["y"], perm=[2, 0, 1])], {}),
    "expand": ([h.make_node("Expand", ["a", "s"], ["y"])], {"s": i64(2, 1, 1, 5)}),
    "tile": ([h.make_node("Tile", ["a", "r"], ["y"])], {"r": i64(2, 1, 3)}),
    "concat": ([h.make_node("Concat", ["a", "a"], ["y"], axis=-1)], {}),
    "split": ([h.make_node("Split", ["a", "sp"], ["y", "z"], axis=1)], {"sp": i64(1, 3)}),
    "pad_reflect": ([h.make_node("Pad", ["a", "p"], ["y"], mode="reflect")], {"p": i64(0, 2, 1, 0, 3, -1)}),
    "pad_constant": ([h.make_node("Pad", ["a", "p", "cv"], ["y"])],
                     {"p": i64(1, 0, 0, 0, 1, 2), "cv": np.array(1.5, np.float32)}),
    "slice": ([h.make_node("Slice", ["a", "st", "en", "ax", "sp"], ["y"])],
              {"st": i64(-1, 1), "en": i64(-INT64_MAX, 4), "ax": i64(2, 1), "sp": i64(-2, 2)}),
    "gather": ([h.make_node("Gather", ["a", "i"], ["y"], axis=1)], {"i": IDX}),
    "gather_elements": ([h.make_node("GatherElements", ["a", "i3"], ["y"], axis=2)],
                        {"i3": rng.integers(-5, 5, (3, 2, 5))}),
    "gather_nd": ([h.make_node("GatherND", ["a", "i2"], ["y"], batch_dims=1)], {"i2": i64(1, 3, -1).reshape(3, 1)}),
    "scatter_nd": ([h.make_node("ScatterND", ["a", "i2", "u"], ["y"], reduction="add")],
                   {"i2": i64(1, 1, 0).reshape(3, 1), "u": np.ones((3, 4, 5), np.float32)}),
    "scatter_elements": ([h.make_node("ScatterElements", ["a", "i3", "u3"], ["y"], axis=1, reduction="max")],
                         {"i3": rng.integers(-4, 4, (3, 2, 5)), "u3": np.full((3, 2, 5), 9, np.float32)}),
    "trilu": ([h.make_node("Trilu", ["a", "k"], ["y"], upper=0)], {"k": np.array(1, np.int64)}),
    "range": ([h.make_node("Range", ["r0", "r1", "r2"], ["y"])],
              {"r0": np.array(10, np.int64), "r1": np.array(1, np.int64), "r2": np.array(-3, np.int64)}),
    "constant_of_shape": ([h.make_node("ConstantOfShape", ["s"], ["y"], value=h.make_tensor("v", 6, [1], [7]))],
                          {"s": i64(2, 3)}),
    "cast": ([h.make_node("Cast", ["a"], ["y"], to=3)], {}),  # float → int8
}


@pytest.mark.parametrize("case", sorted(FOLD_CASES))
def test_fold_matches_onnxruntime(case):
    nodes, inits = FOLD_CASES[case]
    outputs = list(nodes[0].output)
    model = make_model(nodes, [], outputs, {"a": A * 3, **inits})
    compiled = compile_model(model)
    assert compiled.metadata["planned_nodes"] == 0, case
    for name, ref in zip(outputs, run_ort(model, {})):
        got = compiled.tensors[name].data
        assert got.dtype == ref.dtype and got.shape == ref.shape, name
        np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_fold_keeps_symbols_through_gather_slice_concat_cast():
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Slice", ["s", "st", "en"], ["t"]),
             h.make_node("Cast", ["t"], ["c"], to=7), h.make_node("Concat", ["c", "st"], ["u"], axis=0),
             h.make_node("Gather", ["u", "ix"], ["y"])]
    model = make_model(nodes, [X], ["y"], {"st": i64(1), "en": i64(3), "ix": i64(1, 0, 2)})
    compiled = compile_model(model, DIMS)
    # y is a symbolic value [8, seq, 1] written once per dimension change, no kernel
    assert planned(compiled) == {"WriteBuffer": 1}
    assert compiled.steps[0].data == (8, seq, 1)


# ---- errors name the node and what is wrong ------------------------------------------------

@pytest.mark.parametrize("nodes, inits, needle", [
    ([h.make_node("Slice", ["x", "st", "en"], ["y"], name="sl")], {"en": i64(2)}, "node 'sl' (Slice) input 1"),
    ([h.make_node("Transpose", ["x"], ["y"], perm=[0, 0, 1])], {}, "attribute 'perm'"),
    ([h.make_node("Pad", ["x", "p"], ["y"], mode="mirror")], {"p": i64(0, 0, 0, 0, 0, 0)}, "attribute 'mode'"),
    ([h.make_node("Split", ["x", "sp"], ["a", "b"], axis=2)], {"sp": i64(3, 4)}, "do not add up"),
    ([h.make_node("Reshape", ["x", "s"], ["y"])], {"s": i64(-1, -1)}, "more than one -1"),
    ([h.make_node("Dropout", ["x", "r", "t"], ["y"])], {"r": np.array(0.5, np.float32), "t": np.array(True)},
     "training_mode"),
    # Two index rows, so the updates' [batch, seq, 8] fits for batch = 2 (DIMS).
    ([h.make_node("ScatterND", ["x", "i", "x"], ["y"], reduction="avg")], {"i": i64(0, 1).reshape(2, 1)},
     "attribute 'reduction'"),
    ([h.make_node("Squeeze", ["x", "ax"], ["y"])], {"ax": i64(2)}, "cannot squeeze axis 2 of size 8"),
])
def test_errors_name_node_and_element(nodes, inits, needle):
    inputs = [X] + [(n, np.int64, [1]) for n in ("st",) if n in nodes[0].input and n not in inits]
    with pytest.raises(OnyxiaError) as info:
        compile_model(make_model(nodes, inputs, ["y"] if "y" in nodes[0].output else list(nodes[0].output), inits),
                      DIMS)
    assert needle in str(info.value)
    assert isinstance(info.value, ShapeInferenceError)


def test_float64_data_movement_is_a_clear_error():
    node = h.make_node("Transpose", ["x"], ["y"], name="tr")
    with pytest.raises(OnyxiaError, match="node 'tr' \\(Transpose\\) output has dtype float64"):
        compile_model(make_model([node], [("x", np.float64, [2, 3])], ["y"]))
