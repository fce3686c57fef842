"""Shape, view, layout and cast operators on the GPU against onnxruntime, including symbolic
dims changed at runtime without recompiling, and folded results equal to GPU results."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto
from onnx import helper as h

from tests.helpers import assert_matches_ort, check_across_dims, compile_model, i64, make_model, random_array, run_ort

rng = np.random.default_rng(0)
rand = functools.partial(random_array, rng)


def check(runtime, nodes, inputs, feeds, outputs=("y",), inits=None, dims=None, opset=18):
    assert_matches_ort(runtime, make_model(nodes, inputs, list(outputs), inits, opset=opset), feeds, dims)


# ---- views ------------------------------------------------------------------------------

def test_views_share_the_input_buffer(runtime):
    nodes = [h.make_node("Reshape", ["x", "s"], ["r"]), h.make_node("Flatten", ["r"], ["f"], axis=-1),
             h.make_node("Unsqueeze", ["f", "ax"], ["u"]), h.make_node("Squeeze", ["u"], ["q"]),
             h.make_node("Identity", ["q"], ["i"]), h.make_node("Dropout", ["i"], ["y", "mask"])]
    model = make_model(nodes, [("x", np.float32, [2, 3, 4])], ["y", "mask"], {"s": i64(0, -1, 2), "ax": i64(0, 3)})
    assert_matches_ort(runtime, model, {"x": rand(2, 3, 4)})
    assert compile_model(model).num_dispatches == 1  # only the mask fill


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_axes_as_attribute_or_input(runtime, opset):
    if opset < 13:
        nodes = [h.make_node("Unsqueeze", ["x"], ["u"], axes=[0, -1]), h.make_node("Squeeze", ["u"], ["y"], axes=[0])]
        inits = {}
    else:
        nodes = [h.make_node("Unsqueeze", ["x", "a"], ["u"]), h.make_node("Squeeze", ["u", "b"], ["y"])]
        inits = {"a": i64(0, -1), "b": i64(0)}
    check(runtime, nodes, [("x", np.float32, [3, 2])], {"x": rand(3, 2)}, inits=inits, opset=opset)


def test_reshape_over_symbolic_dims_across_sizes(runtime):
    nodes = [h.make_node("Reshape", ["x", "s"], ["r"]), h.make_node("Relu", ["r"], ["y"])]
    model = make_model(nodes, [("x", np.float32, ["b", "s", 6])], ["y"], {"s": i64(0, -1, 3)})
    check_across_dims(runtime, model, lambda d: {"x": rand(d["b"], d["s"], 6)},
                      [{"b": 2, "s": 3}, {"b": 1, "s": 1}, {"b": 3, "s": 0}])


# ---- Transpose ----------------------------------------------------------------------------

@pytest.mark.parametrize("perm, dtype", [(None, np.float32), ([0, 2, 1, 3], np.float32), ([3, 1, 0, 2], np.int64),
                                         ([1, 0, 2, 3], np.bool_), ([0, 1, 2, 3], np.float16)])
def test_transpose(runtime, perm, dtype):
    attrs = {} if perm is None else {"perm": perm}
    check(runtime, [h.make_node("Transpose", ["x"], ["y"], **attrs)], [("x", dtype, [2, 3, 4, 5])],
          {"x": rand(2, 3, 4, 5, dtype=dtype)})


def test_transpose_symbolic_heads_layout(runtime):
    node = h.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1, 3])  # [b, s, h, d] → [b, h, s, d]
    model = make_model([node], [("x", np.float32, ["b", "s", 2, 4])], ["y"])
    check_across_dims(runtime, model, lambda d: {"x": rand(d["b"], d["s"], 2, 4)},
                      [{"b": 1, "s": 5}, {"b": 2, "s": 1}, {"b": 2, "s": 0}])


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_transpose_random_perms(runtime, data):
    rank = data.draw(st.integers(1, 5))
    shape = data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    perm = data.draw(st.permutations(range(rank)))
    check(runtime, [h.make_node("Transpose", ["x"], ["y"], perm=list(perm))], [("x", np.float32, shape)],
          {"x": rand(*shape)})


# ---- Expand, Tile ---------------------------------------------------------------------------

@pytest.mark.parametrize("in_shape, target", [([3, 1], [2, 3, 4]), ([1, 4], [3, 1]), ([2, 1, 3], [2, 1, 3]),
                                              ([], [2, 2])])
def test_expand(runtime, in_shape, target):
    check(runtime, [h.make_node("Expand", ["x", "s"], ["y"])], [("x", np.float32, in_shape)],
          {"x": rand(*in_shape)}, inits={"s": i64(*target)})


def test_expand_to_a_symbolic_shape(runtime):
    # a causal-mask style broadcast: [1, 1, s] to Shape(x)[:2] + [s]
    nodes = [h.make_node("Shape", ["x"], ["sh"]), h.make_node("Expand", ["m", "sh"], ["y"])]
    model = make_model(nodes, [("x", np.float32, ["b", 3, "s"]), ("m", np.int64, [1, 1, "s"])], ["y"])
    check_across_dims(runtime, model, lambda d: {"x": rand(d["b"], 3, d["s"]), "m": rand(1, 1, d["s"], dtype=np.int64)},
                      [{"b": 2, "s": 4}, {"b": 1, "s": 7}])


def test_shape_slice_concat_expand_chain_across_dims(runtime):
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Slice", ["s", "st", "en"], ["bs"]),
             h.make_node("Concat", ["bs", "four"], ["shp"], axis=0), h.make_node("Expand", ["v", "shp"], ["y"])]
    model = make_model(nodes, [("x", np.float32, ["b", "s", 3])], ["y"],
                       {"st": i64(0), "en": i64(2), "four": i64(4), "v": rand(1, 1, 4)})
    assert [op.op_type for op in compile_model(model, {"b": 1, "s": 2}).operations] == ["Expand"]
    check_across_dims(runtime, model, lambda d: {"x": rand(d["b"], d["s"], 3)}, [{"b": 1, "s": 2}, {"b": 3, "s": 5}])


@pytest.mark.parametrize("shape, repeats, dtype", [([2, 3], [2, 2], np.float32), ([3], [4], np.int64),
                                                   ([2, 1, 3], [1, 3, 1], np.bool_)])
def test_tile(runtime, shape, repeats, dtype):
    check(runtime, [h.make_node("Tile", ["x", "r"], ["y"])], [("x", dtype, shape)],
          {"x": rand(*shape, dtype=dtype)}, inits={"r": i64(*repeats)})


# ---- Concat, Split ------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_axes(runtime, axis):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    shapes[0][axis], shapes[2][axis] = 1, 5
    inputs = [(f"x{i}", np.float32, s) for i, s in enumerate(shapes)]
    check(runtime, [h.make_node("Concat", ["x0", "x1", "x2"], ["y"], axis=axis)], inputs,
          {f"x{i}": rand(*s) for i, s in enumerate(shapes)})


def test_concat_nine_int_inputs(runtime):
    inputs = [(f"x{i}", np.int64, [2, i % 3]) for i in range(9)]
    check(runtime, [h.make_node("Concat", [n for n, _, _ in inputs], ["y"], axis=1)], inputs,
          {n: rand(*s, dtype=np.int64) for n, _, s in inputs})


def test_concat_kv_cache_over_symbolic_lengths(runtime):
    node = h.make_node("Concat", ["past", "new"], ["y"], axis=2)
    model = make_model([node], [("past", np.float32, [1, 2, "p", 4]), ("new", np.float32, [1, 2, "s", 4])], ["y"])
    check_across_dims(runtime, model, lambda d: {"past": rand(1, 2, d["p"], 4), "new": rand(1, 2, d["s"], 4)},
                      [{"p": 0, "s": 5}, {"p": 5, "s": 1}, {"p": 6, "s": 1}])


@pytest.mark.parametrize("opset, attrs, inits, outs", [
    (18, {"axis": 1, "num_outputs": 3}, {}, 3),            # uneven: 3, 3, 1
    (13, {"axis": -1}, {"sp": i64(1, 0, 3)}, 3),          # split input, a zero-size part
    (11, {"axis": 0, "split": [1, 1]}, {}, 2),             # split attribute
    (13, {"axis": 2}, {}, 2),                              # equal parts
])
def test_split(runtime, opset, attrs, inits, outs):
    names = [f"y{k}" for k in range(outs)]
    node = h.make_node("Split", ["x"] + list(inits), names, **attrs)
    check(runtime, [node], [("x", np.float32, [2, 7, 5] if opset == 18 else [2, 3, 4])],
          {"x": rand(*([2, 7, 5] if opset == 18 else [2, 3, 4]))}, outputs=names, inits=inits, opset=opset)


def test_split_qkv_with_an_unused_output_over_symbolic_seq(runtime):
    nodes = [h.make_node("Split", ["x"], ["q", "k", "v"], axis=-1, num_outputs=3), h.make_node("Neg", ["k"], ["nk"])]
    model = make_model(nodes, [("x", np.float32, ["s", 6])], ["q", "nk"])
    check_across_dims(runtime, model, lambda d: {"x": rand(d["s"], 6)}, [{"s": 3}, {"s": 1}])


# ---- Pad -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[0, 2, 1, 0], [1, 2, 2, -1]])  # negative: crop, then pad
def test_pad_modes(runtime, mode, pads):
    opset = 19 if mode == "wrap" else 18
    check(runtime, [h.make_node("Pad", ["x", "p"], ["y"], mode=mode)], [("x", np.float32, [3, 4])],
          {"x": rand(3, 4)}, inits={"p": i64(*pads)}, opset=opset)


def test_pad_constant_value_input_and_axes(runtime):
    node = h.make_node("Pad", ["x", "p", "v", "ax"], ["y"])
    check(runtime, [node], [("x", np.int64, [2, 3, 2]), ("v", np.int64, [])],
          {"x": rand(2, 3, 2, dtype=np.int64), "v": np.array(-7, np.int64)},
          inits={"p": i64(1, 0, 2, 1), "ax": i64(-1, 0)})


def test_pad_opset2_attributes(runtime):
    node = h.make_node("Pad", ["x"], ["y"], pads=[0, 1, 0, 2], value=2.5)
    check(runtime, [node], [("x", np.float32, [2, 3])], {"x": rand(2, 3)}, opset=10)


def test_pad_symbolic_seq(runtime):
    node = h.make_node("Pad", ["x", "p"], ["y"], mode="reflect")
    model = make_model([node], [("x", np.float32, [2, "s"])], ["y"], {"p": i64(0, 1, 0, 1)})
    check_across_dims(runtime, model, lambda d: {"x": rand(2, d["s"])}, [{"s": 4}, {"s": 2}])


# ---- generators ----------------------------------------------------------------------------

def test_constant_of_shape_and_range_over_symbolic_shapes(runtime):
    nodes = [h.make_node("Shape", ["x"], ["s"]),
             h.make_node("ConstantOfShape", ["s"], ["ones"], value=h.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
             h.make_node("Gather", ["s", "one"], ["n"]), h.make_node("Range", ["zero", "n", "one"], ["pos"]),
             h.make_node("Range", ["n", "zero", "m2"], ["down"])]
    inits = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64), "m2": np.array(-2, np.int64)}
    model = make_model(nodes, [("x", np.float32, [2, "s"])], ["ones", "pos", "down"], inits)
    check_across_dims(runtime, model, lambda d: {"x": rand(2, d["s"])}, [{"s": 5}, {"s": 8}, {"s": 1}])


def test_large_constant_of_shape_is_a_gpu_fill(runtime):
    node = h.make_node("ConstantOfShape", ["s"], ["y"], value=h.make_tensor("v", TensorProto.INT32, [1], [3]))
    model = make_model([node, h.make_node("Identity", ["x"], ["z"])], [("x", np.float32, [1])], ["y", "z"],
                       {"s": i64(1 << 12, 1 << 12 + 1)})
    compiled = compile_model(model)
    assert compiled.num_dispatches == 1  # too big to fold into the plan
    y = runtime.load_model(compiled).run({"x": rand(1)})["y"]
    assert y.shape == (4096, 8192) and y.dtype == np.int32 and (y == 3).all()


# ---- Cast ------------------------------------------------------------------------------------

CASTS = [(np.float32, np.int64), (np.float32, np.int8), (np.float32, np.uint8), (np.float32, np.bool_),
         (np.float32, np.float16), (np.float16, np.float32), (np.int64, np.float32), (np.int64, np.int32),
         (np.int32, np.int64), (np.bool_, np.float32), (np.bool_, np.int64), (np.int64, np.bool_),
         (np.uint8, np.int64), (np.int8, np.uint8), (np.int32, np.int16), (np.int64, np.uint8)]


@pytest.mark.parametrize("src, dst", CASTS, ids=[f"{np.dtype(a).name}-{np.dtype(b).name}" for a, b in CASTS])
def test_cast(runtime, src, dst):
    if np.dtype(src).kind == "f":
        x = (rng.standard_normal((4, 6)) * 40).astype(src)
        x[0, :4] = [0.0, -0.0, 2.7, -2.7]
        if np.dtype(dst).kind == "u":
            x = np.abs(x)  # negative float → unsigned is undefined
    elif np.dtype(src) == np.bool_:
        x = rand(4, 6, dtype=np.bool_)
    else:
        x = (rng.integers(-40000, 40000, (4, 6)) if np.dtype(src).itemsize > 2 else rand(4, 6, dtype=src)).astype(src)
        if np.dtype(src).kind == "u":
            x = np.abs(x)
    to = h.np_dtype_to_tensor_dtype(np.dtype(dst))
    check(runtime, [h.make_node("Cast", ["x"], ["y"], to=to)], [("x", src, [4, 6])], {"x": x})


def test_castlike_reads_only_the_dtype(runtime):
    node = h.make_node("CastLike", ["x", "like"], ["y"])
    check(runtime, [node], [("x", np.float32, [5]), ("like", np.int64, [1])],
          {"x": np.array([1.5, -2.5, 3.9, 0, 7], np.float32), "like": i64(0)})


# ---- folded == GPU ---------------------------------------------------------------------------

FOLD_VS_GPU = {
    "transpose": h.make_node("Transpose", ["a"], ["y"], perm=[1, 2, 0]),
    "expand": h.make_node("Expand", ["a", "s"], ["y"]),
    "tile": h.make_node("Tile", ["a", "r"], ["y"]),
    "concat": h.make_node("Concat", ["a", "a", "a"], ["y"], axis=1),
    "split": h.make_node("Split", ["a"], ["y", "z"], axis=2, num_outputs=2),
    "pad": h.make_node("Pad", ["a", "p"], ["y"], mode="edge"),
    "cast": h.make_node("Cast", ["a"], ["y"], to=TensorProto.INT8),
}


@pytest.mark.parametrize("case", sorted(FOLD_VS_GPU))
def test_folded_equals_gpu(runtime, case):
    node = FOLD_VS_GPU[case]
    a = (rand(2, 3, 5) * 10).astype(np.float32)
    consts = {"s": i64(2, 1, 1, 1), "r": i64(1, 2, 1), "p": i64(1, 0, 2, 0, 3, 1)}
    outs = list(node.output)
    folded = compile_model(make_model([node], [], outs, {"a": a, **consts}))
    assert folded.metadata["planned_nodes"] == 0
    fed = make_model([node], [("a", np.float32, [2, 3, 5])], outs, consts)
    gpu = runtime.load_model(compile_model(fed))
    ours = gpu.run({"a": a})
    # Data movement is exact: fold, kernel and onnxruntime agree bit for bit.
    for name, expected in zip(outs, run_ort(fed, {"a": a})):
        np.testing.assert_array_equal(folded.tensors[name].data, expected, err_msg=f"{name} folded vs onnxruntime")
        np.testing.assert_array_equal(ours[name], folded.tensors[name].data)
