"""Select steps: guards evaluated as plan/select.py defines them, saved and loaded as they were,
and a malformed one refused with a PlanError naming the field (onyxia/plan/check.py)."""

from __future__ import annotations

import json
import zipfile
from dataclasses import replace

import numpy as np
import pytest
from onnx import helper as h

from onyxia.errors import PlanError
from onyxia.ir.dim_parse import parse_dim
from onyxia.plan import (
    ALWAYS,
    NEVER,
    AdapterFacts,
    Alternative,
    CompiledModel,
    CopyBuffer,
    Select,
    adapter,
    at_least,
    at_most,
    has_feature,
    has_trait,
    limit_at_least,
)
from tests.helpers import compile_model, make_model

CPU = AdapterFacts("cpu", frozenset({"subgroups"}), (("maxStorageBufferBindingSize", 1 << 27),))
GPU = AdapterFacts("gpu", frozenset({"shader-f16"}), (("maxStorageBufferBindingSize", 1 << 30),))


def compiled_model():
    w = np.ones((64, 32), np.float32)
    model = make_model([h.make_node("MatMul", ["a", "w"], ["y"])], [("a", np.float32, ["m", 64])], ["y"], {"w": w})
    return compile_model(model, {"m": 4})


def select_json(doc: dict) -> dict:
    return next(s for op in doc["operations"] for s in op["steps"] if s["t"] == "select")


def edited(tmp_path, edit) -> CompiledModel:
    path = tmp_path / "p.onyxia"
    compiled_model().save(path)
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    doc = json.loads(members["plan.json"])
    edit(doc, select_json(doc))
    members["plan.json"] = json.dumps(doc).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return CompiledModel.load(path)


def test_round_trip(tmp_path):
    model = compiled_model()
    [select] = [s for s in model.steps if isinstance(s, Select) and s.tuned]
    assert select.labels == ("chunked", "coalesced", "register", "register16", "shared")
    assert select.key.startswith("matmul/f32")
    loaded = edited(tmp_path, lambda doc, t: None)
    assert [s.to_json() for s in loaded.steps] == [s.to_json() for s in model.steps]
    assert loaded.symbolic_bindings == model.symbolic_bindings


def test_guards_choose_per_dims_and_adapter():
    """First eligible alternative whose preference holds, else the first eligible one; the tuned
    choice is made among the eligible ones only (runtime/tuner.py)."""
    m = parse_dim("m")
    a, b, c = CopyBuffer("x", "y", 4), CopyBuffer("x", "y", 8), CopyBuffer("x", "y", 12)
    step = Select("k", (Alternative("few", (a,), at_most(m, 8), adapter("cpu")),
                        Alternative("f16", (b,), has_feature("shader-f16") & at_least(m, 2)),
                        Alternative("any", (c,), ALWAYS, ALWAYS)))
    assert step.values() == (m, 8, 2, m)
    assert [step.choose({"m": v}, facts) for v, facts in ((1, CPU), (9, CPU), (1, GPU), (3, GPU), (9, GPU))] \
        == [0, 2, 2, 1, 1]
    eligible, choice = step.evaluate([5, 8, 2, 5], CPU)
    assert eligible == [True, False, True] and choice == 0
    big = Select("k", (Alternative("big", (a,), limit_at_least("maxStorageBufferBindingSize", m)),
                       Alternative("small", (b,))))
    assert big.choose({"m": 1 << 28}, CPU) == 1 and big.choose({"m": 1 << 28}, GPU) == 0
    wide = Select("k", (Alternative("wide", (a,), ALWAYS, adapter("cpu") & has_trait("wide-register-tiles")),
                        Alternative("narrow", (b,), ALWAYS, adapter("cpu")), Alternative("any", (c,))))
    assert [wide.choose({}, facts) for facts in (CPU, replace(CPU, traits=frozenset({"wide-register-tiles"})), GPU)] \
        == [1, 0, 2]
    assert at_most(3, 4) == ALWAYS and at_most(5, 4).never and (at_most(m, 4) & NEVER).never
    assert str(at_most(m, 4) & adapter("gpu")) == "m <= 4 and gpu adapter"


