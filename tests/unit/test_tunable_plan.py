"""Tunable steps in plan files: saved and loaded as they were, and a malformed one refused with a
PlanError naming the field (onyxia/plan_check.py)."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from onnx import helper as h

from onyxia.errors import PlanError
from onyxia.plan import CompiledModel, Tunable
from tests.helpers import compile_model, make_model


def compiled_model():
    w = np.ones((64, 32), np.float32)
    model = make_model([h.make_node("MatMul", ["a", "w"], ["y"])], [("a", np.float32, ["m", 64])], ["y"], {"w": w})
    return compile_model(model, {"m": 4})


def tunable_json(doc: dict) -> dict:
    return next(s for op in doc["operations"] for s in op["steps"] if s["t"] == "tunable")


def edited(tmp_path, edit) -> CompiledModel:
    path = tmp_path / "p.onyxia"
    compiled_model().save(path)
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    doc = json.loads(members["plan.json"])
    edit(doc, tunable_json(doc))
    members["plan.json"] = json.dumps(doc).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return CompiledModel.load(path)


def test_round_trip(tmp_path):
    model = compiled_model()
    [tunable] = [s for s in model.steps if isinstance(s, Tunable)]
    assert tunable.labels == ("chunked", "coalesced", "register", "shared") and tunable.key.startswith("matmul/f32")
    loaded = edited(tmp_path, lambda doc, t: None)
    assert [s.to_json() for s in loaded.steps] == [s.to_json() for s in model.steps]
    assert loaded.symbolic_bindings == model.symbolic_bindings


def _set(key, value):
    def edit(doc, t):
        t[key] = value
    return edit


CASES = {
    "default out of range": (_set("default", 4), r"steps\[0\]\.default: must be an integer in \[0, 4\), got 4"),
    "negative default": (_set("default", -1), r"steps\[0\]\.default: must be an integer in \[0, 4\)"),
    "float default": (_set("default", 1.5), r"steps\[0\]\.default: must be an integer or a dimension expression"),
    "default expression out of range": (_set("default", {"sym": "m + 7"}),
                                        r"step 0 default: index 11 is not one of the 4 alternatives"),
    "unknown symbol in default": (_set("default", {"sym": "ghost"}), r"steps\[0\]\.default: uses symbol 'ghost'"),
    "labels fewer than alternatives": (lambda doc, t: t["labels"].pop(),
                                       r"steps\[0\]\.alternatives: holds 4 alternatives for 3 labels"),
    "no alternatives": (lambda doc, t: (t.update(alternatives=[], labels=[])),
                        r"steps\[0\]\.alternatives: holds 0 alternatives"),
    "label twice": (lambda doc, t: t["labels"].__setitem__(1, t["labels"][0]),
                    r"steps\[0\]\.labels\[1\]: 'chunked' is empty or names a second alternative"),
    "label not a string": (lambda doc, t: t["labels"].__setitem__(0, 5), r"steps\[0\]\.labels\[0\]: must be a string"),
    "empty key": (_set("key", ""), r"steps\[0\]\.key: must not be empty"),
    "alternative not a list": (lambda doc, t: t["alternatives"].__setitem__(0, {"t": "dispatch"}),
                               r"steps\[0\]\.alternatives\[0\]: must be a list"),
    "alternative step not an object": (lambda doc, t: t["alternatives"][1].__setitem__(0, 7),
                                       r"steps\[0\]\.alternatives\[1\]\[0\]: must be an object"),
    "nested step names its place": (lambda doc, t: t["alternatives"][2][0].__setitem__("shader", 99),
                                    r"steps\[0\]\.alternatives\[2\]\[0\]\.shader: must be an index"),
    "shape value a float": (lambda doc, t: t["shape"].__setitem__(0, 2.5),
                            r"steps\[0\]\.shape\[0\]: must be an integer or a dimension expression"),
    "missing field": (lambda doc, t: t.pop("labels"), r"steps\[0\]\.labels: is missing"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_tunable_is_refused_naming_the_field(tmp_path, case):
    edit, match = CASES[case]
    with pytest.raises(PlanError, match=match):
        edited(tmp_path, edit)


def test_plan_ctx_tunable_api():
    """One alternative is its steps as they are; a label names the default."""
    from onyxia.operators.base import PlanCtx
    from onyxia.plan import CopyBuffer

    a, b = CopyBuffer("x", "y", 4), CopyBuffer("x", "y", 8)
    tunable = PlanCtx.tunable  # needs no state of the context
    assert tunable(None, "k", {"only": [a]}) == [a]  # type: ignore[arg-type]
    [step] = tunable(None, "k", {"one": [a], "two": [b]}, default="two", shape=(3,))  # type: ignore[arg-type]
    assert isinstance(step, Tunable) and step.default == 1 and step.alternatives == ((a,), (b,))
    assert step.children() == (a, b) and step.uses() == (("x", False), ("y", True)) * 2


def test_alternatives_never_share_a_buffer():
    """Memory planning sees every alternative's tensors live at the Tunable's step: the split-K
    scratch of the chunked and of the coalesced kernel keep buffers of their own."""
    w = np.ones((40_000, 8), np.float32)
    model = make_model([h.make_node("MatMul", ["a", "w"], ["m"]), h.make_node("Relu", ["m"], ["r"]),
                        h.make_node("MatMul", ["r", "v"], ["y"])], [("a", np.float32, ["n", 40_000])], ["y"],
                       {"w": w, "v": np.ones((8, 8), np.float32)})
    compiled = compile_model(model, {"n": 2})
    [first, _] = [s for s in compiled.steps if isinstance(s, Tunable)]
    scratch = sorted({t for alt in first.alternatives for s in alt for t, _ in s.uses()
                      if compiled.tensors[t].kind == "scratch"})
    assert len(scratch) >= 2
    roots = {compiled.tensors[t].alias_of or t for t in scratch}
    assert len(roots) == len(scratch)
