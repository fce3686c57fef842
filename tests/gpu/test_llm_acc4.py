"""The accuracy_level-4 parity rule (tests/llm_accuracy.py) for every int4 builder folder: at the
prefill and 3 decode steps, onyxia's logits are no further from the float-activation reference
(onnxruntime at accuracy_level 0) than onnxruntime's own accuracy-4 logits, within SLACK for the
int8 rounding midpoints the two engines resolve differently. Token equality at accuracy_level 0
is tests/gpu/test_llm_fixtures.py's rule; benchmarks/bench_acc4.py prints these figures."""

from __future__ import annotations

import pytest

from tests.llm_accuracy import SLACK, parity
from tests.llm_fixtures import PROMPT, fixtures

pytestmark = pytest.mark.gpu

INT4 = [f for f in fixtures() if f.is_genai and f.precision == "int4"]


@pytest.mark.parametrize("fixture", INT4, ids=[f.name for f in INT4])
def test_accuracy4_no_further_from_float_than_onnxruntime(fixture, runtime):
    result = parity(fixture, PROMPT, runtime)
    assert len(result.ours) == len(result.onnxruntime) == 4
    # The quantization is really there: at accuracy_level 4 both engines leave the float reference.
    assert min(result.onnxruntime) > 1e-4
    assert result.holds, (f"{fixture.name}: onyxia {result.ours} vs onnxruntime {result.onnxruntime} "
                          f"(max |logits - float reference| / max |reference| per step, slack {SLACK})")