def test_plan_ctx_select_drops_what_cannot_run():
    """A never-eligible alternative is left out; untuned, nothing after an always-preferred one
    stays; one alternative left is its steps as they are."""
    from onyxia.operators.base import PlanCtx

    m = parse_dim("m")
    a, b = CopyBuffer("x", "y", 4), CopyBuffer("x", "y", 8)
    select = PlanCtx.select  # needs no state of the context
    assert select(None, "k", [("no", [a], NEVER, ALWAYS), ("yes", [b], ALWAYS, ALWAYS)]) == [b]  # type: ignore
    assert select(None, "k", [("first", [a], ALWAYS, ALWAYS), ("later", [b], ALWAYS, ALWAYS)]) == [a]  # type: ignore
    [step] = select(None, "k", [("few", [a], at_most(m, 4), ALWAYS), ("any", [b], ALWAYS, ALWAYS)],  # type: ignore
                    tuned=True, shape=(m,))
    assert isinstance(step, Select) and step.tuned and step.shape == (m,) and step.labels == ("few", "any")
    assert step.children() == (a, b) and step.uses() == (("x", False), ("y", True)) * 2
    assert step.interchangeable  # the tuner may replay any eligible alternative
    alternatives = [("few", [a], at_most(m, 4), ALWAYS), ("any", [b], ALWAYS, ALWAYS)]
    [untuned] = select(None, "k", alternatives)  # type: ignore
    [free] = select(None, "k", alternatives, interchangeable=True)  # type: ignore
    assert not untuned.interchangeable and free.interchangeable and not free.tuned
    assert Select.from_json(free.to_json()) == free and Select.from_json(untuned.to_json()) == untuned


def _set(key, value):
    def edit(doc, t):
        t[key] = value
    return edit


def _alt(k, key, value):
    def edit(doc, t):
        t["alternatives"][k][key] = value
    return edit


