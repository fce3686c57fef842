"""Registry coverage: every registered operator has a shader-validation builder (the builders are in
tests/builders/shader_table.py, the validation itself in tests/gpu/test_shader_validation.py)."""

from __future__ import annotations

from tests.builders.shader_table import BUILDERS, registered_ops


def test_every_registered_operator_has_a_builder():
    missing = [f"{d}::{op}" if d else op for d, op in registered_ops() if (d, op) not in BUILDERS]
    assert not missing, f"add a BUILDERS row for: {', '.join(missing)}"
