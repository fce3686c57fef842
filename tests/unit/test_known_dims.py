"""A symbol whose value is known at compile time is as good as a literal in every shape check.

The assumption (symbol = literal, or two symbols with equal values) becomes one of the plan's
constraints, which the runtime re-checks on update_dimensions (tests/gpu/test_known_dims.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline, Stage
from onyxia.errors import ShapeInferenceError
from onyxia.ir.shapes import SymDim
from onyxia.operators import core_operator_registry
from onyxia.plan import CompiledModel, Dispatch
from tests.builders.known_dims import gqa_model
from tests.helpers import compile_model, make_model


def constraints(compiled: CompiledModel) -> set[tuple[str, str, str]]:
    return {(str(a), str(b), node) for a, b, node in compiled.constraints}


def test_concat_takes_a_known_symbol_against_a_literal():
    model = make_model([h.make_node("Concat", ["a", "b"], ["y"], axis=0, name="cat")],
                       [("a", np.float32, [2, "d"]), ("b", np.float32, [5, 3])], ["y"])
    compiled = compile_model(model, {"d": 3})
    assert compiled.tensors["y"].shape == (7, 3)  # the literal wins: it can be baked
    assert constraints(compiled) == {("d", "3", "cat")}


def test_add_broadcasts_a_known_symbol_against_a_literal():
    model = make_model([h.make_node("Add", ["a", "b"], ["y"], name="plus")],
                       [("a", np.float32, ["n", 4]), ("b", np.float32, [3, 4])], ["y"])
    compiled = compile_model(model, {"n": 3})
    assert compiled.tensors["y"].shape == (3, 4)
    assert constraints(compiled) == {("n", "3", "plus")}


def test_matmul_inner_dim_may_be_a_known_symbol():
    rng = np.random.default_rng(0)
    model = make_model([h.make_node("MatMul", ["a", "w"], ["y"], name="proj")],
                       [("a", np.float32, ["m", "k"])], ["y"], {"w": rng.standard_normal((8, 5)).astype(np.float32)})
    compiled = compile_model(model, {"m": 2, "k": 8})
    assert constraints(compiled) == {("k", "8", "proj")}
    # The kernels use the literal K: no immediate depends on k.
    for step in compiled.steps:
        if isinstance(step, Dispatch):
            assert not any(isinstance(v, SymDim) and "k" in v.symbols for v in step.immediates)


@pytest.mark.parametrize("op, inputs, dims", [
    ("Concat", [("a", [2, "d"]), ("b", [5, 3])], {"d": 4}),
    ("Add", [("a", ["n", 4]), ("b", [3, 4])], {"n": 2}),
    ("MatMul", [("a", [2, "k"]), ("b", [8, 5])], {"k": 7}),
])
def test_a_known_symbol_with_another_value_is_an_error(op, inputs, dims):
    attrs = {"axis": 0} if op == "Concat" else {}
    model = make_model([h.make_node(op, ["a", "b"], ["y"], name="node", **attrs)],
                       [(n, np.float32, s) for n, s in inputs], ["y"])
    with pytest.raises(ShapeInferenceError, match="'node'"):
        compile_model(model, dims)


def test_two_symbols_with_equal_values_are_one_dim_in_concat():
    model = make_model([h.make_node("Concat", ["a", "b"], ["y"], axis=1, name="cat")],
                       [("a", np.float32, ["seq", 2]), ("b", np.float32, ["mask_seq", 3])], ["y"])
    compiled = compile_model(model, {"seq": 4, "mask_seq": 4})
    assert constraints(compiled) == {("seq", "mask_seq", "cat")}
    with pytest.raises(ShapeInferenceError, match="dim 0 is mask_seq, input 0 has seq"):
        compile_model(model, {"seq": 4, "mask_seq": 5})


def test_gqa_accepts_a_kv_head_dim_given_as_a_symbol():
    compiled = compile_model(gqa_model("kv_cache_dim"), {"S": 3, "P": 0, "kv_cache_dim": 16})
    assert constraints(compiled) == {("kv_cache_dim", "16", "gqa")}
    assert compiled.tensors["prk"].shape[-1] == 16
    with pytest.raises(ShapeInferenceError, match=r"expected BNSH \[batch, 2, past_length, 16\], got .*kv_cache_dim"):
        compile_model(gqa_model("kv_cache_dim"), {"S": 3, "P": 0, "kv_cache_dim": 32})


def test_placeholder_values_are_not_judged():
    """InferenceSession describes its outputs with stand-in values (1) before any feed: checks on
    those symbols pass and record nothing; the real compile judges them."""
    pipe = CompilerPipeline(core_operator_registry())
    graph = pipe.run_passes(onyxia.load_model(gqa_model("kv_cache_dim")), {"S": 1, "P": 1, "kv_cache_dim": 1},
                            until=Stage.INFERENCE, placeholders={"S", "P", "kv_cache_dim"})
    assert graph.tensor("prk").shape[-1] == 16 and not pipe.context.constraints
