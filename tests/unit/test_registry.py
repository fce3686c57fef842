"""OperatorRegistry: version selection, chaining, and user operators on top of the core set.

The custom operator defined here (with its own inline WGSL) also runs on the GPU in
tests/gpu/test_executor.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.errors import UnsupportedOperatorError
from onyxia.operators import Operator, OperatorRegistry, core_operator_registry
from onyxia.operators.elementwise.map_kernel import plan_map
from onyxia.plan import Dispatch
from tests.builders.registry import CUSTOM_DOMAIN, ScaledSquare, custom_registry, scaled_square_model
from tests.helpers import make_model


class Tagged(Operator):
    def __init__(self, op_type: str, tag: str, domain: str = ""):
        self.op_type, self.tag, self.domain = op_type, tag, domain


def test_highest_since_version_not_above_the_opset_wins():
    reg = OperatorRegistry()
    v1, v7, v13 = Tagged("Foo", "v1"), Tagged("Foo", "v7"), Tagged("Foo", "v13")
    reg.register(v7, 7).register(v13, 13).register(v1, 1)  # registration order must not matter
    for opset, expected in ((1, v1), (6, v1), (7, v7), (12, v7), (13, v13), (25, v13), (None, v13)):
        assert reg.get("Foo", "", opset) is expected, opset
    assert reg.get("Foo", "", 0) is None
    assert reg.get("Bar", "", 13) is None
    assert reg.get("Foo", "ai.onnx", 8) is v7  # "ai.onnx" is the default domain


def test_register_chains_and_reregistering_replaces():
    reg = OperatorRegistry()
    a, b, c = Tagged("A", "a"), Tagged("B", "b", domain=CUSTOM_DOMAIN), Tagged("A", "a2")
    assert reg.register(a).register(b, 3) is reg
    assert len(reg) == 2 and ("", "A") in reg and (CUSTOM_DOMAIN, "B") in reg
    assert list(reg) == sorted([("", "A"), (CUSTOM_DOMAIN, "B")])
    assert reg.get("B", CUSTOM_DOMAIN, 2) is None and reg.get("B", CUSTOM_DOMAIN, 3) is b
    assert reg.get("B", "", 3) is None, "domains are separate namespaces"
    reg.register(c)
    assert reg.get("A") is c
    # register under another name/domain than the class says (an alias).
    reg.register(a, 1, op_type="AliasOfA", domain="my.domain")
    assert reg.get("AliasOfA", "my.domain", 1) is a


def test_register_rejects_an_operator_without_op_type():
    with pytest.raises(ValueError):
        OperatorRegistry().register(Operator())


def test_copy_is_independent():
    reg = core_operator_registry()
    dup = reg.copy().register(ScaledSquare())
    assert (CUSTOM_DOMAIN, "ScaledSquare") in dup and (CUSTOM_DOMAIN, "ScaledSquare") not in reg
    assert len(dup) == len(reg) + 1


def test_core_registry_holds_every_category_operator():
    import importlib
    import pkgutil

    import onyxia.operators
    from onyxia.operators import CATEGORY_MODULES

    # A category module (one defining operators()) left out of CATEGORY_MODULES would be silently unregistered.
    modules = [importlib.import_module(m.name)
               for m in pkgutil.walk_packages(onyxia.operators.__path__, "onyxia.operators.")]
    assert {m for m in modules if hasattr(m, "operators")} == set(CATEGORY_MODULES)
    reg = core_operator_registry()
    expected = set()
    for module in CATEGORY_MODULES:
        for op, since in module.operators():
            expected.add((op.domain, op.op_type))
            assert reg.get(op.op_type, op.domain, since) is not None
    assert set(reg) == expected
    for op_type in ("Add", "Relu", "MatMul", "Gather", "Concat", "Reshape", "Shape", "Cast"):
        assert ("", op_type) in reg


def test_model_opset_selects_the_operator_version():
    """Two versions of one op: the model's opset decides which one plans it."""
    class Versioned(Operator):
        op_type = "Neg"

        def __init__(self, label):
            self.label = label
            self.core = core_operator_registry().get("Neg")

        def infer(self, ctx):
            return self.core.infer(ctx)

        def plan(self, ctx):
            return plan_map(ctx, "-x0", [0], label=self.label)

    reg = core_operator_registry().register(Versioned("neg_v1"), 1).register(Versioned("neg_v13"), 13)
    for opset, label in ((12, "neg_v1"), (13, "neg_v13"), (18, "neg_v13")):
        model = make_model([h.make_node("Neg", ["x"], ["y"])], [("x", np.float32, [4])], ["y"], opset=opset)
        compiled = CompilerPipeline(reg).compile(onyxia.load_model(model))
        assert [s.label for s in compiled.shaders] == [label], opset


def test_custom_operator_compiles_on_top_of_the_core_registry():
    model = scaled_square_model()
    with pytest.raises(UnsupportedOperatorError, match="com.example::ScaledSquare"):
        CompilerPipeline(core_operator_registry()).compile(onyxia.load_model(model), {"batch": 2})
    compiled = CompilerPipeline(custom_registry()).compile(onyxia.load_model(model), {"batch": 2})
    labels = list(dict.fromkeys(s.label for s in compiled.shaders))  # map_Add: one and four outputs a thread
    assert labels == ["scaled_square", "map_Add"]
    spec = compiled.shaders[0]
    assert "v * v * ALPHA()" in compiled.templates[spec.template]
    assert {p.name: v for p, v in spec.constants} == {"ALPHA": 0.5}
    assert [p.name for p in spec.immediates] == ["N"]
    assert isinstance(compiled.steps[0], Dispatch) and compiled.steps[0].shader == 0
