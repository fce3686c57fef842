"""Registry coverage: every registered operator has a shader-validation builder (the builders and
the validation itself are in tests/gpu/test_shader_validation.py)."""

from __future__ import annotations

from tests.gpu.test_shader_validation import BUILDERS, registered_ops


def test_every_registered_operator_has_a_builder():
    missing = [f"{d}::{op}" if d else op for d, op in registered_ops() if (d, op) not in BUILDERS]
    assert not missing, f"add a BUILDERS row for: {', '.join(missing)}"
