"""The parameter Transport objects: lookup by name, what each declares in WGSL, when each applies."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

from onyxia.codegen.transport import IMMEDIATE, TRANSPORTS, UNIFORM, UniformBuffer, get_transport
from onyxia.codegen.wgsl import render
from tests.helpers import compile_model, make_model


def test_transports_are_found_by_name_and_compare_equal_to_it():
    assert [t.name for t in TRANSPORTS] == ["immediate", "uniform"]
    for t in TRANSPORTS:
        assert get_transport(t.name) is t and get_transport(t) is t
        assert t == t.name and str(t) == t.name and t != "other"
    assert IMMEDIATE != UNIFORM and len({IMMEDIATE, UNIFORM, "immediate"}) == 2
    with pytest.raises(ValueError, match="immediate, uniform"):
        get_transport("push")


def test_availability_and_fit():
    assert IMMEDIATE.available({"immediates", "shader-f16"}) and not IMMEDIATE.available({"shader-f16"})
    assert UNIFORM.available(set())
    assert IMMEDIATE.carries(128, 128) and not IMMEDIATE.carries(132, 128) and not IMMEDIATE.carries(4, 0)
    assert UNIFORM.carries(10_000, 0)


def test_uniform_slots_are_aligned_for_dynamic_offsets():
    words = UniformBuffer.SLOT_BYTES // 4
    assert [UNIFORM.slot_words(n) for n in (1, words, words + 1)] == [words, words, 2 * words]
    assert [IMMEDIATE.slot_words(n) for n in (1, 7)] == [1, 7]


def test_rendered_kernels_differ_only_in_the_params_declaration():
    model = make_model([h.make_node("Add", ["x", "y"], ["z"])],
                       [("x", np.float32, ["n", 4]), ("y", np.float32, ["n", 4])], ["z"])
    compiled = compile_model(model, {"n": 3})
    (spec,) = compiled.shaders
    assert spec.immediates, "n is dynamic: the kernel has parameters"
    code = {t: render(spec, compiled.templates[spec.template], compiled.dims, t).splitlines() for t in TRANSPORTS}
    diff = [(a, b) for a, b in zip(code[IMMEDIATE], code[UNIFORM]) if a != b]
    assert diff == [(IMMEDIATE.declaration(), UNIFORM.declaration())]
    assert UNIFORM.declaration() == "@group(1) @binding(0) var<uniform> params: Params;"
