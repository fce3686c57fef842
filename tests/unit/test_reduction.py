"""Reductions and normalizations without a GPU: registration by opset, shape inference with
symbolic dims, numpy folding against onnxruntime, plans that keep dynamic sizes out of shader
defs, and errors that name the node and the attribute or input at fault."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

import onyxia
from onyxia.codegen.wgsl import render
from onyxia.compiler import CompilerPipeline
from onyxia.compiler.pipeline import Stage
from onyxia.errors import OnyxiaError
from onyxia.ir.shapes import SymDim
from onyxia.operators import core_operator_registry
from onyxia.operators.reduction.reduction import REDUCE_OPS, split_axes
from onyxia.plan import Dispatch
from tests.helpers import compile_model, make_model, run_ort

RNG = np.random.default_rng(0)
MS = {"com.microsoft": 1}


def infer(model, dims=None):
    """The graph after shape inference and folding."""
    pipeline = CompilerPipeline(core_operator_registry())
    return pipeline.run_passes(onyxia.load_model(model), dims or {}, until=Stage.FOLDING)


def folded(model, name="y"):
    """The folded value of tensor `name` (every input of the model is an initializer)."""
    value = infer(model).tensor(name).value
    assert value is not None, f"'{name}' was not folded"
    return value


def dispatches(compiled):
    return [s for op in compiled.operations for s in op.steps if isinstance(s, Dispatch)]


# ---- registration -------------------------------------------------------------------------

@pytest.mark.parametrize("op,opset,axes_input", [("ReduceSum", 12, False), ("ReduceSum", 13, True),
                                                 ("ReduceMean", 17, False), ("ReduceMean", 18, True),
                                                 ("ReduceLogSumExp", 11, False), ("ReduceMax", 20, True)])
def test_axes_move_from_attribute_to_input_by_opset(op, opset, axes_input):
    assert core_operator_registry().get(op, "", opset).axes_input is axes_input


def test_softmax_semantics_by_opset_and_contrib_domains():
    registry = core_operator_registry()
    assert registry.get("Softmax", "", 11).legacy and not registry.get("Softmax", "", 13).legacy
    for domain, op in [("", "SimplifiedLayerNormalization"), ("com.microsoft", "SimplifiedLayerNormalization"),
                       ("com.microsoft", "SkipLayerNormalization"),
                       ("com.microsoft", "SkipSimplifiedLayerNormalization"),
                       ("", "LayerNormalization"), ("", "RMSNormalization")]:
        assert registry.get(op, domain, 23) is not None, (domain, op)
    assert registry.get("RMSNormalization", "", 22) is None


# ---- shape inference ----------------------------------------------------------------------

def test_split_axes_merges_runs_and_drops_unit_axes():
    b = SymDim.symbol("b")
    kept, red = split_axes((b, 1, 4, 5, 6), {2, 3})
    assert kept == [(b, 120), (6, 1)] and red == [(20, 6)]
    assert split_axes((2, 3), set()) == ([(6, 1)], [])


@pytest.mark.parametrize("axes,keepdims,noop,expected", [
    ([1], 1, 0, ["batch", 1, 8]), ([-1, 0], 0, 0, ["seq"]), (None, 1, 0, [1, 1, 1]), (None, 0, 0, []),
    ([], 0, 1, ["batch", "seq", 8]),
])
def test_reduce_shapes_stay_symbolic(axes, keepdims, noop, expected):
    inputs = ["x", "axes"] if axes is not None else ["x"]
    inits = {"axes": np.array(axes, np.int64)} if axes is not None else {}
    model = make_model([h.make_node("ReduceMean", inputs, ["y"], keepdims=keepdims, noop_with_empty_axes=noop)],
                       [("x", np.float32, ["batch", "seq", 8])], ["y"], inits)
    shape = infer(model, {"batch": 2, "seq": 3}).tensor("y").shape
    assert [str(d) for d in shape] == [str(d) for d in expected]


def test_norm_output_shapes_and_dtypes():
    model = make_model([h.make_node("LayerNormalization", ["x", "s"], ["y", "m", "i"], axis=1)],
                       [("x", np.float16, ["b", 4, 8]), ("s", np.float16, [4, 8])], ["y", "m", "i"], opset=17)
    g = infer(model, {"b": 2})
    assert [str(d) for d in g.tensor("m").shape] == ["b", "1", "1"]
    assert g.tensor("y").dtype.name == "float16" and g.tensor("m").dtype.name == "float32"


# ---- folding ------------------------------------------------------------------------------

@pytest.mark.parametrize("op", list(REDUCE_OPS))
@pytest.mark.parametrize("axes,keepdims,noop", [([0, 2], 0, 0), ([-1], 1, 0), ([], 1, 0), ([], 1, 1)])
def test_reduce_folds_like_onnxruntime(op, axes, keepdims, noop):
    x = (RNG.standard_normal((3, 4, 5)) * (0.5 if op == "ReduceProd" else 1.0)).astype(np.float32)
    if op == "ReduceLogSum":
        x = np.abs(x) + 0.1
    node = h.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims, noop_with_empty_axes=noop)
    model = make_model([node], [], ["y"], {"x": x, "axes": np.array(axes, np.int64)})
    np.testing.assert_allclose(folded(model), run_ort(model, {})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceL2", "ReduceLogSumExp", "ArgMin"])
def test_integer_folds_like_onnxruntime(op):
    x = RNG.integers(-6, 7, (4, 5)).astype(np.int64)
    if op == "ArgMin":
        node = h.make_node(op, ["x"], ["y"], axis=1, select_last_index=1)
        model = make_model([node], [], ["y"], {"x": x})
    else:
        model = make_model([h.make_node(op, ["x", "axes"], ["y"])], [], ["y"],
                           {"x": x, "axes": np.array([1], np.int64)})
    ref = run_ort(model, {})[0]
    out = folded(model)
    assert out.dtype == ref.dtype
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_folds_like_onnxruntime(exclusive, reverse):
    x = RNG.integers(-5, 5, (3, 4)).astype(np.int32)
    model = make_model([h.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)], [], ["y"],
                       {"x": x, "axis": np.array(-1, np.int64)})
    np.testing.assert_array_equal(folded(model), run_ort(model, {})[0])


def test_symbolic_shape_arithmetic_folds():
    # Shape -> ReduceProd -> Reshape: the element count stays a symbolic expression.
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("ReduceProd", ["s"], ["n"], keepdims=1),
             h.make_node("Reshape", ["x", "n"], ["y"]), h.make_node("CumSum", ["s", "zero"], ["c"])]
    model = make_model(nodes, [("x", np.float32, ["batch", "seq", 4])], ["y", "c"], {"zero": np.array(0, np.int64)})
    g = infer(model, {"batch": 2, "seq": 3})
    assert [str(d) for d in g.tensor("y").shape] == [str(SymDim.symbol("batch") * SymDim.symbol("seq") * 4)]
    assert str(g.tensor("c").value[1]) == str(SymDim.symbol("batch") + SymDim.symbol("seq"))


def test_normalizations_fold_like_onnxruntime():
    x, s, b = RNG.standard_normal((2, 3, 6)).astype(np.float32), RNG.standard_normal(6).astype(np.float32), \
        RNG.standard_normal(6).astype(np.float32)
    nodes = [h.make_node("Softmax", ["x"], ["sm"], axis=1), h.make_node("LogSoftmax", ["x"], ["ls"]),
             h.make_node("LayerNormalization", ["x", "s", "b"], ["ln", "lm", "li"]),
             h.make_node("SimplifiedLayerNormalization", ["x", "s"], ["rms", "ri"]),
             h.make_node("SkipLayerNormalization", ["x", "x", "s", "b", "b"], ["k", "km", "ki", "ks"],
                         domain="com.microsoft"),
             h.make_node("SkipSimplifiedLayerNormalization", ["x", "x", "s", "b"], ["q", "qm", "qi", "qs"],
                         domain="com.microsoft")]
    outs = [o for n in nodes for o in n.output]
    model = make_model(nodes, [], outs, {"x": x, "s": s, "b": b}, opset=17, extra_opsets=MS)
    g = infer(model)
    for name, ref in zip(outs, run_ort(model, {})):
        np.testing.assert_allclose(g.tensor(name).value, ref, rtol=1e-5, atol=1e-5, err_msg=name)


# ---- planning -----------------------------------------------------------------------------

def test_dynamic_sizes_are_params_not_defs():
    nodes = [h.make_node("ReduceSum", ["x", "axes"], ["r"]), h.make_node("Softmax", ["x"], ["sm"]),
             h.make_node("CumSum", ["x", "zero"], ["cs"]),
             h.make_node("LayerNormalization", ["x", "s"], ["ln"]), h.make_node("ArgMax", ["x"], ["am"], axis=1)]
    model = make_model(nodes, [("x", np.float32, ["batch", "seq"]), ("s", np.float32, ["seq"])],
                       ["r", "sm", "cs", "ln", "am"], {"axes": np.array([1], np.int64), "zero": np.array(0, np.int64)},
                       opset=17)
    compiled = compile_model(model, {"batch": 2, "seq": 5})
    for step in dispatches(compiled):
        spec = compiled.shaders[step.shader]
        assert not any(isinstance(v, SymDim) for _, v in spec.defs), spec.label
        assert spec.immediates, f"{spec.label}: dynamic sizes must travel as immediates"
        assert any(isinstance(w, SymDim) for w in step.workgroups), spec.label
        render(spec, compiled.templates[spec.template], {"batch": 2, "seq": 5})  # preprocesses for these defs

    # Declared static, the same sizes are baked and nothing is left to patch.
    static = compile_model(model, {"batch": 2, "seq": 5}, static=("batch", "seq"))
    assert all(not static.shaders[s.shader].immediates for s in dispatches(static))


def test_one_dispatch_per_reduction():
    model = make_model([h.make_node("ReduceLogSumExp", ["x", "axes"], ["y"], keepdims=0)],
                       [("x", np.float32, [2, 3, 4, 5])], ["y"], {"axes": np.array([0, 2], np.int64)})
    assert len(dispatches(compile_model(model))) == 1


# ---- errors -------------------------------------------------------------------------------

def _fails(model, *fragments, dims=None):
    with pytest.raises(OnyxiaError) as info:
        compile_model(model, dims)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


def test_errors_name_node_and_attribute():
    x = [("x", np.float32, [2, 3])]
    _fails(make_model([h.make_node("ReduceSum", ["x", "axes"], ["y"], name="rs")], x + [("axes", np.int64, [1])],
                      ["y"]), "'rs'", "ReduceSum", "input 1", "must be a constant")
    _fails(make_model([h.make_node("ReduceMax", ["x", "axes"], ["y"], name="rm")], x, ["y"],
                      {"axes": np.array([0, -2], np.int64)}), "'rm'", "name an axis twice")
    _fails(make_model([h.make_node("ReduceMean", ["x"], ["y"], axes=[2], name="m")], x, ["y"], opset=13),
           "'m'", "axes entry 2 is out of range")
    _fails(make_model([h.make_node("ArgMax", ["x"], ["y"], axis=5, name="am")], x, ["y"]), "'am'", "axis 5")
    _fails(make_model([h.make_node("CumSum", ["x", "ax"], ["y"], name="cs")], x + [("ax", np.int64, [])], ["y"]),
           "'cs'", "must be a constant")
    _fails(make_model([h.make_node("Softmax", ["x"], ["y"], name="sm")], [("x", np.int32, [2, 3])], ["y"]),
           "'sm'", "float")
    _fails(make_model([h.make_node("ReduceSum", ["x"], ["y"], name="rb")], [("x", np.bool_, [2])], ["y"], opset=11),
           "'rb'", "bool")


def test_layernorm_errors_name_the_input():
    model = make_model([h.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln")],
                       [("x", np.float32, [2, 3, 4]), ("s", np.float32, [3])], ["y"], opset=17)
    _fails(model, "'ln'", "input 1", "scale shape")
    node = h.make_node("SkipLayerNormalization", ["x", "k", "g"], ["y"], name="skip", domain="com.microsoft")
    model = make_model([node],
                       [("x", np.float32, [2, 3, 4]), ("k", np.float32, [5, 4]), ("g", np.float32, [4])], ["y"],
                       opset=17, extra_opsets=MS)
    _fails(model, "'skip'", "input 1", "skip shape")


def test_global_pool_offers_cpu_walks_and_parts_only_when_needed():
    """GlobalAveragePool plans a Select of walks (a thread per row, 8 lanes per row, the GPU's
    tree); with a symbolic plane each walk splits in parts behind a Select of its own."""
    from onyxia.plan import Select, walk_steps

    def selects(shape, dims):
        model = make_model([h.make_node("GlobalAveragePool", ["x"], ["y"])], [("x", np.float32, shape)], ["y"])
        return [s for op in compile_model(model, dims).operations for s in walk_steps(op.steps)
                if isinstance(s, Select)]

    static = selects([2, 576, 3, 3], {})
    assert [[a.label for a in s.alternatives] for s in static] == [
        ["cpu thread per row", "cpu 8 lanes per row", "gpu"]]
    symbolic = selects(["n", 576, "h", "w"], {"n": 2, "h": 3, "w": 3})
    assert symbolic[0].key.endswith("/walk")
    parts = [s for s in symbolic if s.key.endswith("/parts")]
    assert len(parts) >= 3 and all([a.label for a in s.alternatives] == ["one part", "parts"] for s in parts)