CASES = {
    "tuned not a bool": (_set("tuned", 1), r"steps\[0\]\.tuned: must be true or false"),
    "no alternatives": (_set("alternatives", []), r"steps\[0\]\.alternatives: must hold at least one"),
    "label twice": (_alt(1, "label", "chunked"),
                    r"steps\[0\]\.alternatives\[1\]\.label: 'chunked' is empty or names a second alternative"),
    "label not a string": (_alt(0, "label", 5), r"steps\[0\]\.alternatives\[0\]\.label: must be a string"),
    "empty key": (_set("key", ""), r"steps\[0\]\.key: must not be empty"),
    "alternative not an object": (lambda doc, t: t["alternatives"].__setitem__(0, [{"t": "dispatch"}]),
                                  r"steps\[0\]\.alternatives\[0\]: must be an object"),
    "alternative step not an object": (_alt(1, "steps", [7]),
                                       r"steps\[0\]\.alternatives\[1\]\.steps\[0\]: must be an object"),
    "nested step names its place": (lambda doc, t: t["alternatives"][3]["steps"][0].__setitem__("shader", 99),
                                    r"steps\[0\]\.alternatives\[3\]\.steps\[0\]\.shader: must be an index"),
    "shape value a float": (lambda doc, t: t["shape"].__setitem__(0, 2.5),
                            r"steps\[0\]\.shape\[0\]: must be an integer or a dimension expression"),
    "missing field": (lambda doc, t: t.pop("tuned"), r"steps\[0\]\.tuned: is missing"),
    "interchangeable missing": (lambda doc, t: t.pop("interchangeable"), r"steps\[0\]\.interchangeable: is missing"),
    "interchangeable not a bool": (_set("interchangeable", "yes"),
                                   r"steps\[0\]\.interchangeable: must be true or false"),
    "tuned yet not interchangeable": (_set("interchangeable", False),
                                      r"steps\[0\]\.interchangeable: must be true where tuned is"),
    "unknown condition": (_alt(0, "guard", [["lt", 1, 2]]),
                          r"steps\[0\]\.alternatives\[0\]\.guard\[0\]: must be one of \['le', \.\.\.\]"),
    "unknown adapter kind": (_alt(0, "prefer", [["adapter", "npu"]]),
                             r"alternatives\[0\]\.prefer\[0\]\[1\]: must be one of cpu, gpu, got 'npu'"),
    "unknown feature": (_alt(0, "guard", [["feature", "shader-f64"]]), r"guard\[0\]\[1\]: must be one of"),
    "unknown trait": (_alt(0, "prefer", [["trait", "fast"]]),
                      r"prefer\[0\]\[1\]: must be one of wide-register-tiles, guarded-loads, got 'fast'"),
    "guard over an unknown symbol": (_alt(0, "guard", [["le", {"sym": "ghost"}, 4]]),
                                     r"guard\[0\]\[1\]: uses symbol 'ghost'"),
    "guard with a float": (_alt(0, "guard", [["le", 1.5, 4]]), r"guard\[0\]\[1\]: must be an integer"),
    "last alternative guarded": (_alt(4, "guard", [["adapter", "gpu"]]),
                                 r"alternatives\[4\]\.guard: must be empty: the last alternative runs"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_select_is_refused_naming_the_field(tmp_path, case):
    edit, match = CASES[case]
    with pytest.raises(PlanError, match=match):
        edited(tmp_path, edit)


def test_alternatives_never_share_a_buffer():
    """Memory planning sees every alternative's tensors live at the Select's step: the split-K
    scratch of the chunked and of the coalesced kernel keep buffers of their own."""
    w = np.ones((40_000, 8), np.float32)
    model = make_model([h.make_node("MatMul", ["a", "w"], ["m"]), h.make_node("Relu", ["m"], ["r"]),
                        h.make_node("MatMul", ["r", "v"], ["y"])], [("a", np.float32, ["n", 40_000])], ["y"],
                       {"w": w, "v": np.ones((8, 8), np.float32)})
    compiled = compile_model(model, {"n": 2})
    [first, _] = [s for s in compiled.steps if isinstance(s, Select) and s.tuned]
    scratch = sorted({t for alt in first.alternatives for s in alt.steps for t, _ in s.uses()
                      if compiled.tensors[t].kind == "scratch"})
    assert len(scratch) >= 2
    roots = {compiled.tensors[t].alias_of or t for t in scratch}
    assert len(roots) == len(scratch)


def test_compile_and_inspect_list_the_selects(tmp_path, capsys):
    """`onyxia compile` lists each Select with its alternatives and which runs on each kind of
    adapter; no runtime symbol joins the user's; `onyxia inspect PLAN --dim` says it anew."""
    from onyxia.cli import main

    plan = tmp_path / "mlp.onyxia"
    assert main(["compile", "examples/tiny_mlp.onnx", "--dim", "batch=4", "-o", str(plan)]) == 0
    out = capsys.readouterr().out
    assert "symbols:          batch=4\n" in out and "onyxia_" not in out
    assert "2 run at the dims given on a CPU-type adapter, 2 on a GPU-type one" in out
    assert "3 Select steps" in out and "select matmul/f32/panels/128x64, tuned" in out
    lines: dict[str, str] = {}
    for line in out.splitlines():  # fc1's Select comes first
        if "runs on:" in line:
            lines.setdefault(line.split()[0], line)
    assert "runs on: cpu+cpu-wide+cpu-guarded " in lines["chunked"]
    assert "guard batch <= 64; prefer cpu adapter" in lines["chunked"]
    assert "runs on: gpu " in lines["coalesced"] and "runs on: cpu+cpu-wide+cpu-guarded+gpu" in lines["rows4"]
    assert "select matmul/gemv_chunked/rows, interchangeable" in out
    assert main(["inspect", str(plan), "--dim", "batch=40"]) == 0
    lines = {}
    for line in capsys.readouterr().out.splitlines():
        if "runs on:" in line:
            lines.setdefault(line.split()[0], line)
    assert "runs on: gpu " in lines["shared"] and "runs on: -" in lines["coalesced"]  # 40 rows: past its guard
    # 40 rows of fc1: 32-row tiles where the adapter has the wide-register-tiles trait, else 16
    assert "runs on: cpu-wide " in lines["rows32"] and "runs on: cpu+cpu-guarded+gpu " in lines["rows16"]
    assert main(["inspect", str(plan), "--dim", "ghost=1"]) != 0
    assert "the plan's symbols are batch" in capsys.readouterr().err
