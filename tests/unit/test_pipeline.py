"""CompilerPipeline acceptance: resolution, inference, folding, pass ordering, planning, errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h

import onyxia
from onyxia.compiler import CompileContext, CompilerPipeline, Pass, PassResult, Stage
from onyxia.errors import DimensionError, PipelineError, ShapeInferenceError, UnsupportedOperatorError
from onyxia.ir.graph import IrGraph
from onyxia.ir.shapes import SymDim, evaluate_dim
from onyxia.operators import core_operator_registry
from onyxia.plan import CompiledModel, CopyBuffer, Dispatch, Select, WriteBuffer, walk_steps
from tests.helpers import compile_model, make_model, run_ort


def pipeline(**kw) -> CompilerPipeline:
    return CompilerPipeline(core_operator_registry(), **kw)


def shape_chain_model() -> onnx.ModelProto:
    """MatMul → Relu → Reshape(to [batch, -1] via Shape → Gather → Unsqueeze → Concat) → Add."""
    rng = np.random.default_rng(0)
    nodes = [
        h.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
        h.make_node("Relu", ["h"], ["r"], name="relu"),
        h.make_node("Shape", ["x"], ["s"], name="shape"),
        h.make_node("Gather", ["s", "zero"], ["b"], axis=0, name="gather"),
        h.make_node("Unsqueeze", ["b", "ax0"], ["bu"], name="unsqueeze"),
        h.make_node("Concat", ["bu", "m1"], ["shp"], axis=0, name="concat"),
        h.make_node("Reshape", ["r", "shp"], ["y0"], name="reshape"),
        h.make_node("Add", ["y0", "bias"], ["y"], name="add"),
    ]
    inits = {"W": rng.standard_normal((8, 16)).astype(np.float32), "zero": np.array(0, np.int64),
             "ax0": np.array([0], np.int64), "m1": np.array([-1], np.int64), "bias": np.float32(0.5)}
    return make_model(nodes, [("x", np.float32, ["batch", "seq", 8])], ["y"], inits)


def snapshot(g: IrGraph) -> object:
    """Everything observable about a graph, as plain comparable data."""
    def value(v):
        return None if v is None else (v.dtype.str, v.shape, v.tobytes() if v.dtype != object else repr(v.tolist()))

    nodes = [(n.id, n.op_type, n.domain, n.name, tuple(n.inputs), tuple(n.outputs), repr(sorted(n.attributes.items())),
              repr(n.meta)) for n in g.nodes]
    tensors = sorted((t.name, str(t.dtype), repr(t.shape), t.kind, value(t.value)) for t in g.tensors.values())
    edges = sorted((tid, g.producer(tid), tuple(g.consumers(tid))) for tid in g.tensors)
    return (g.name, nodes, tensors, edges, list(g.inputs), list(g.outputs), dict(g.opsets), dict(g.metadata),
            g.topological_order())


# ---- resolution -------------------------------------------------------------------------

def test_resolution_turns_a_dim_param_expression_into_its_value():
    model = make_model([h.make_node("Relu", ["x"], ["y"])], [("x", np.float32, ["batch", "seq * heads"])], ["y"])
    g = onyxia.load_model(model)
    dims = {"batch": 2, "seq": 3, "heads": 4}
    pipe = pipeline()
    work = pipe.run_passes(g, dims, until=Stage.RESOLUTION)
    assert pipe.context.dims == dims
    batch, prod = work.tensor("x").shape
    assert evaluate_dim(batch, pipe.context.dims) == 2 and evaluate_dim(prod, pipe.context.dims) == 12
    compiled = pipeline().compile(g, dims)
    assert [evaluate_dim(d, compiled.dims) for d in compiled.tensors["x"].shape] == [2, 12]
    assert [evaluate_dim(d, compiled.dims) for d in compiled.tensors["y"].shape] == [2, 12]


def test_missing_dim_names_the_symbol_and_the_input():
    model = make_model([h.make_node("Relu", ["tokens"], ["y"])], [("tokens", np.float32, ["batch", "seq"])], ["y"])
    with pytest.raises(DimensionError) as info:
        compile_model(model, {"batch": 1})
    assert "'seq'" in str(info.value) and "'tokens'" in str(info.value)


@pytest.mark.parametrize("dims, fragment", [
    ({"batch": -1, "seq": 2}, "'batch'"),
    ({"batch": 1.5, "seq": 2}, "'batch'"),
    ({"batch": True, "seq": 2}, "'batch'"),
    ({"batch": 1, "seq": 2, "typo": 3}, "'typo'"),
])
def test_bad_dims_are_dimension_errors_naming_the_symbol(dims, fragment):
    model = make_model([h.make_node("Relu", ["x"], ["y"])], [("x", np.float32, ["batch", "seq"])], ["y"])
    with pytest.raises(DimensionError, match=fragment):
        compile_model(model, dims)


def test_static_dim_without_value_is_an_error():
    model = make_model([h.make_node("Relu", ["x"], ["y"])], [("x", np.float32, ["batch", "seq"])], ["y"])
    with pytest.raises(DimensionError, match="'seq'"):
        onyxia.CompilerPipeline(core_operator_registry()).compile(onyxia.load_model(model), {"batch": 1},
                                                                  static=["seq"])


def test_expression_dim_that_evaluates_negative_is_an_error():
    model = make_model([h.make_node("Relu", ["x"], ["y"])], [("x", np.float32, ["a - b"])], ["y"])
    with pytest.raises(DimensionError, match="'x'"):
        compile_model(model, {"a": 1, "b": 3})


# ---- inference ----------------------------------------------------------------------------

def inference_model() -> onnx.ModelProto:
    """Seven ops over [batch, seq, ...] whose intermediates are all graph outputs (for the oracle)."""
    rng = np.random.default_rng(1)
    nodes = [
        h.make_node("MatMul", ["x", "W"], ["m"]),                  # [b, s, 6]
        h.make_node("Sub", ["m", "row"], ["d"]),                   # broadcast [6]
        h.make_node("Concat", ["d", "x"], ["c"], axis=2),          # [b, s, 10]
        h.make_node("Unsqueeze", ["c", "ax1"], ["u"]),              # [b, 1, s, 10]
        h.make_node("Gather", ["emb", "ids"], ["g"], axis=0),      # [b, s, 3]
        h.make_node("Cast", ["ids"], ["ids32"], to=TensorProto.INT32),
        h.make_node("Shape", ["u"], ["shp"]),
        h.make_node("Mul", ["g", "g"], ["gg"]),
    ]
    inits = {"W": rng.standard_normal((4, 6)).astype(np.float32), "row": rng.standard_normal(6).astype(np.float32),
             "ax1": np.array([1], np.int64), "emb": rng.standard_normal((11, 3)).astype(np.float32)}
    outputs = ["m", "d", "c", "u", "g", "ids32", "shp", "gg"]
    return make_model(nodes, [("x", np.float32, ["batch", "seq", 4]), ("ids", np.int64, ["batch", "seq"])],
                      outputs, inits)


@pytest.mark.parametrize("batch, seq", [(2, 3), (1, 5)])
def test_inference_propagates_dtype_and_symbolic_shape_like_onnxruntime(batch, seq):
    model = inference_model()
    g = onyxia.load_model(model)
    # Infer once for some other values: shapes must stay symbolic, not baked to these.
    work = pipeline().run_passes(g, {"batch": 7, "seq": 9}, until=Stage.INFERENCE)
    assert work.tensor("c").shape[0] == SymDim.symbol("batch")
    assert work.tensor("c").shape[1] == SymDim.symbol("seq")
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((batch, seq, 4)).astype(np.float32),
             "ids": rng.integers(0, 11, (batch, seq)).astype(np.int64)}
    ref = dict(zip([o.name for o in model.graph.output], run_ort(model, feeds)))
    dims = {"batch": batch, "seq": seq}
    for name, array in ref.items():
        t = work.tensor(name)
        assert t.dtype.numpy == array.dtype, f"{name}: {t.dtype} vs onnxruntime {array.dtype}"
        assert tuple(evaluate_dim(d, dims) for d in t.shape) == array.shape, f"{name}: {t.shape} vs {array.shape}"
    shape_value = work.tensor("shp").value
    assert shape_value is not None
    np.testing.assert_array_equal([evaluate_dim(d, dims) for d in shape_value], ref["shp"])


def test_inference_error_names_node_op_and_input_for_matmul_mismatch():
    nodes = [h.make_node("Relu", ["a"], ["r"], name="pre"), h.make_node("MatMul", ["r", "b"], ["y"], name="proj")]
    model = make_model(nodes, [("a", np.float32, ["n", 3]), ("b", np.float32, [4, 5])], ["y"])
    with pytest.raises(ShapeInferenceError) as info:
        compile_model(model, {"n": 2})
    err = info.value
    assert (err.node, err.op_type, err.input_index) == ("proj", "MatMul", 1)
    assert "'proj'" in str(err) and "MatMul" in str(err) and "input 1" in str(err)


def test_inference_error_names_node_op_and_input_for_concat_rank_mismatch():
    model = make_model([h.make_node("Concat", ["a", "b", "c"], ["y"], axis=0, name="joiner")],
                       [("a", np.float32, ["n", 3]), ("b", np.float32, [2, 3]), ("c", np.float32, [4])], ["y"])
    with pytest.raises(ShapeInferenceError) as info:
        compile_model(model, {"n": 2})
    assert (info.value.node, info.value.op_type, info.value.input_index) == ("joiner", "Concat", 2)
    assert "rank" in str(info.value)


def test_inference_error_for_incompatible_symbolic_broadcast():
    # Different symbols whose values differ cannot broadcast (equal values unify instead, with a
    # recorded constraint: tests/gpu/test_dim_constraints.py).
    model = make_model([h.make_node("Add", ["a", "b"], ["y"], name="plus")],
                       [("a", np.float32, ["n"]), ("b", np.float32, ["m"])], ["y"])
    with pytest.raises(ShapeInferenceError, match="'plus'.*Add"):
        compile_model(model, {"n": 2, "m": 3})


# ---- folding -----------------------------------------------------------------------------

def test_constant_folding_pass_stores_values():
    # Big enough (> the inference pass's small-value propagation) that ConstantFolding folds it.
    rng = np.random.default_rng(3)
    a = rng.standard_normal((80, 64)).astype(np.float32)
    b = rng.standard_normal((80, 64)).astype(np.float32)
    nodes = [h.make_node("Add", ["a", "b"], ["ab"], name="fold_me"),
             h.make_node("Mul", ["x", "ab"], ["y"], name="live")]
    model = make_model(nodes, [("x", np.float32, [80, 64])], ["y"], {"a": a, "b": b})
    g = onyxia.load_model(model)
    assert pipeline().run_passes(g, {}, until=Stage.INFERENCE).tensor("ab").value is None
    work = pipeline().run_passes(g, {}, until=Stage.FOLDING)
    ab = work.tensor("ab").value
    assert ab is not None and ab.dtype == np.float32
    np.testing.assert_array_equal(ab, run_ort(make_model([nodes[0]], [], ["ab"], {"a": a, "b": b}), {})[0])
    compiled = compile_model(model)
    assert [op.name for op in compiled.operations if op.steps] == ["live"]
    assert compiled.num_dispatches == 1
    np.testing.assert_array_equal(compiled.tensors["ab"].data, ab)
    assert compiled.tensors["ab"].kind == "weight"
    assert compiled.metadata["folded_nodes"] == 1


def test_small_values_fold_during_inference():
    nodes = [h.make_node("Add", ["a", "b"], ["ab"]), h.make_node("Reshape", ["x", "ab"], ["y"])]
    model = make_model(nodes, [("x", np.float32, [6])], ["y"], {"a": np.array([1, 1], np.int64),
                                                                "b": np.array([1, 2], np.int64)})
    work = pipeline().run_passes(onyxia.load_model(model), {}, until=Stage.INFERENCE)
    np.testing.assert_array_equal(work.tensor("ab").value, [2, 3])
    assert work.tensor("y").shape == (2, 3)


def test_shape_gather_concat_reshape_chain_compiles_to_zero_steps():
    compiled = compile_model(shape_chain_model(), {"batch": 2, "seq": 3})
    by_name = {op.name: op for op in compiled.operations}
    for chain_node in ("shape", "gather", "unsqueeze", "concat", "reshape"):
        assert not (chain_node in by_name and by_name[chain_node].steps), f"{chain_node} emitted steps"
    assert not any(isinstance(s, (CopyBuffer, WriteBuffer)) for s in compiled.steps)
    dispatching = [op.name for op in compiled.operations if op.steps]
    assert dispatching == ["mm", "add"]  # the Relu runs in mm's epilogue (EpilogueFusionPass)
    # Only the real compute dispatches remain (an op may use more than one kernel).
    assert all(isinstance(s, (Dispatch, Select)) for s in compiled.steps)  # a matmul's variants: a Select
    own = [s for n in dispatching for s in walk_steps(by_name[n].steps)]
    assert compiled.num_dispatches == sum(isinstance(s, Dispatch) for s in own)
    assert compiled.metadata["folded_nodes"] >= 4
    # Reshape is a view over the buffer of Relu's output (which the fused MatMul writes); its
    # shape keeps the batch symbol.
    assert compiled.tensors["y0"].alias_of == "r" and compiled.tensors["r"].alias_of is None
    assert compiled.tensors["y"].shape[0] == SymDim.symbol("batch")


def test_compile_leaves_the_callers_graph_unchanged():
    g = onyxia.load_model(shape_chain_model())
    before = snapshot(g)
    pipe = pipeline()
    pipe.compile(g, {"batch": 2, "seq": 3}, static=["seq"])
    pipe.run_passes(g, {"batch": 1, "seq": 1}, until=Stage.FOLDING)
    assert snapshot(g) == before
    # And it compiles again identically.
    a = pipe.compile(g, {"batch": 2, "seq": 3})
    b = pipe.compile(g, {"batch": 2, "seq": 3})
    assert a.shaders == b.shaders and a.steps == b.steps


# ---- passes ----------------------------------------------------------------------------

class RecordingPass(Pass):
    def __init__(self, name: str, stage: Stage, log: list[str]):
        self.name, self.stage, self.log = name, stage, log

    def run(self, graph: IrGraph, ctx: CompileContext) -> bool:
        self.log.append(self.name)
        return False


def test_add_pass_orders_by_stage_then_registration():
    log: list[str] = []
    pipe = pipeline(optimize=False)
    for name, stage in (("opt1", Stage.OPTIMIZATION), ("res1", Stage.RESOLUTION), ("opt2", Stage.OPTIMIZATION),
                        ("plan1", Stage.PLANNING), ("inf1", Stage.INFERENCE), ("fold1", Stage.FOLDING),
                        ("res2", Stage.RESOLUTION)):
        assert pipe.add_pass(RecordingPass(name, stage, log)) is pipe
    order = [p.name for p in pipe.passes]
    assert order == ["symbolic-resolution", "if-inlining", "res1", "res2", "function-expansion", "sequence-lowering",
                     "shape-inference", "inf1", "constant-folding", "fold1", "opt1", "opt2", "plan1"]
    compiled = pipe.compile(onyxia.load_model(shape_chain_model()), {"batch": 1, "seq": 2})
    assert isinstance(compiled, CompiledModel)
    assert log == ["res1", "res2", "inf1", "fold1", "opt1", "opt2", "plan1"]
    # Planning is the lowering after every pass, Planning-stage passes included.
    assert [r.name for r in pipe.history] == order + ["planning"]


def test_add_pass_rejects_a_non_stage():
    p = RecordingPass("bad", Stage.OPTIMIZATION, [])
    p.stage = 3
    with pytest.raises(TypeError):
        pipeline().add_pass(p)


class NegateRelus(Pass):
    """A user rewrite: every Relu becomes Neg; notes what it saw of the folded values."""

    name = "negate-relus"
    stage = Stage.OPTIMIZATION

    def __init__(self, log: list[str]):
        self.log = log
        self.saw_value: np.ndarray | None = None

    def run(self, graph: IrGraph, ctx: CompileContext) -> PassResult:
        self.log.append(self.name)
        self.saw_value = graph.tensor("shp").value
        changed = False
        for node in list(graph.nodes):
            if node.op_type == "Relu":
                graph.replace_node(node.id, "Neg", node.inputs)
                changed = True
        return PassResult(changed, "relu -> neg")


def test_user_optimization_pass_runs_after_folding_and_before_planning():
    log: list[str] = []

    class Spy(Pass):
        def __init__(self, inner: Pass):
            self.inner, self.name, self.stage = inner, inner.name, inner.stage

        def run(self, graph, ctx):
            log.append(self.name)
            return self.inner.run(graph, ctx)

    pipe = pipeline(optimize=False)
    # Replace the built-ins by spies so the log holds the full order.
    pipe._passes = [Spy(p) for p in pipe._passes]
    user = NegateRelus(log)
    pipe.add_pass(user)
    compiled = pipe.compile(onyxia.load_model(shape_chain_model()), {"batch": 2, "seq": 3})
    assert log.index("constant-folding") < log.index("negate-relus") == len(log) - 1
    assert [r.name for r in pipe.history][-2:] == ["negate-relus", "planning"]
    # It saw folded values: the Concat'ed target shape [batch, -1].
    assert user.saw_value is not None and list(user.saw_value) == [SymDim.symbol("batch"), -1]
    # Its rewrite shows in the plan.
    labels = {s.label for s in compiled.shaders}
    assert "map_Neg" in labels and "map_Relu" not in labels
    assert [op.op_type for op in compiled.operations if op.steps] == ["MatMul", "Neg", "Add"]
    rec = next(r for r in pipe.history if r.name == "negate-relus")
    assert rec.modified and rec.stage is Stage.OPTIMIZATION


def test_a_pass_sees_the_compile_context():
    seen = {}

    class Look(Pass):
        name, stage = "look", Stage.OPTIMIZATION

        def run(self, graph, ctx):
            seen.update(dims=dict(ctx.dims), static=ctx.static, registry=ctx.registry, reports=dict(ctx.reports))
            return False

    registry = core_operator_registry()
    pipe = CompilerPipeline(registry).add_pass(Look())
    pipe.compile(onyxia.load_model(shape_chain_model()), {"batch": 2, "seq": 3}, static=["seq"])
    assert seen["dims"] == {"batch": 2, "seq": 3} and seen["static"] == {"seq"} and seen["registry"] is registry
    assert "split-large-tensors" in seen["reports"]  # an earlier pass's report
    assert pipe.context.dims == {"batch": 2, "seq": 3}


class Named(Pass):
    def __init__(self, name: str, *, requires: tuple[str, ...] = (), after: tuple[str, ...] = ()):
        self.name, self.requires, self.after = name, requires, after

    def run(self, graph, ctx) -> bool:
        return False


def test_pass_order_declared_by_after_is_checked():
    model = onyxia.load_model(shape_chain_model())
    pipe = pipeline(optimize=False).add_pass(Named("second", after=("first",))).add_pass(Named("first"))
    with pytest.raises(PipelineError, match="'second' must run after pass 'first'"):
        pipe.compile(model, {"batch": 1, "seq": 1})
    # `after` is about order only: without "first" in the pipeline, "second" runs.
    pipeline(optimize=False).add_pass(Named("second", after=("first",))).compile(model, {"batch": 1, "seq": 1})


def test_pass_requires_another_pass_before_it():
    model = onyxia.load_model(shape_chain_model())
    with pytest.raises(PipelineError, match="'needy' requires pass 'helper', which is not in the pipeline"):
        pipeline(optimize=False).add_pass(Named("needy", requires=("helper",))).compile(model, {"batch": 1, "seq": 1})
    ok = pipeline(optimize=False).add_pass(Named("helper")).add_pass(Named("needy", requires=("helper",)))
    ok.run_passes(model, {"batch": 1, "seq": 1})
    assert [r.name for r in ok.history][-2:] == ["helper", "needy"]


def test_unsupported_operators_are_listed_at_once():
    nodes = [h.make_node("Relu", ["x"], ["a"], name="ok"), h.make_node("FrobnicateA", ["a"], ["b"], name="first_bad"),
             h.make_node("Wibble", ["b"], ["c"], name="second_bad", domain="com.example"),
             h.make_node("FrobnicateA", ["c"], ["y"], name="third_bad")]
    model = make_model(nodes, [("x", np.float32, [2])], ["y"], extra_opsets={"com.example": 1})
    with pytest.raises(UnsupportedOperatorError) as info:
        compile_model(model)
    message = str(info.value)
    for fragment in ("FrobnicateA", "Wibble", "first_bad", "second_bad", "third_bad", "com.example"):
        assert fragment in message
    assert "'ok'" not in message
    assert set(info.value.missing) == {("", "FrobnicateA"), ("com.example", "Wibble")}


def test_operator_missing_at_the_models_opset_is_unsupported():
    # Registry versions start at 1; a model at an opset before any registration finds nothing.
    registry = onyxia.OperatorRegistry()
    for key in core_operator_registry():
        op = core_operator_registry().get(key[1], key[0])
        registry.register(op, 14)
    model = make_model([h.make_node("Relu", ["x"], ["y"], name="old_relu")], [("x", np.float32, [2])], ["y"], opset=13)
    with pytest.raises(UnsupportedOperatorError, match="old_relu"):
        CompilerPipeline(registry).compile(onyxia.load_model(model))


# ---- planning ------------------------------------------------------------------------

def immediates_of(compiled: CompiledModel) -> list:
    return [v for s in compiled.steps if isinstance(s, Dispatch) for v in s.immediates]


def test_static_dims_become_shader_constants_and_dynamic_ones_immediates():
    model = shape_chain_model()
    dynamic = compile_model(model, {"batch": 2, "seq": 3})
    static = compile_model(model, {"batch": 2, "seq": 3}, static=["batch", "seq"])
    # Fully static: no symbol travels as an immediate and no binding patches one (kernels shared
    # by products of several sizes take their sizes as immediates, static numbers here).
    assert not any(isinstance(v, SymDim) for v in immediates_of(static))
    assert all(not s.immediates for s in static.shaders if s.label != "matmul/gemv_chunked")
    assert not [b for b in static.symbolic_bindings if b.kind == "immediate"]
    assert static.static_symbols == {"batch", "seq"}
    baked = [v for s in static.shaders for v in [*(v for _, v in s.defs), *(v for _, v in s.constants)]
             if isinstance(v, SymDim)]
    assert baked and all(v.symbols <= {"batch", "seq"} for v in baked)
    shader_bindings = {b.target for b in static.symbolic_bindings if b.kind == "shader"}
    assert shader_bindings == {i for i, s in enumerate(static.shaders)
                               if any(isinstance(v, SymDim) for _, v in (*s.defs, *s.constants))}
    # Fully dynamic: every symbolic value is an immediate with a binding; no constant depends on a symbol.
    for s in dynamic.shaders:
        assert not any(isinstance(v, SymDim) for _, v in (*s.defs, *s.constants)), s.label
    imms = immediates_of(dynamic)
    assert any(isinstance(v, SymDim) for v in imms)
    bound = {(b.target, b.index) for b in dynamic.symbolic_bindings if b.kind == "immediate"}
    for i, step in enumerate(dynamic.steps):
        if isinstance(step, Dispatch):
            assert len(step.immediates) == len(dynamic.shaders[step.shader].immediates)
            for j, v in enumerate(step.immediates):
                assert ((i, j) in bound) == isinstance(v, SymDim)
    assert not [b for b in dynamic.symbolic_bindings if b.kind == "shader"]
    # Same kernels, different specialization: the dynamic build has the immediates.
    assert [s.label for s in static.shaders] == [s.label for s in dynamic.shaders]
    assert sum(len(s.immediates) for s in dynamic.shaders) > 0


def test_partially_static_dims_keep_no_immediate_over_static_symbols_only():
    compiled = compile_model(shape_chain_model(), {"batch": 2, "seq": 3}, static=["seq"])
    for v in immediates_of(compiled):
        if isinstance(v, SymDim):
            assert "batch" in v.symbols, f"immediate {v} depends only on static symbols"
    for s in compiled.shaders:
        for _, v in (*s.defs, *s.constants):
            if isinstance(v, SymDim):
                assert v.symbols <= {"seq"}


def test_symbolic_buffer_sizes_are_bindings():
    compiled = compile_model(shape_chain_model(), {"batch": 2, "seq": 3})
    buffers = {b.target: b.expr for b in compiled.symbolic_bindings if b.kind == "buffer"}
    for name, t in compiled.tensors.items():
        if t.alias_of is None and isinstance(t.nbytes, SymDim):
            assert buffers[name] == t.nbytes
    assert "y0" not in buffers  # a view has no buffer of its own
    assert buffers["x"].evaluate({"batch": 2, "seq": 3}) == 2 * 3 * 8 * 4
