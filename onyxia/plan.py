"""CompiledModel: the frozen, plain-data plan that the runtime replays.

A plan holds WGSL templates, each stored once, and shaders (a template plus the def and parameter
values that specialize it),
operations made of steps (Dispatch, CopyBuffer, WriteBuffer), a tensor table, and the symbolic
bindings: every place where a value depends on a dynamic dimension, so the executor can patch
it in place when dimensions change. Every size is an expression (`int | SymDim`).

This module is data only (it imports nothing but the IR's dimension and dtype types), so the
operators that emit steps, the compiler that assembles them and the runtime that replays them
can all depend on it.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Union

import numpy as np

from onyxia import plan_check
from onyxia.errors import OnyxiaError, PlanError
from onyxia.ir.dtypes import ELEMENT_BYTES
from onyxia.ir.shapes import Dim, SymDim, numel, parse_dim

PLAN_FORMAT = "onyxia-plan"
PLAN_VERSION = 2  # 2: templates stored once in a table that shaders name (1: a copy per shader)

Expr = Dim  # int | SymDim
Scalar = Union[int, float, SymDim]


@dataclass(frozen=True)
class ShaderParam:
    """A scalar a shader reads through an accessor function `NAME()`.

    Static params (ints, floats, or expressions over static symbols) are baked into the WGSL
    as constants; dynamic ones travel as immediates in `Params` and are patched at runtime.
    """

    name: str
    type: str  # "u32" | "i32" | "f32"


@dataclass(frozen=True)
class ShaderSpec:
    label: str
    template: str  # key of CompiledModel.templates: the WGSL this shader specializes
    defs: tuple[tuple[str, object], ...]  # (name, bool|int|float|str|SymDim over static symbols)
    constants: tuple[tuple[ShaderParam, Scalar], ...]  # static params, baked
    immediates: tuple[ShaderParam, ...]  # dynamic params, in word order
    entry_point: str = "main"

    @property
    def immediate_bytes(self) -> int:
        return 4 * len(self.immediates)


@dataclass(frozen=True)
class Binding:
    tensor: str
    read_only: bool


class Step:
    """One thing a planned operation does on the device.

    A kind of step is one subclass: it names the tensors it touches, the places where its values
    may be expressions over dynamic dims, and its plan-file form. The compiler (memory planning,
    symbolic bindings) and the plan file only talk to steps through these methods; the runtime
    maps each kind to the command that replays it.
    """

    tag: ClassVar[str]  # its "t" in the plan file
    # Written from the host at load time and on dimension changes, not in step order: memory
    # planning must keep its buffer to itself for the whole run.
    written_at_load: ClassVar[bool] = False
    _kinds: ClassVar[dict[str, type[Step]]] = {}

    def __init_subclass__(cls, tag: str | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if tag is not None:
            cls.tag = tag
            Step._kinds[tag] = cls

    def uses(self) -> tuple[tuple[str, bool], ...]:
        """(tensor, written?) for every tensor the step touches, in binding order."""
        raise NotImplementedError

    def expressions(self) -> tuple[tuple[str, int, object], ...]:
        """(binding kind, index, value) for every value the runtime evaluates; the symbolic
        ones become SymbolicBindings targeting this step."""
        raise NotImplementedError

    def dispatches(self) -> tuple[Dispatch, ...]:
        """The kernel launches this step makes (a step that branches may hold several)."""
        return ()

    def to_json(self) -> dict:
        raise NotImplementedError

    @classmethod
    def from_json(cls, d: dict) -> Step:
        raise NotImplementedError

    @staticmethod
    def kind(tag: object) -> type[Step]:
        """The Step subclass saved as `tag` (load_plan turns the ValueError into a PlanError)."""
        kind = Step._kinds.get(tag) if isinstance(tag, str) else None
        if kind is None:
            raise ValueError(f"unknown step kind {tag!r} (known: {', '.join(sorted(Step._kinds))})")
        return kind


@dataclass(frozen=True)
class Dispatch(Step, tag="dispatch"):
    shader: int
    bindings: tuple[Binding, ...]
    workgroups: tuple[Expr, Expr, Expr]
    immediates: tuple[Scalar, ...] = ()  # one value per ShaderSpec.immediates entry

    def uses(self) -> tuple[tuple[str, bool], ...]:
        return tuple((b.tensor, not b.read_only) for b in self.bindings)

    def expressions(self) -> tuple[tuple[str, int, object], ...]:
        return (*(("immediate", j, v) for j, v in enumerate(self.immediates)),
                *(("workgroups", j, v) for j, v in enumerate(self.workgroups)))

    def dispatches(self) -> tuple[Dispatch, ...]:
        return (self,)

    def to_json(self) -> dict:
        return {"t": self.tag, "shader": self.shader,
                "bindings": [[b.tensor, b.read_only] for b in self.bindings],
                "workgroups": _enc(self.workgroups), "immediates": _enc(self.immediates)}

    @classmethod
    def from_json(cls, d: dict) -> Dispatch:
        return cls(d["shader"], tuple(Binding(t, bool(r)) for t, r in d["bindings"]),
                   _dec(d["workgroups"]), _dec(d["immediates"]))


@dataclass(frozen=True)
class CopyBuffer(Step, tag="copy"):
    src: str
    dst: str
    size: Expr  # bytes
    src_offset: Expr = 0
    dst_offset: Expr = 0

    def uses(self) -> tuple[tuple[str, bool], ...]:
        return ((self.src, False), (self.dst, True))

    def expressions(self) -> tuple[tuple[str, int, object], ...]:
        return tuple(("copy", j, v) for j, v in enumerate((self.size, self.src_offset, self.dst_offset)))

    def to_json(self) -> dict:
        return {"t": self.tag, "src": self.src, "dst": self.dst, "size": _enc(self.size),
                "src_offset": _enc(self.src_offset), "dst_offset": _enc(self.dst_offset)}

    @classmethod
    def from_json(cls, d: dict) -> CopyBuffer:
        return cls(d["src"], d["dst"], _dec(d["size"]), _dec(d["src_offset"]), _dec(d["dst_offset"]))


@dataclass(frozen=True)
class WriteBuffer(Step, tag="write"):
    """Small host data (e.g. a shape tensor with symbolic entries) written before the steps run.

    The executor performs these at load time and again when dimensions change, not on every
    run: the data depends only on dimensions.
    """

    written_at_load: ClassVar[bool] = True

    dst: str
    data: tuple[Expr, ...]
    dtype: str  # device scalar type: "i32" | "u32" | "f32"

    def uses(self) -> tuple[tuple[str, bool], ...]:
        return ((self.dst, True),)

    def expressions(self) -> tuple[tuple[str, int, object], ...]:
        return tuple(("write", j, v) for j, v in enumerate(self.data))

    def to_json(self) -> dict:
        return {"t": self.tag, "dst": self.dst, "data": _enc(self.data), "dtype": self.dtype}

    @classmethod
    def from_json(cls, d: dict) -> WriteBuffer:
        return cls(d["dst"], _dec(d["data"]), d["dtype"])


@dataclass(frozen=True)
class PlannedOp:
    name: str  # the node name
    op_type: str  # kept for profiling and inspection (per-op GPU time)
    steps: tuple[Step, ...]
    scratch: tuple[str, ...] = ()  # scratch tensors this op allocated (in `tensors`)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # ONNX dtype name
    shape: tuple[Expr, ...]
    kind: str  # "input" | "output" | "weight" | "intermediate" | "scratch"
    data: np.ndarray | None = None  # weights and constants, in the ONNX dtype
    alias_of: str | None = None  # shares the buffer of another tensor (Reshape, Identity...)

    @property
    def nbytes(self) -> Expr:
        return numel(self.shape) * ELEMENT_BYTES


@dataclass(frozen=True)
class SymbolicBinding:
    """One place in the plan whose value is an expression over dynamic dimensions.

    kind: "immediate" (target=flat step index, index=word), "workgroups" (step, axis),
    "copy" (step, 0=size 1=src_offset 2=dst_offset), "write" (step, element), "buffer"
    (target=tensor name, size in bytes), "shader" (target=shader index; a static dim the
    shader's defs or constants depend on — changing it recompiles that shader).
    """

    kind: str
    target: int | str
    index: int
    expr: SymDim


@dataclass(frozen=True)
class CompiledModel:
    shaders: tuple[ShaderSpec, ...]
    # WGSL with #imports inlined and defs still to apply, by key; several shaders share one.
    templates: dict[str, str]
    operations: tuple[PlannedOp, ...]
    tensors: dict[str, TensorInfo]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    symbolic_bindings: tuple[SymbolicBinding, ...]
    dims: dict[str, int]  # symbol values the plan was compiled for (buffer capacities)
    static_symbols: frozenset[str] = frozenset()
    metadata: dict[str, object] = field(default_factory=dict)
    # Dims the compiler assumed equal because their values agreed (a symbol against a literal,
    # two names of one length), with the node that needed it; the executor rejects dims that
    # break them.
    constraints: tuple[tuple[Expr, Expr, str], ...] = ()

    @property
    def steps(self) -> list[Step]:
        return [s for op in self.operations for s in op.steps]

    @property
    def num_dispatches(self) -> int:
        return sum(len(s.dispatches()) for s in self.steps)

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(self.dims)

    def save(self, path: str | Path) -> None:
        save_plan(self, path)

    @staticmethod
    def load(path: str | Path, *, max_bytes: int = plan_check.DEFAULT_MAX_PLAN_BYTES) -> CompiledModel:
        return load_plan(path, max_bytes=max_bytes)


# ---- save / load: one zip holding plan.json and one .npy per constant --------------------
# JSON plus npy (not pickle) so that loading a plan file never executes code.

def _enc(v: object) -> object:
    if isinstance(v, SymDim):
        return {"sym": str(v)}
    if isinstance(v, float):
        return {"f": v}
    if isinstance(v, (list, tuple)):
        return [_enc(x) for x in v]
    return v


def _dec(v: object) -> object:
    if isinstance(v, dict):
        if "sym" in v:
            return parse_dim(v["sym"])
        if "f" in v:
            return float(v["f"])
    if isinstance(v, list):
        return tuple(_dec(x) for x in v)
    return v


def save_plan(model: CompiledModel, path: str | Path) -> None:
    arrays: dict[str, np.ndarray] = {}
    tensors = []
    for t in model.tensors.values():
        ref = None
        if t.data is not None:
            ref = f"data_{len(arrays)}"
            arrays[ref] = t.data
        tensors.append({"name": t.name, "dtype": t.dtype, "shape": _enc(t.shape), "kind": t.kind,
                        "data": ref, "alias_of": t.alias_of})
    doc = {
        "format": PLAN_FORMAT, "version": PLAN_VERSION,
        "templates": model.templates,
        "shaders": [{"label": s.label, "template": s.template, "entry_point": s.entry_point,
                     "defs": [[k, _enc(v)] for k, v in s.defs],
                     "constants": [[p.name, p.type, _enc(v)] for p, v in s.constants],
                     "immediates": [[p.name, p.type] for p in s.immediates]} for s in model.shaders],
        "operations": [{"name": op.name, "op_type": op.op_type, "scratch": list(op.scratch),
                        "steps": [s.to_json() for s in op.steps]} for op in model.operations],
        "tensors": tensors,
        "inputs": list(model.inputs), "outputs": list(model.outputs),
        "symbolic_bindings": [[b.kind, b.target, b.index, str(b.expr)] for b in model.symbolic_bindings],
        "dims": model.dims, "static_symbols": sorted(model.static_symbols),
        "metadata": model.metadata,
        "constraints": [[str(a), str(b), node] for a, b, node in model.constraints],
    }
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("plan.json", json.dumps(doc))
        for key, array in arrays.items():
            buf = io.BytesIO()
            # np.asarray, not ascontiguousarray: the latter turns a 0-d scalar weight into shape (1,).
            np.save(buf, np.asarray(array, order="C"), allow_pickle=False)
            zf.writestr(f"{key}.npy", buf.getvalue())


def load_plan(path: str | Path, *, max_bytes: int = plan_check.DEFAULT_MAX_PLAN_BYTES) -> CompiledModel:
    """Read a plan file, validated before anything trusts it (onyxia/plan_check.py): members,
    schema, indices, names, sizes, weights. `max_bytes` caps the decompressed size."""
    try:
        with zipfile.ZipFile(path) as zf:
            members = plan_check.check_members(zf, max_bytes)
            doc = json.loads(plan_check.read_member(zf, members[plan_check.PLAN_JSON],
                                                    plan_check.MAX_PLAN_JSON_BYTES))
            if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
                raise PlanError(f"'{path}' is not an onyxia plan")
            if doc.get("version") != PLAN_VERSION:
                raise PlanError(f"'{path}' is an onyxia plan of version {doc.get('version')!r}; this onyxia "
                                f"reads version {PLAN_VERSION} only: compile the model again")
            plan_check.check_document(doc, lambda d: Step.kind(d["t"]).from_json(d))
            arrays = {ref: np.load(io.BytesIO(plan_check.read_member(zf, members[f"{ref}.npy"], limit)),
                                   allow_pickle=False)
                      for ref, limit in plan_check.data_limits(doc, members).items()}
        model = _plan_from_json(doc, arrays)
        plan_check.check_model(model)
        return model
    except PlanError as exc:
        if str(path) in str(exc):
            raise
        raise PlanError(f"plan '{path}': {exc}") from None
    except (OSError, KeyError, ValueError, TypeError, IndexError, zipfile.BadZipFile, OnyxiaError) as exc:
        # A damaged file the checks above do not describe: a bad zip, a truncated .npy.
        raise PlanError(f"cannot read plan '{path}': {type(exc).__name__}: {exc}") from exc


def _plan_from_json(doc: dict, arrays: dict[str, np.ndarray]) -> CompiledModel:
    # ValueErrors here become PlanErrors naming the file (load_plan).
    templates = doc["templates"]
    if not isinstance(templates, dict) or not all(isinstance(t, str) for t in templates.values()):
        raise ValueError("'templates' must map keys to WGSL text")
    for i, s in enumerate(doc["shaders"]):
        if s["template"] not in templates:
            raise ValueError(f"shader {i} ('{s['label']}') names template '{s['template']}', "
                             "which the plan does not hold")
    shaders = tuple(
        ShaderSpec(s["label"], s["template"], tuple((k, _dec(v)) for k, v in s["defs"]),
                   tuple((ShaderParam(n, ty), _dec(v)) for n, ty, v in s["constants"]),
                   tuple(ShaderParam(n, ty) for n, ty in s["immediates"]), s["entry_point"])
        for s in doc["shaders"])
    operations = tuple(PlannedOp(o["name"], o["op_type"], tuple(Step.kind(s["t"]).from_json(s) for s in o["steps"]),
                                 tuple(o["scratch"])) for o in doc["operations"])
    tensors = {t["name"]: TensorInfo(t["name"], t["dtype"], _dec(t["shape"]), t["kind"],
                                     arrays[t["data"]] if t["data"] else None, t["alias_of"])
               for t in doc["tensors"]}
    bindings = tuple(SymbolicBinding(k, tgt, i, parse_dim(e)) for k, tgt, i, e in doc["symbolic_bindings"])
    constraints = tuple((parse_dim(a), parse_dim(b), node) for a, b, node in doc.get("constraints", []))
    return CompiledModel(shaders, templates, operations, tensors, tuple(doc["inputs"]), tuple(doc["outputs"]),
                         bindings, dict(doc["dims"]), frozenset(doc["static_symbols"]), doc["metadata"],
                         constraints)
