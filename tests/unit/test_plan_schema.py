"""plan.json against the written format: docs/plan-schema.json (JSON Schema draft 2020-12) and
docs/plan-format.md, the document a second replayer (the JavaScript runtime) is written from.

Every golden plan, plans with host control flow (an If on a runtime condition, a while Loop, a
Scan), a data-dependent symbol (NonZero) and the status word are saved, their plan.json read back
from the zip and validated; the schema must refuse an edited document naming the path, and the
prose must mention every step tag and top-level field, so neither can silently fall behind.
"""

from __future__ import annotations

import copy
import json
import re
import zipfile
from pathlib import Path

import jsonschema  # a test dependency (pyproject's `test` extra): never skipped
import numpy as np
import pytest
from onnx import helper as h

from onyxia.ir import dtypes
from onyxia.plan import PLAN_FORMAT, PLAN_VERSION, Step
from tests import control_models
from tests.golden.summary import GOLDEN
from tests.helpers import compile_model, make_model

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "docs" / "plan-schema.json"
FORMAT_DOC = ROOT / "docs" / "plan-format.md"

# name -> (builder, dims): the golden models, then plans exercising the other step kinds.
CASES = {
    **{f"golden/{name}": spec for name, spec in GOLDEN.items()},
    "if_runtime_condition": (control_models.if_model, {}),
    "if_arms_differ": (control_models.arms_differ_model, {"n": 3}),  # branch then_dims/orelse_dims
    "while_loop": (lambda: control_models.counting_loop(m_input=True, while_limit=10.0), {}),
    "counting_loop": (control_models.counting_loop, {}),
    "scan": (control_models.scan_model, {"t": 5}),
    "nonzero": (lambda: make_model([h.make_node("NonZero", ["x"], ["y"])], [("x", np.float32, ["n"])], ["y"]),
                {"n": 6}),
    "int64_reports": (lambda: make_model([h.make_node("Mul", ["x", "x"], ["y"])], [("x", np.int64, ["n"])], ["y"]),
                      {"n": 4}),
    "shape_write": (lambda: make_model([h.make_node("Shape", ["x"], ["s"]), h.make_node("Relu", ["x"], ["r"])],
                                       [("x", np.float32, ["b", 3])], ["s", "r"]), {"b": 2}),
}

# The plan format's step kinds: test modules register kinds of their own ("test.*") in Step._kinds.
PLAN_STEP_KINDS = [t for t in Step._kinds if not t.startswith("test.")]


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def documents(tmp_path_factory) -> dict[str, dict]:
    """plan.json of every case, as save_plan wrote it into the plan file."""
    folder = tmp_path_factory.mktemp("plans")
    out = {}
    for name, (build, dims) in CASES.items():
        path = folder / (name.replace("/", "_") + ".onyxia")
        compile_model(build(), dims).save(path)
        with zipfile.ZipFile(path) as zf:
            out[name] = json.loads(zf.read("plan.json"))
    return out


