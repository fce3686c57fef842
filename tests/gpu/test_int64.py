"""int64 as ONNX defines it, on a GPU that holds int64 in one 32-bit word (codegen/storage.py):
every value in ±(2^31 - 1) exact, and a value outside it (a Cast of NaN/±inf/|x| >= 2^31, a sum,
product or reduction past the range) lost, never wrapped. A lost value is refused only where it
matters, naming a node: an output (the node that lost it), an index, a comparison or a conversion
(the node reading it). One a Where discards is harmless: T5's relative-position buckets cast
log(0) = -inf to int64 in a branch they never use. Oracle: onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as h

from onyxia.errors import ComputeError, InputError
from tests.helpers import compile_model, live_dispatches, make_model, run_ort

pytestmark = pytest.mark.gpu

I32_MAX = 2**31 - 1
I64 = TensorProto.INT64

# (op, nodes, feeds past the range): each result reaches the output and must be refused naming the
# node; the same feeds / 1000 give the exact result.
INT64_CASES = [
    ("Add", [h.make_node("Add", ["a", "b"], ["y"], name="the_add")], {"a": [I32_MAX, 5], "b": [1, 6]}),
    ("Sub", [h.make_node("Sub", ["a", "b"], ["y"], name="the_sub")], {"a": [-I32_MAX, 5], "b": [2, 6]}),
    ("Mul", [h.make_node("Mul", ["a", "b"], ["y"], name="the_mul")], {"a": [100000, 3], "b": [100000, 4]}),
    ("Pow", [h.make_node("Pow", ["a", "b"], ["y"], name="the_pow")], {"a": [2, 3], "b": [31, 2]}),
    ("ReduceSum", [h.make_node("ReduceSum", ["a"], ["y"], name="the_sum", keepdims=0)], {"a": [I32_MAX, 1]}),
    ("CumSum", [h.make_node("CumSum", ["a", "axis"], ["y"], name="the_cumsum")], {"a": [I32_MAX, 1]}),
    ("MatMul", [h.make_node("MatMul", ["a", "b"], ["y"], name="the_matmul")], {"a": [[65536, 1]], "b": [[32768], [1]]}),
    ("Cast", [h.make_node("Cast", ["f"], ["y"], name="the_cast", to=I64)], {"f": [3e9, 1.0]}),
]


def _feeds(values):
    return {k: np.array(v, np.float32 if k == "f" else np.int64) for k, v in values.items()}


@pytest.mark.parametrize("op,nodes,values", INT64_CASES, ids=[c[0] for c in INT64_CASES])
def test_int64_results_past_the_range_reaching_an_output_name_the_node(runtime, op, nodes, values):
    feeds = _feeds(values)
    inputs = [(k, v.dtype, list(v.shape)) for k, v in feeds.items()]
    model = make_model(nodes, inputs, ["y"], {"axis": np.array(0, np.int64)}, opset=18)
    (want,) = run_ort(model, feeds)
    assert np.abs(want).max() > I32_MAX  # onnxruntime's exact int64 does leave the int32 range
    compiled = compile_model(model)
    node = nodes[0].name
    assert {s[0] for s in compiled.sites} == {node}  # one site per kernel variant that can lose a value
    exe = runtime.load_model(compiled)
    with pytest.raises(ComputeError, match=f"output 'y'.*node '{node}' \\({op}\\) gave an int64 value outside"):
        exe.run(feeds)
    # In range: the exact result, and the status word was cleared by the failed run.
    small = {k: (v // 1000 if v.dtype != np.float32 else v / 1000).astype(v.dtype) for k, v in feeds.items()}
    np.testing.assert_array_equal(exe.run(small)["y"], run_ort(model, small)[0])


def test_cast_of_finite_floats_in_range_is_exact(runtime):
    """Float → int64 truncates exactly up to the largest float32 below 2^31 (onnxruntime)."""
    x = np.array([2147483520.0, -2147483520.0, 1e9, -1e9, 16777217.0, 40000.5, -1.5, -0.7, 0.7, 0.0],
                 np.float32)
    model = make_model([h.make_node("Cast", ["x"], ["y"], to=I64)], [("x", np.float32, [x.size])], ["y"])
    got = runtime.load_model(compile_model(model)).run({"x": x})["y"]
    np.testing.assert_array_equal(got, run_ort(model, {"x": x})[0])


def _t5_buckets(big: float) -> tuple:
    """T5's relative-position bucket tail: large = max_exact + int64(log(rp / max_exact) * k), capped
    with Min, then Where(rp < max_exact, rp, large) — rp = 0 makes log(0) = -inf, and `big` adds a
    finite value past 2^31 on another discarded lane."""
    nodes = [h.make_node("Cast", ["rp"], ["rpf"], to=TensorProto.FLOAT),
             h.make_node("Div", ["rpf", "exact_f"], ["ratio"]),
             h.make_node("Log", ["ratio"], ["lg"]),
             h.make_node("Mul", ["lg", "scale"], ["scaled"]),
             h.make_node("Cast", ["scaled"], ["li"], to=I64, name="bucket_cast"),
             h.make_node("Add", ["li", "exact"], ["large"], name="bucket_add"),
             h.make_node("Min", ["large", "cap"], ["capped"]),
             h.make_node("Less", ["rp", "exact"], ["small"]),
             h.make_node("Where", ["small", "rp", "capped"], ["y"])]
    model = make_model(nodes, [("rp", np.int64, [7])], ["y"], {
        "exact_f": np.array(8, np.float32), "exact": np.array(8, np.int64), "cap": np.array(31, np.int64),
        "scale": np.array(big, np.float32)})
    return model, {"rp": np.array([0, 1, 7, 8, 9, 64, 300], np.int64)}


@pytest.mark.parametrize("big", [6.0, 3e9], ids=["t5", "finite_past_2^31"])
def test_lost_values_a_where_discards_are_harmless(runtime, big):
    model, feeds = _t5_buckets(big)
    if big > 1e9:  # only the lanes the Where drops (rp < 8: log < 0, -inf at 0) leave the range
        feeds = {"rp": np.array([0, 1, 2, 3, 5, 6, 7], np.int64)}
    with np.errstate(all="ignore"):
        want = run_ort(model, feeds)[0]
    exe = runtime.load_model(compile_model(model))
    np.testing.assert_array_equal(exe.run(feeds)["y"], want)
    if big > 1e9:
        # Kept lanes past the range: onnxruntime caps them with Min (31); a lost value has no
        # sign or size to cap, so the run is refused, naming the Cast that lost it.
        with pytest.raises(ComputeError, match="output 'y'.*node 'bucket_cast' \\(Cast\\) gave an int64"):
            exe.run({"rp": np.array([0, 1, 7, 8, 9, 64, 300], np.int64)})


LOST = h.make_node("Cast", ["f"], ["i"], to=I64, name="lossy")
READS = [
    ("Gather", h.make_node("Gather", ["table", "i"], ["y"], name="the_gather"), "an index outside"),
    ("Less", h.make_node("Less", ["i", "zero"], ["y"], name="the_less"), "reads an int64 value lost"),
    ("Cast", h.make_node("Cast", ["i"], ["y"], to=TensorProto.FLOAT, name="to_float"), "reads an int64 value lost"),
    ("Cast", h.make_node("Cast", ["i"], ["y"], to=TensorProto.INT32, name="to_int32"), "reads an int64 value lost"),
]


@pytest.mark.parametrize("op,node,what", READS, ids=[r[1].name for r in READS])
def test_lost_values_read_as_an_index_order_or_other_type_name_the_reader(runtime, op, node, what):
    model = make_model([LOST, node], [("f", np.float32, [3])], ["y"],
                       {"table": np.arange(10, dtype=np.float32), "zero": np.array(0, np.int64)})
    exe = runtime.load_model(compile_model(model))
    ok = {"f": np.array([1.0, 2.5, 9.0], np.float32)}
    np.testing.assert_array_equal(exe.run(ok)["y"], run_ort(model, ok)[0])
    for bad in (np.inf, np.nan, 5e9):
        with pytest.raises(ComputeError, match=f"node '{node.name}' \\({op}\\): {what}"):
            exe.run({"f": np.array([1.0, bad, 2.0], np.float32)})
    np.testing.assert_array_equal(exe.run(ok)["y"], run_ort(model, ok)[0])  # the word was cleared


def test_minus_2_to_the_31_is_refused_at_upload(runtime):
    model = make_model([h.make_node("Neg", ["a"], ["y"])], [("a", np.int64, [2])], ["y"])
    exe = runtime.load_model(compile_model(model))
    with pytest.raises(InputError, match="input 'a': int64 values must fit in int32 except -2\\^31"):
        exe.run({"a": np.array([-(2**31), 5], np.int64)})
    np.testing.assert_array_equal(exe.run({"a": np.array([-I32_MAX, 5], np.int64)})["y"], [I32_MAX, -5])


def test_max_carries_a_lost_value_to_the_output(runtime):
    """Max(lost, 0) would be 0 read as -2^31; it stays lost, so the output names the Cast."""
    nodes = [LOST, h.make_node("Max", ["i", "zero"], ["y"], name="the_max")]
    model = make_model(nodes, [("f", np.float32, [3])], ["y"], {"zero": np.array(0, np.int64)})
    exe = runtime.load_model(compile_model(model))
    ok = {"f": np.array([-4.0, 2.5, 9.0], np.float32)}
    np.testing.assert_array_equal(exe.run(ok)["y"], run_ort(model, ok)[0])
    with pytest.raises(ComputeError, match="output 'y'\\[1\\]: node 'lossy' \\(Cast\\) gave an int64 value outside"):
        exe.run({"f": np.array([1.0, 3e9, 2.0], np.float32)})


def test_a_lost_value_read_back_as_a_size_names_the_tensor(runtime):
    """TopK's k computed on the device is read back to size the outputs: a lost k is refused."""
    nodes = [h.make_node("Cast", ["f"], ["k"], to=I64, name="k_cast"),
             h.make_node("TopK", ["x", "k"], ["values", "indices"], name="the_topk")]
    model = make_model(nodes, [("x", np.float32, [6]), ("f", np.float32, [1])], ["values", "indices"])
    exe = runtime.load_model(compile_model(model))
    feeds = {"x": np.arange(6, dtype=np.float32), "f": np.array([2.5], np.float32)}
    for got, want in zip(exe.run(feeds).values(), run_ort(model, feeds)):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ComputeError, match="tensor 'k' \\(it sizes '.*'\\) holds an int64 value lost upstream"):
        exe.run({**feeds, "f": np.array([np.inf], np.float32)})


