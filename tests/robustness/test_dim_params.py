"""Issue 12 root cause 6: hostile dim_param expressions are refused quickly and clearly.

Before: 1,000 nested unary minuses or a 1,000-term sum raised RecursionError, and a product of
14 twelve-term sums hung load_model (45 s and 2.6 GB at 12 factors).
"""

from __future__ import annotations

import numpy as np
import pytest

from onyxia.errors import DimensionError, ModelLoadError
from tests.builders.hostile import h, make_model, onyxia_vs_reference
from tests.builders.isolate import expect_error, expect_value


def _sum(names: list[str]) -> str:
    return "(" + " + ".join(names) + ")"


EXPRESSIONS = {
    "nested_minus_1000": "-" * 1000 + "batch",
    "nested_minus_900_short": "-" * 900 + "b",
    "sum_1000_terms": " + ".join(f"s{i}" for i in range(1000)),
    "sum_200_short_terms": "+".join("s" for _ in range(200)),
    "product_of_14_sums": " * ".join(_sum([f"a{j}" for j in range(12)]) for _ in range(14)),
    "product_of_6_short_sums": "*".join(_sum(list("abcdefghijkl")) for _ in range(6)),
    "huge_text": "b" + " + b" * 30_000,
    "call": "__import__('os').system('echo pwned')",
    "subscript": "batch[0]",
    "power": "batch ** 100000",
    "lambda": "(lambda: 1)()",
}


def load_dim(text: str) -> None:
    import onyxia

    onyxia.load_model(make_model([h.make_node("Relu", ["x"], ["y"])], [("x", np.float32, [text])], ["y"]))


@pytest.mark.parametrize("name", sorted(EXPRESSIONS))
def test_hostile_dim_param_is_a_clear_error(name):
    # "input 'x' dim 0" names the element; the timeout catches an expansion that hangs.
    expect_error(load_dim, EXPRESSIONS[name], error=ModelLoadError,
                 match=r"input 'x' dim 0: dimension expression", timeout=20)


def reasonable_expressions_run() -> None:
    """What exporters write still works, evaluated like onnxruntime does with concrete dims."""
    model = make_model([h.make_node("Concat", ["x", "z"], ["y"], axis=0)],
                       [("x", np.float32, ["past_sequence_length + 1", 2]),
                        ("z", np.float32, ["(batch * heads - 1) // 2 * 2 + 1", 2])], ["y"])
    rng = np.random.default_rng(0)
    onyxia_vs_reference(model, {"x": rng.standard_normal((4, 2)).astype(np.float32),
                                "z": rng.standard_normal((3, 2)).astype(np.float32)},
                        {"past_sequence_length": 3, "batch": 2, "heads": 2})


def test_reasonable_expressions_still_evaluate():
    expect_value(reasonable_expressions_run)


def spaced_symbol_round_trip(tmp: str) -> None:
    """Issue 28: a dim_param holding a space ("batch size") went into the plan as the text
    `4 * batch size`, which load refused (PlanError: uses symbol '4 * batch size'). Inside an
    expression such a name is now quoted (`4 * 'batch size'`) and parses back."""
    from pathlib import Path

    import onyxia
    from onyxia.compiler import CompilerPipeline
    from onyxia.plan import CompiledModel

    model = make_model([h.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", np.float32, ["batch size", 4])], ["y"])
    compiled = CompilerPipeline(onyxia.core_operator_registry()).compile(onyxia.load_model(model), {"batch size": 2})
    path = Path(tmp) / "p.onyxia"
    compiled.save(path)
    exe = onyxia.Runtime().load_model(CompiledModel.load(path))
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    exe.update_dimensions({"batch size": 3})
    want = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(exe.run({"x": x})["y"], want / want.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_symbol_with_a_space_survives_a_plan_round_trip(tmp_path):
    expect_value(spaced_symbol_round_trip, str(tmp_path))


def sequence_model_with_dims(dims: dict, compile_only: bool) -> None:
    from onnx import TensorProto

    import onyxia

    seq = h.make_tensor_sequence_value_info("s", TensorProto.FLOAT, ["n", 4])
    graph = h.make_graph([h.make_node("SequenceAt", ["s", "i"], ["y"])], "g", [seq],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                         [h.make_tensor("i", TensorProto.INT64, [], [0])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])
    if compile_only:
        onyxia.CompilerPipeline(onyxia.core_operator_registry()).compile(onyxia.load_model(model), dims)
    else:
        onyxia.InferenceSession(model, dims=dims)  # refused here, not at the first run


@pytest.mark.parametrize("compile_only", [False, True])
@pytest.mark.parametrize("name", ["n", "zz"])
def test_dims_on_a_sequence_input_model_name_the_symbol(name, compile_only):
    # Issue 28: the session took any dims and failed only at run; the element sizes of a sequence
    # input come from the sequence fed, so no dims name them.
    expect_error(sequence_model_with_dims, {name: 2}, compile_only, error=DimensionError,
                 match=rf"dimension '{name}' is not used by the model \(its symbols: none\); the element "
                       r"sizes of sequence input 's' come from the value fed at run time, not from dims")