def _errors(validator, doc: dict) -> list[str]:
    return [f"{e.json_path}: {e.message[:200]}" for e in validator.iter_errors(doc)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_json_matches_schema(name: str, validator, documents) -> None:
    doc = documents[name]
    assert (doc["format"], doc["version"]) == (PLAN_FORMAT, PLAN_VERSION)
    errors = _errors(validator, doc)
    assert not errors, f"{name}: plan.json does not match docs/plan-schema.json:\n" + "\n".join(errors[:20])


def _tags(steps: list) -> set[str]:
    found = set()
    for s in steps:
        found.add(s["t"])
        for key in ("then", "orelse", "body"):
            found |= _tags(s.get(key, []))
        for alt in s.get("alternatives", []):
            found |= _tags(alt["steps"])
    return found


def test_cases_cover_every_step_kind_and_feature(documents) -> None:
    """The plans above exercise every step tag, data symbols, report sites and nested steps."""
    tags = set().union(*(_tags(s) for d in documents.values() for op in d["operations"] for s in [op["steps"]]))
    assert tags == set(PLAN_STEP_KINDS), f"no test plan has steps {sorted(set(PLAN_STEP_KINDS) - tags)}"
    assert any(d["data_symbols"] for d in documents.values())
    assert any(d["sites"] for d in documents.values())
    assert any(b[0] == "select" for d in documents.values() for b in d["symbolic_bindings"])


def test_schema_enums_follow_the_code() -> None:
    """The schema's closed lists are the code's: step tags, device dtypes, guard conditions."""
    from onyxia.plan import ADAPTER_KINDS, CLAUSE_OPS, FEATURES, LIMITS, TRAITS
    from onyxia.plan.check import PARAM_TYPES, TENSOR_KINDS

    schema = json.loads(SCHEMA_PATH.read_text())
    defs = schema["$defs"]
    assert set(defs["step"]["properties"]["t"]["enum"]) == set(PLAN_STEP_KINDS)
    assert set(defs["dtype"]["enum"]) == {d.name for d in dtypes.all_dtypes() if d.on_device}
    assert set(defs["param_type"]["enum"]) == PARAM_TYPES
    assert set(defs["tensor"]["properties"]["kind"]["enum"]) == TENSOR_KINDS
    clauses = {c["prefixItems"][0]["const"]: c["prefixItems"] for c in defs["clause"]["oneOf"]}
    assert tuple(clauses) == CLAUSE_OPS
    assert set(clauses["adapter"][1]["enum"]) == set(ADAPTER_KINDS)
    assert set(clauses["feature"][1]["enum"]) == set(FEATURES)
    assert set(clauses["limit"][1]["enum"]) == set(LIMITS)
    assert set(clauses["trait"][1]["enum"]) == set(TRAITS)
    assert schema["properties"]["version"]["const"] == PLAN_VERSION
    assert schema["properties"]["format"]["const"] == PLAN_FORMAT


def _first_dispatch(doc: dict) -> dict:
    stack = [s for op in doc["operations"] for s in op["steps"]]
    while stack:
        s = stack.pop(0)
        if s["t"] == "dispatch":
            return s
        stack = [*s.get("then", []), *s.get("orelse", []), *s.get("body", []),
                 *(x for a in s.get("alternatives", []) for x in a["steps"]), *stack]
    raise AssertionError("no dispatch")


@pytest.mark.parametrize("mutate, path", [
    (lambda d: d["tensors"][0].__setitem__("kind", "activation"), r"^\$\.tensors\[0\]\.kind$"),
    (lambda d: _first_dispatch(d)["workgroups"].__setitem__(0, 1.5), r"\.workgroups\[0\]$"),
    (lambda d: _first_dispatch(d).pop("bindings"), r"\.steps\[0\]"),
    (lambda d: d["operations"][1]["steps"][0]["alternatives"][0]["guard"].append(["gt", 1, 2]),
     r"^\$\.operations\[1\]\.steps\[0\]\.alternatives\[0\]\.guard\[1\]$"),
    (lambda d: d["symbolic_bindings"].append(["buffer", 3, 0, "batch"]), r"^\$\.symbolic_bindings\[\d+\]\[1\]$"),
    (lambda d: d.__setitem__("version", PLAN_VERSION - 1), r"^\$\.version$"),
    (lambda d: d["operations"][1]["steps"][0].__setitem__("interchangeable", False),  # tuned: must be true
     r"^\$\.operations\[1\]\.steps\[0\]\.interchangeable$"),
    (lambda d: d.__setitem__("extra", 1), r"^\$$"),
])
def test_schema_refuses_edited_document_naming_path(mutate, path: str, validator, documents) -> None:
    doc = copy.deepcopy(documents["golden/tiny_mlp"])
    assert doc["operations"][1]["steps"][0]["t"] == "select"  # the guard mutation's target
    mutate(doc)
    errors = list(validator.iter_errors(doc))
    assert errors, "the schema accepted an edited plan.json"
    paths = [e.json_path for e in errors] + [c.json_path for e in errors for c in (e.context or [])]
    assert any(re.search(path, p) for p in paths), f"no error at {path!r}: {paths}"


def test_format_document_mentions_every_step_tag_and_field() -> None:
    text = FORMAT_DOC.read_text()
    schema = json.loads(SCHEMA_PATH.read_text())
    missing_tags = [t for t in PLAN_STEP_KINDS if f'"{t}"' not in text]
    assert not missing_tags, f"docs/plan-format.md does not describe step kinds {missing_tags}"
    def mentions(name: str) -> bool:  # as code (`name`) or as a JSON key ("name")
        return f"`{name}`" in text or f'"{name}"' in text

    missing_fields = [f for f in schema["properties"] if not mentions(f)]
    assert not missing_fields, f"docs/plan-format.md does not describe top-level fields {missing_fields}"
    step_fields = {f for k in PLAN_STEP_KINDS for f in schema["$defs"][f"step_{k}"]["properties"]}
    missing = sorted(f for f in step_fields if not mentions(f))
    assert not missing, f"docs/plan-format.md does not describe step fields {missing}"
    kinds = schema["$defs"]["symbolic_binding"]["allOf"][0]["prefixItems"][0]["enum"]
    assert not [k for k in kinds if f'"{k}"' not in text], "a symbolic binding kind is undocumented"
    assert f"version {PLAN_VERSION}" in text and PLAN_FORMAT in text