def test_four_elements_a_thread_carry_and_refuse_the_same(runtime):
    """8 elements: the maps run map4.wgsl (four outputs a thread), lost values included."""
    nodes = [LOST, h.make_node("Add", ["i", "one"], ["y"], name="plus"),
             h.make_node("Less", ["i", "one"], ["lt"], name="the_less")]
    model = make_model(nodes, [("f", np.float32, [8])], ["y"], {"one": np.array(1, np.int64)})
    compiled = compile_model(model)
    templates = [compiled.shaders[d.shader].template for d in live_dispatches(compiled, {})]
    assert templates == ["elementwise/map4.wgsl"] * 2, templates
    exe = runtime.load_model(compiled)
    f = np.array([1, -2, 3.5, 4e8, -2e9, 6, 7, 8], np.float32)
    np.testing.assert_array_equal(exe.run({"f": f})["y"], run_ort(model, {"f": f})[0])
    f[6] = 5e9
    with pytest.raises(ComputeError, match="output 'y'\\[6\\]: node 'lossy' \\(Cast\\)"):
        exe.run({"f": f})
    model = make_model(nodes, [("f", np.float32, [8])], ["lt"], {"one": np.array(1, np.int64)})
    exe = runtime.load_model(compile_model(model))
    with pytest.raises(ComputeError, match="node 'the_less' \\(Less\\): reads an int64 value lost"):
        exe.run({"f": f})
