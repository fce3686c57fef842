"""Every (shader, defs) combination the operator set emits must validate through wgpu/naga.

Table-driven: BUILDERS (tests/builders/shader_table.py) maps each registered (domain, op_type)
to a function returning small models that exercise it (dtype variants, attribute variants,
broadcasting). Each model compiles with a dynamic dim and with it static (constants instead of
immediates), and every ShaderSpec is rendered for both immediates transports and turned into a
shader module. Adding an operator to the registry without a row in the table fails
`test_every_registered_operator_has_a_builder` (tests/unit/test_operator_coverage.py).
"""

from __future__ import annotations

import itertools

import pytest

import onyxia
from onyxia.codegen.wgsl import TRANSPORTS, render
from onyxia.compiler import CompilerPipeline
from onyxia.operators import core_operator_registry
from tests.builders.shader_table import BUILDERS, registered_ops

# Rendered WGSL already validated in this session: many ops share kernels and defs.
_validated: set[str] = set()


def _subgroup_renders(runtime) -> tuple[tuple[bool, int], ...]:
    """(subgroups, subgroup size) renders: none; unknown size; subgroups of 8 (ONYXIA_SUBGROUPS_OF_8)."""
    return ((False, 0), (True, 0), (True, 8)) if "subgroup" in runtime.features else ((False, 0),)


def _wide_renders(runtime) -> tuple[bool, ...]:
    return (False, True) if "shader-int64" in runtime.features else (False,)


@pytest.mark.parametrize("key", [k for k in registered_ops() if k in BUILDERS],
                         ids=lambda k: f"{k[0]}::{k[1]}" if k[0] else k[1])
def test_operator_shaders_validate(runtime, key):
    registry = core_operator_registry()
    pipeline = CompilerPipeline(registry)
    cases = BUILDERS[key]()
    assert cases, f"the builder for {key} made no models"
    for index, c in enumerate(cases):
        graph = onyxia.load_model(c.model)
        for static in c.static_variants:
            where = f"{key[1]} case {index} (dims {c.dims}, static {list(static)})"
            try:
                compiled = pipeline.compile(graph, c.dims, static=static)
            except Exception as exc:  # noqa: BLE001 - report which case broke
                raise AssertionError(f"{where}: compile failed: {type(exc).__name__}: {exc}") from exc
            for spec in compiled.shaders:
                # with and without ONYXIA_SUBGROUPS where the adapter has subgroups, and 64-bit
                # reads where it has shader-int64 (identical text for a kernel that does not use
                # them: validated once)
                for transport, (subgroups, size), wide in itertools.product(TRANSPORTS, _subgroup_renders(runtime),
                                                                            _wide_renders(runtime)):
                    code = render(spec, compiled.templates[spec.template], compiled.dims, transport,
                                  subgroups=subgroups, subgroup_size=size, wide_reads=wide)
                    if code in _validated:
                        continue
                    try:
                        runtime.device.create_shader_module(label=spec.label, code=code)
                    except Exception as exc:  # noqa: BLE001 - naga's message says what is wrong
                        raise AssertionError(f"{where}: shader '{spec.label}' ({transport}, subgroups "
                                             f"{subgroups} of {size}, wide reads {wide}) is invalid with defs "
                                             f"{dict(spec.defs)}:\n{exc}") from exc
                    _validated.add(code)
