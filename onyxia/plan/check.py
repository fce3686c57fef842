"""Validation of a plan file before the runtime trusts any of it.

A `.onyxia` file is a zip of `plan.json` and one `.npy` per constant. Loading one must not hang
the runtime, exhaust memory, or run with a plan that silently means something else, so
`load_plan` checks, in order, and reports each violation as a PlanError naming the field:

1. The container (onyxia/plan/archive.py): members are exactly `plan.json` and `data_N.npy`
   names, none twice (zip allows that; the last would win), none with a path; their declared
   sizes add up to at most the decompressed-size cap, and reads never go past a member's size.
2. The document (`check_document`): every field present and of its type (workgroup counts are
   integers or expressions, never floats), every index in range (shader, template, step targets
   of symbolic bindings), every tensor a step, alias, scratch, input or output names exists, a
   dispatch's bindings match its shader's buffers (count, access, dtype; the status word last
   where the shader reports), immediates match their shader's parameters, expressions parse and
   use the plan's symbols only, the symbols a run sets are data symbols, a Select has distinct
   labels, guards of known conditions and an always-eligible last alternative; the `.npy`
   members are exactly the ones the tensors name. Steps, nested ones included (a branch's arms,
   a loop's body, a Select's alternatives), are checked through the Step interface.
3. The model (onyxia/plan/invariants.py `check_model`): at the plan's own dims, every size and count evaluates to a
   non-negative integer, copies (a loop's first slice copies too) are 4-byte aligned and inside
   their tensors, a dispatch launches at most one workgroup per element of the largest tensor it
   binds (a 2^31 grid is refused), and each constant's array has its TensorInfo's shape and dtype.

A plan still carries WGSL that runs on the GPU: these checks keep a damaged or edited file from
misleading the runtime, they do not make an untrusted plan safe to run (see README, Security).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from onyxia.errors import OnyxiaError, PlanError
from onyxia.ir import dtypes
from onyxia.ir.dim_parse import parse_dim
from onyxia.ir.shapes import Dim, SymDim
from onyxia.plan.archive import DATA_MEMBER
from onyxia.plan.select import ADAPTER_KINDS, CLAUSE_OPS, FEATURES, LIMITS, TRAITS

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TENSOR_KINDS = frozenset({"input", "output", "weight", "intermediate", "scratch", "status"})
# plan.STATUS_TENSOR (plan.py imports this module, so the name is repeated here): the one word
# reporting kernels write, bound after their buffers.
STATUS_TENSOR = "onyxia/status"
PARAM_TYPES = frozenset({"u32", "i32", "f32"})
# Values of these expression kinds may be floats (f32 shader parameters); all others are counts.
FLOAT_KINDS = frozenset({"immediate"})


def _fail(where: str, message: str) -> PlanError:
    return PlanError(f"{where}: {message}" if where else message)


# ---- 2. the document -----------------------------------------------------------------------

class _Doc:
    """Typed access to plan.json with errors naming the dotted field."""

    def __init__(self, symbols: Iterable[str] = ()):
        self.symbols = frozenset(symbols)

    def obj(self, v: Any, where: str, keys: Iterable[str]) -> dict:
        if not isinstance(v, dict):
            raise _fail(where, f"must be an object, got {_kind(v)}")
        missing = [k for k in keys if k not in v]
        if missing:
            raise _fail(f"{where}.{missing[0]}" if where else missing[0], "is missing")
        return v

    def list(self, v: Any, where: str) -> list:
        if not isinstance(v, list):
            raise _fail(where, f"must be a list, got {_kind(v)}")
        return v

    def str(self, v: Any, where: str, pattern: re.Pattern | None = None) -> str:
        if not isinstance(v, str) or (pattern is not None and not pattern.fullmatch(v)):
            raise _fail(where, f"must be {'an identifier' if pattern else 'a string'}, got {v!r}")
        return v

    def int(self, v: Any, where: str, lo: int = 0, hi: int | None = None) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v >= hi):
            bound = f"in [{lo}, {hi})" if hi is not None else f">= {lo}"
            raise _fail(where, f"must be an integer {bound}, got {v!r}")
        return v

    def expr(self, v: Any, where: str) -> Dim:
        """An int or {"sym": "expression over the plan's symbols"}; never a float."""
        if isinstance(v, dict) and set(v) == {"sym"} and isinstance(v["sym"], str):
            return self.sym(v["sym"], where)
        if isinstance(v, bool) or not isinstance(v, int):
            raise _fail(where, f"must be an integer or a dimension expression, got {v!r}")
        return v

    def sym(self, text: Any, where: str) -> Dim:
        if not isinstance(text, str):
            raise _fail(where, f"must be a dimension expression, got {text!r}")
        try:
            value = parse_dim(text)
        except OnyxiaError as exc:
            raise _fail(where, str(exc)) from None
        unknown = sorted(value.symbols - self.symbols) if isinstance(value, SymDim) else []
        if unknown:
            raise _fail(where, f"uses symbol {unknown[0]!r}, which is not one of the plan's dims")
        return value

    def scalar(self, v: Any, where: str) -> object:
        if isinstance(v, dict) and set(v) == {"f"}:
            if isinstance(v["f"], bool) or not isinstance(v["f"], (int, float)):
                raise _fail(where, f"must be a number, got {v['f']!r}")
            return float(v["f"])
        return self.expr(v, where)


def _kind(v: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false"}.get(type(v), type(v).__name__)


def check_document(doc: Any, decode_step: Callable[[dict], Any]) -> None:
    """Schema and cross-reference checks of plan.json (see the module doc, step 2).

    `decode_step` turns a step's JSON into its Step (plan.Step.kind(tag).from_json): steps are
    checked through the Step interface (uses, expressions, dispatches), so a new kind of step is
    validated without this module knowing its fields."""
    top = ("templates", "shaders", "operations", "tensors", "inputs", "outputs", "symbolic_bindings",
           "dims", "static_symbols", "metadata", "sites")
    d = _Doc()
    d.obj(doc, "", top)
    dims = d.obj(doc["dims"], "dims", ())
    for name, value in dims.items():
        d.int(value, f"dims.{name}")
    d = _Doc(dims)
    for i, name in enumerate(d.list(doc["static_symbols"], "static_symbols")):
        if name not in dims:
            raise _fail(f"static_symbols[{i}]", f"{name!r} is not one of the plan's dims")
    d.obj(doc["metadata"], "metadata", ())
    data_symbols = d.obj(doc.get("data_symbols", {}), "data_symbols", ())
    for name, bound in data_symbols.items():
        if name not in dims or name in doc["static_symbols"]:
            raise _fail(f"data_symbols.{name}", "is not one of the plan's dynamic dims")
        if bound is not None:
            d.expr(bound, f"data_symbols.{name}")
    sites = d.list(doc["sites"], "sites")
    for i, site in enumerate(sites):
        if not isinstance(site, list) or len(site) != 3 or not all(isinstance(x, str) for x in site):
            raise _fail(f"sites[{i}]", f"must be [node, op type, what it detects], got {site!r}")

    templates = d.obj(doc["templates"], "templates", ())
    for key, text in templates.items():
        d.str(text, f"templates.{key}")
    shaders = d.list(doc["shaders"], "shaders")
    for i, s in enumerate(shaders):
        _check_shader(d, s, f"shaders[{i}]", templates)

    tensors: dict[str, dict] = {}
    for i, t in enumerate(d.list(doc["tensors"], "tensors")):
        where = f"tensors[{i}]"
        d.obj(t, where, ("name", "dtype", "shape", "kind", "data", "alias_of"))
        name = d.str(t["name"], f"{where}.name")
        if not name or name in tensors:
            raise _fail(f"{where}.name", f"{name!r} is empty or names a second tensor")
        _device_dtype(d, t["dtype"], f"{where}.dtype")
        for j, dim in enumerate(d.list(t["shape"], f"{where}.shape")):
            size = d.expr(dim, f"{where}.shape[{j}]")  # an expression may fold to a number: {"sym": "0 - 4"}
            if isinstance(size, int) and size < 0:
                raise _fail(f"{where}.shape[{j}]", f"must be non-negative, got {size} (tensor {name!r})")
        if t["kind"] not in TENSOR_KINDS:
            raise _fail(f"{where}.kind", f"must be one of {sorted(TENSOR_KINDS)}, got {t['kind']!r}")
        if t["data"] is not None:
            d.str(t["data"], f"{where}.data", DATA_MEMBER)
            if not all(isinstance(dim, int) for dim in t["shape"]):
                raise _fail(f"{where}.shape", "a tensor with data must have a static shape")
        if (t["kind"] == "status") != (name == STATUS_TENSOR):
            raise _fail(f"{where}.kind", f"only tensor '{STATUS_TENSOR}' is the status word, got {name!r} "
                        f"of kind {t['kind']!r}")
        if name == STATUS_TENSOR and (t["dtype"], t["shape"], t["data"], t["alias_of"]) != ("uint32", [1], None, None):
            raise _fail(where, "the status word must be one uint32 of its own, without data")
        tensors[name] = t
    _check_aliases(d, doc["tensors"], tensors)
    if sites and STATUS_TENSOR not in tensors:
        raise _fail("sites", f"the plan has report sites but no status tensor '{STATUS_TENSOR}'")

    def tensor(v: Any, where: str) -> str:
        if d.str(v, where) not in tensors:
            raise _fail(where, f"names tensor {v!r}, which the plan does not hold")
        return v

    for field in ("inputs", "outputs"):
        seen: set[str] = set()
        for i, name in enumerate(d.list(doc[field], field)):
            if tensor(name, f"{field}[{i}]") in seen:
                raise _fail(f"{field}[{i}]", f"{name!r} is listed twice")
            seen.add(name)

    steps = _StepChecks(d, shaders, tensors, tensor, data_symbols.keys())
    for i, op in enumerate(d.list(doc["operations"], "operations")):
        where = f"operations[{i}]"
        d.obj(op, where, ("name", "op_type", "scratch", "steps"))
        d.str(op["name"], f"{where}.name")
        d.str(op["op_type"], f"{where}.op_type")
        for j, name in enumerate(d.list(op["scratch"], f"{where}.scratch")):
            tensor(name, f"{where}.scratch[{j}]")
        for j, raw in enumerate(d.list(op["steps"], f"{where}.steps")):
            steps.check(raw, f"{where}.steps[{j}]", decode_step)
    step_exprs = steps.exprs

    for i, b in enumerate(d.list(doc["symbolic_bindings"], "symbolic_bindings")):
        where = f"symbolic_bindings[{i}]"
        if not isinstance(b, list) or len(b) != 4:
            raise _fail(where, f"must be [kind, target, index, expression], got {b!r}")
        kind, target, index, expr = b
        d.str(kind, f"{where}[0]")
        if kind == "buffer":
            tensor(target, f"{where}[1]")
        elif kind == "shader":
            d.int(target, f"{where}[1]", 0, len(shaders))
        else:
            d.int(target, f"{where}[1]", 0, len(step_exprs))
            if kind not in step_exprs[target]:
                raise _fail(f"{where}[0]", f"a binding of kind {kind!r} cannot target step {target}, which has "
                            f"{sorted(step_exprs[target]) or 'no values'}")
            d.int(index, f"{where}[2]", 0, step_exprs[target][kind])
        d.int(index, f"{where}[2]")
        d.sym(expr, f"{where}[3]")
    for i, c in enumerate(d.list(doc.get("constraints", []), "constraints")):
        if not isinstance(c, list) or len(c) != 3:
            raise _fail(f"constraints[{i}]", f"must be [expression, expression, node], got {c!r}")
        d.sym(c[0], f"constraints[{i}][0]"), d.sym(c[1], f"constraints[{i}][1]"), d.str(c[2], f"constraints[{i}][2]")


def _check_shader(d: _Doc, s: Any, where: str, templates: dict) -> None:
    d.obj(s, where, ("label", "template", "entry_point", "defs", "constants", "immediates", "buffers", "reports"))
    d.str(s["label"], f"{where}.label")
    if d.str(s["template"], f"{where}.template") not in templates:
        raise _fail(f"{where}.template", f"names template {s['template']!r}, which the plan does not hold")
    d.str(s["entry_point"], f"{where}.entry_point", _IDENTIFIER)
    for j, pair in enumerate(d.list(s["defs"], f"{where}.defs")):
        if not isinstance(pair, list) or len(pair) != 2:
            raise _fail(f"{where}.defs[{j}]", f"must be [name, value], got {pair!r}")
        d.str(pair[0], f"{where}.defs[{j}][0]", _IDENTIFIER)
        if not isinstance(pair[1], (bool, str)):
            d.scalar(pair[1], f"{where}.defs[{j}][1]")
    for j, c in enumerate(d.list(s["constants"], f"{where}.constants")):
        if not isinstance(c, list) or len(c) != 3:
            raise _fail(f"{where}.constants[{j}]", f"must be [name, type, value], got {c!r}")
        _check_param(d, c[:2], f"{where}.constants[{j}]")
        d.scalar(c[2], f"{where}.constants[{j}][2]")
    for j, p in enumerate(d.list(s["immediates"], f"{where}.immediates")):
        _check_param(d, p, f"{where}.immediates[{j}]")
    names: set[str] = set()
    for j, b in enumerate(d.list(s["buffers"], f"{where}.buffers")):
        at = f"{where}.buffers[{j}]"
        if not isinstance(b, list) or len(b) != 7 or not all(isinstance(x, bool) for x in b[2:]):
            raise _fail(at, f"must be [name, dtype, read_only, vector, whole_words, raw, wide] (5 true/false), "
                            f"got {b!r}")
        if d.str(b[0], f"{at}[0]", _IDENTIFIER) in names:
            raise _fail(f"{at}[0]", f"{b[0]!r} names a second buffer of the shader")
        names.add(b[0])
        _device_dtype(d, b[1], f"{at}[1]")
    if not isinstance(s["reports"], bool):
        raise _fail(f"{where}.reports", f"must be true/false, got {s['reports']!r}")


def _device_dtype(d: _Doc, name: Any, where: str) -> None:
    """A dtype name the device stores (every plan tensor and buffer has one)."""
    try:
        dtypes.from_name(d.str(name, where)).require_device()
    except OnyxiaError as exc:
        raise _fail(where, str(exc)) from None


def _check_param(d: _Doc, p: Any, where: str) -> None:
    if not isinstance(p, list) or len(p) != 2:
        raise _fail(where, f"must be [name, type], got {p!r}")
    d.str(p[0], f"{where}[0]", _IDENTIFIER)
    if p[1] not in PARAM_TYPES:
        raise _fail(f"{where}[1]", f"must be one of {sorted(PARAM_TYPES)}, got {p[1]!r}")


def _check_aliases(d: _Doc, raw: list, tensors: dict[str, dict]) -> None:
    for i, t in enumerate(raw):
        seen = {t["name"]}
        target = t["alias_of"]
        while target is not None:
            where = f"tensors[{i}].alias_of"
            if d.str(target, where) not in tensors:
                raise _fail(where, f"names tensor {target!r}, which the plan does not hold")
            if target in seen:
                raise _fail(where, f"aliases form a cycle through {target!r}")
            seen.add(target)
            target = tensors[target]["alias_of"]


class _StepChecks:
    """Decodes and checks steps, nested ones included; `exprs` collects, per flat step (the
    pre-order of plan.walk_steps), {expression kind: how many} for symbolic binding targets."""

    def __init__(self, d: _Doc, shaders: list, tensors: dict[str, dict], tensor: Callable[[Any, str], str],
                 data_symbols: Iterable[str]):
        self.d, self.shaders, self.tensors, self.tensor = d, shaders, tensors, tensor
        self.data_symbols = frozenset(data_symbols)
        self.exprs: list[dict[str, int]] = []

    def check(self, raw: Any, where: str, decode_step: Callable[[dict], Any]) -> None:
        self.d.obj(raw, where, ("t",))
        if raw["t"] == "select":
            self._select(raw, where)
        try:
            step = decode_step(raw)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OnyxiaError) as exc:
            missing = f"field {exc} is missing" if isinstance(exc, KeyError) else str(exc)
            raise _fail(where, f"not a valid {raw.get('t')!r} step: {missing}") from None
        self._check(step, raw, where)

    def _check(self, step: Any, raw: dict, where: str) -> None:
        counts: dict[str, int] = {}
        self.exprs.append(counts)
        for kind, j, v in step.expressions():
            at = f"{where} {kind}[{j}]"
            if kind in FLOAT_KINDS and isinstance(v, float):
                pass
            elif isinstance(v, SymDim):
                unknown = sorted(v.symbols - self.d.symbols)
                if unknown:
                    raise _fail(at, f"uses symbol {unknown[0]!r}, which is not one of the plan's dims")
            elif isinstance(v, bool) or not isinstance(v, int):
                raise _fail(at, f"must be an integer or a dimension expression, got {v!r}")
            counts[kind] = max(counts.get(kind, 0), j + 1)
        for dispatch in step.dispatches():
            self._dispatch(dispatch, where)
        # The symbols a run sets (ReadSymbol, a loop's iteration count) must be data symbols:
        # the caller's dims are never overwritten by values read off the device.
        sets = [(field, getattr(step, field, None)) for field in ("symbol", "iterations")
                if step.tag in ("read_symbol", "loop")]
        if step.tag == "branch":  # an If whose arms give different sizes
            sets += [(f"{field}[{k}]", name) for field in ("then_dims", "orelse_dims")
                     for k, (name, _) in enumerate(getattr(step, field))]
        for field, symbol in sets:
            if symbol is not None and symbol not in self.data_symbols:
                raise _fail(f"{where}.{field}", f"{symbol!r} is not one of the plan's data symbols")
        for child, child_raw, at in _children(step, raw, where):
            self._check(child, child_raw, at)
        for name, _written in step.uses():  # after the children: an error names the innermost step
            self.tensor(name, f"{where} (tensor)")

    def _select(self, raw: dict, where: str) -> None:
        """A Select's own fields: key, tuned, interchangeable (true where tuned), shape
        expressions, and alternatives (a distinct label, guard and prefer of known conditions,
        steps; the last one's guard empty)."""
        d = self.d
        d.obj(raw, where, ("key", "tuned", "interchangeable", "shape", "alternatives"))
        if not d.str(raw["key"], f"{where}.key"):
            raise _fail(f"{where}.key", "must not be empty")
        for field in ("tuned", "interchangeable"):
            if not isinstance(raw[field], bool):
                raise _fail(f"{where}.{field}", f"must be true or false, got {raw[field]!r}")
        if raw["tuned"] and not raw["interchangeable"]:
            raise _fail(f"{where}.interchangeable", "must be true where tuned is: the tuner may replay any "
                        "eligible alternative")
        for j, v in enumerate(d.list(raw["shape"], f"{where}.shape")):
            d.expr(v, f"{where}.shape[{j}]")
        alternatives = d.list(raw["alternatives"], f"{where}.alternatives")
        if not alternatives:
            raise _fail(f"{where}.alternatives", "must hold at least one alternative")
        labels: list[str] = []
        for k, alt in enumerate(alternatives):
            at = f"{where}.alternatives[{k}]"
            d.obj(alt, at, ("label", "guard", "prefer", "steps"))
            label = d.str(alt["label"], f"{at}.label")
            if not label or label in labels:
                raise _fail(f"{at}.label", f"{label!r} is empty or names a second alternative")
            labels.append(label)
            for field in ("guard", "prefer"):
                for j, clause in enumerate(d.list(alt[field], f"{at}.{field}")):
                    self._clause(clause, f"{at}.{field}[{j}]")
            for j, step in enumerate(d.list(alt["steps"], f"{at}.steps")):
                d.obj(step, f"{at}.steps[{j}]", ("t",))
        if alternatives[-1]["guard"]:
            raise _fail(f"{where}.alternatives[{len(alternatives) - 1}].guard",
                        "must be empty: the last alternative runs when no other may")

    def _clause(self, clause: Any, where: str) -> None:
        """One guard condition (plan.select.Clause): ["le", a, b], ["adapter", kind],
        ["feature", name], ["limit", name, value] or ["trait", name]."""
        d, arity = self.d, {"le": 3, "adapter": 2, "feature": 2, "limit": 3, "trait": 2}
        row = d.list(clause, where)
        op = row[0] if row else None
        if op not in arity or len(row) != arity[op]:
            raise _fail(where, f"must be one of {', '.join(f'[{o!r}, ...]' for o in CLAUSE_OPS)} with its "
                        f"arguments, got {clause!r}")
        if op == "le":
            for j in (1, 2):
                d.expr(row[j], f"{where}[{j}]")
            return
        known = {"adapter": ADAPTER_KINDS, "feature": FEATURES, "limit": LIMITS, "trait": TRAITS}[op]
        if row[1] not in known:
            raise _fail(f"{where}[1]", f"must be one of {', '.join(known)}, got {row[1]!r}")
        if op == "limit":
            d.expr(row[2], f"{where}[2]")

    def _dispatch(self, dispatch: Any, where: str) -> None:
        shader = dispatch.shader
        if isinstance(shader, bool) or not isinstance(shader, int) or not 0 <= shader < len(self.shaders):
            raise _fail(f"{where}.shader", f"must be an index in [0, {len(self.shaders)}), got {shader!r}")
        if len(dispatch.workgroups) != 3:
            raise _fail(f"{where}.workgroups", f"must hold 3 counts, got {len(dispatch.workgroups)}")
        spec = self.shaders[shader]
        params = spec["immediates"]
        if len(dispatch.immediates) != len(params):
            raise _fail(f"{where}.immediates", f"holds {len(dispatch.immediates)} values; shader {shader} "
                        f"takes {len(params)}")
        # Bindings are the shader's buffers in order, then the status word if it reports: a
        # tensor of another dtype would be decoded with the wrong storage codec, silently.
        wanted = [(b[0], b[1], b[2], None) for b in spec["buffers"]]
        if spec["reports"]:
            wanted.append(("the status word", "uint32", False, STATUS_TENSOR))
        if len(dispatch.bindings) != len(wanted):
            raise _fail(f"{where}.bindings", f"holds {len(dispatch.bindings)} tensors; shader {shader} binds "
                        f"{len(wanted)}")
        for j, (binding, (name, dtype, read_only, only)) in enumerate(zip(dispatch.bindings, wanted)):
            at = f"{where}.bindings[{j}]"
            t = self.tensors[self.tensor(binding.tensor, f"{at}[0]")]
            if binding.read_only != read_only:
                raise _fail(f"{at}[1]", f"must be {str(read_only).lower()} (shader {shader}'s buffer {name!r})")
            status_misplaced = only != binding.tensor if only else binding.tensor == STATUS_TENSOR
            if t["dtype"] != dtype or status_misplaced:
                raise _fail(f"{at}[0]", f"tensor {binding.tensor!r} ({t['dtype']}) cannot bind to shader "
                            f"{shader}'s buffer {name!r} ({dtype})")


def _children(step: Any, raw: dict, where: str) -> list[tuple[Any, dict, str]]:
    """(child step, its JSON, its label) for the steps nested in `step`, labelled by the field
    holding them (`operations[0].steps[2].then[1]`) where the JSON lists them in order."""
    kids = step.children()
    if not kids:
        return []
    found = [(row, f"{where}.{key}[{k}]") for key, rows in raw.items() if isinstance(rows, list)
             for k, row in enumerate(rows) if isinstance(row, dict) and "t" in row]
    found += [(row, f"{where}.{key}[{k}].steps[{j}]") for key, rows in raw.items() if isinstance(rows, list)
              for k, alt in enumerate(rows) if isinstance(alt, dict) and isinstance(alt.get("steps"), list)
              for j, row in enumerate(alt["steps"]) if isinstance(row, dict) and "t" in row]  # a Select's
    if len(found) != len(kids) or any(row["t"] != kid.tag for (row, _), kid in zip(found, kids)):
        found = [({}, f"{where} nested step {k}") for k in range(len(kids))]
    return [(kid, row, at) for kid, (row, at) in zip(kids, found)]
