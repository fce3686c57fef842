"""Issue 12 root cause 6: hostile dim_param expressions are refused quickly and clearly.

Before: 1,000 nested unary minuses or a 1,000-term sum raised RecursionError, and a product of
14 twelve-term sums hung load_model (45 s and 2.6 GB at 12 factors).
"""

from __future__ import annotations

import numpy as np
import pytest

from onyxia.errors import ModelLoadError
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
