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
import mmap
import struct
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import onyxia.plan.archive as plan_archive
import onyxia.plan.check as plan_check
import onyxia.plan.invariants as plan_invariants
from onyxia.errors import OnyxiaError, PlanError
from onyxia.ir.dim_parse import parse_dim
from onyxia.ir.dtypes import from_name
from onyxia.ir.shapes import SymDim, numel
from onyxia.plan.select import Select  # noqa: F401 - registers the "select" step kind
from onyxia.plan.steps import Expr, Scalar, Step, _dec, _enc, walk_steps

PLAN_FORMAT = "onyxia-plan"
# 9: Select.interchangeable, the "guarded-loads" trait;
# 8: the "trait" guard clause (adapter traits a runtime knows: plan.select.TRAITS);
# 7: the status word's top bit tells an error from a note (a site that lost an int64 value);
# 6: Select steps (alternatives with guards over dims and adapter facts) replace Tunable steps
# and the adapter symbol; 5: buffers read in pairs (BufferDecl.wide); 4: Tunable steps;
# 3: shaders declare typed buffers, tensors keep native storage (2: 32-bit words)
PLAN_VERSION = 9

# The plan's status word: kernels that can detect a wrong result (an int64 value out of the
# range the GPU computes it in) record a report site in it, and the runtime raises an error
# naming the site's node when it reads outputs back. Bound after a reporting shader's buffers.
STATUS_TENSOR = "onyxia/status"
# A word with this bit set is an error at site (word & ~STATUS_ERROR); a nonzero word without it
# is a note: that site lost an int64 value (outside ±(2^31 - 1)), an error only if the value
# reaches an output (plan-format.md §10).
STATUS_ERROR = 0x80000000

@dataclass(frozen=True)
class ShaderParam:
    """A scalar a shader reads through an accessor function `NAME()`.

    Static params (ints, floats, or expressions over static symbols) are baked into the WGSL
    as constants; dynamic ones travel as immediates in `Params` and are patched at runtime.
    """

    name: str
    type: str  # "u32" | "i32" | "f32"


@dataclass(frozen=True)
class BufferDecl:
    """One storage binding of a shader, as its kernel sees it (codegen/storage.py generates the
    declaration and the accessors `NAME_load(i)`, `NAME_store(i, v)`, ... from it).

    The binding's number is its position in ShaderSpec.buffers (reads first, then writes), the
    same position as the tensor in each Dispatch's bindings.
    """

    name: str  # WGSL name prefix of the accessors
    dtype: str  # ONNX dtype name of the tensors bound here: fixes storage and compute types
    read_only: bool
    vector: bool = False  # the kernel also reads vec4s: NAME_load4(j) = elements 4j .. 4j+3
    whole_words: bool = False  # a write binding the kernel stores whole words of (NAME_store_unit)
    raw: bool = False  # the kernel moves storage codes (u32 bits), not values: no decode/encode
    # The kernel reads pairs: NAME_load2(j) = elements 2j, 2j + 1 (raw `vector` codes:
    # NAME_word8(j) = words 8j .. 8j + 7 as two vec4s), 64-bit loads where the device has them.
    wide: bool = False


@dataclass(frozen=True)
class ShaderSpec:
    label: str
    template: str  # key of CompiledModel.templates: the WGSL this shader specializes
    defs: tuple[tuple[str, object], ...]  # (name, bool|int|float|str|SymDim over static symbols)
    constants: tuple[tuple[ShaderParam, Scalar], ...]  # static params, baked
    immediates: tuple[ShaderParam, ...]  # dynamic params, in word order
    entry_point: str = "main"
    buffers: tuple[BufferDecl, ...] = ()  # storage bindings, in binding order
    # The kernel may report errors (onyxia_report): the plan's status word binds after `buffers`.
    reports: bool = False

    @property
    def immediate_bytes(self) -> int:
        return 4 * len(self.immediates)


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
    kind: str  # "input" | "output" | "weight" | "intermediate" | "scratch" | "status"
    data: np.ndarray | None = None  # weights and constants, in the ONNX dtype
    alias_of: str | None = None  # shares the buffer of another tensor (Reshape, Identity...)

    @property
    def nbytes(self) -> Expr:
        """Device bytes: the dtype's storage for every element, padded to whole words."""
        return from_name(self.dtype).nbytes(numel(self.shape))

    @property
    def storage(self) -> str:
        """How the device stores it (ir/dtypes.py's storage codecs: f32, f16, u8, ...)."""
        return from_name(self.dtype).require_device(f"tensor '{self.name}'")


# TensorInfo kinds whose buffers only the plan's steps see (activations): memory planning may
# hand such a buffer to another tensor, the caller never holds it.
REUSABLE_KINDS = ("intermediate", "scratch")


@dataclass(frozen=True)
class SymbolicBinding:
    """One place in the plan whose value is an expression over dynamic dimensions.

    kind: "immediate" (target=flat step index, index=word), "workgroups" (step, axis),
    "copy" (step, 0=size 1=src_offset 2=dst_offset), "write" (step, element), "buffer"
    (target=tensor name, size in bytes), "select" (step, j: the j-th of Select.values(): its
    alternatives' guard and prefer values, then its shape class values), "shader" (target=shader index; a static dim the
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
    # Report sites (node, op type, what it detected): site k (from 1) is what a nonzero status
    # word k means. Empty when no kernel reports (then the plan has no status tensor).
    sites: tuple[tuple[str, str, str], ...] = ()
    # Data-dependent symbols (NonZero's count, a fed TopK k, a Loop's trip count): set by
    # ReadSymbol/LoopStep during a run, never by the caller. Each maps to the capacity its
    # buffers are sized for (an expression over the other dims; None: grown when exceeded).
    data_symbols: dict[str, Expr | None] = field(default_factory=dict)

    @property
    def steps(self) -> list[Step]:
        """Every step, nested ones included, in pre-order (walk_steps): the flat indices."""
        return walk_steps([s for op in self.operations for s in op.steps])

    @property
    def num_dispatches(self) -> int:
        return sum(len(s.dispatches()) for s in self.steps)

    @property
    def adapter_dependent(self) -> bool:
        """Whether some Select chooses by the adapter's kind (kernel variants per adapter type)."""
        return any(isinstance(s, Select) and any(c.op == "adapter" for a in s.alternatives
                                                 for c in (*a.guard.clauses, *a.prefer.clauses))
                   for s in self.steps)

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(self.dims)

    def save(self, path: str | Path) -> None:
        save_plan(self, path)

    @staticmethod
    def load(path: str | Path, *, max_bytes: int = plan_archive.DEFAULT_MAX_PLAN_BYTES,
             trusted: bool = False) -> CompiledModel:
        return load_plan(path, max_bytes=max_bytes, trusted=trusted)


# ---- save / load: one zip holding plan.json and one .npy per constant --------------------
ALIGN_EXTRA_ID = 0xD935  # a zip extra-field record of padding only (the id Android's zipalign uses)

# JSON plus npy (not pickle) so that loading a plan file never executes code.

def save_plan(model: CompiledModel, path: str | Path) -> None:
    doc, arrays = plan_document(model)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("plan.json", json.dumps(doc))
        for key, array in arrays.items():
            buf = io.BytesIO()
            # np.asarray, not ascontiguousarray: the latter turns a 0-d scalar weight into shape (1,).
            np.save(buf, np.asarray(array, order="C"), allow_pickle=False)
            # Weights stored, not deflated: float weights shrink ~8% for ~15x the write time and
            # ~1.5x the read (resnet18's 45 MB: 24 s vs 1.5 s to write, lavapipe host, loaded).
            info = zipfile.ZipInfo(f"{key}.npy", date_time=time.localtime()[:6])
            info.compress_type = zipfile.ZIP_STORED
            # A padding record in the local header's extra field puts the member's bytes on a
            # multiple of 64 (the .npy header pads itself to one): a trusted load maps them as
            # aligned arrays, not copies (_mapped_arrays).
            start = zf.fp.tell() + 30 + len(info.filename.encode()) + 4
            info.extra = struct.pack("<HH", ALIGN_EXTRA_ID, -start % 64) + bytes(-start % 64)
            zf.writestr(info, buf.getvalue())


def plan_document(model: CompiledModel) -> tuple[dict, dict[str, np.ndarray]]:
    """(the plan.json document, {data member name: array}): what save_plan writes, also what
    the web bundle (onyxia/web) carries with its weights stored apart."""
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
                     "immediates": [[p.name, p.type] for p in s.immediates],
                     "buffers": [[b.name, b.dtype, b.read_only, b.vector, b.whole_words, b.raw, b.wide]
                                 for b in s.buffers],
                     "reports": s.reports} for s in model.shaders],
        "operations": [{"name": op.name, "op_type": op.op_type, "scratch": list(op.scratch),
                        "steps": [s.to_json() for s in op.steps]} for op in model.operations],
        "tensors": tensors,
        "inputs": list(model.inputs), "outputs": list(model.outputs),
        "symbolic_bindings": [[b.kind, b.target, b.index, str(b.expr)] for b in model.symbolic_bindings],
        "dims": model.dims, "static_symbols": sorted(model.static_symbols),
        "metadata": model.metadata,
        "constraints": [[str(a), str(b), node] for a, b, node in model.constraints],
        "sites": [list(site) for site in model.sites],
        "data_symbols": {k: _enc(v) for k, v in model.data_symbols.items()},
    }
    return doc, arrays


def load_plan(path: str | Path, *, max_bytes: int = plan_archive.DEFAULT_MAX_PLAN_BYTES,
              trusted: bool = False) -> CompiledModel:
    """Read a plan file, validated before anything trusts it (onyxia/plan/archive.py: members;
    onyxia/plan/check.py: schema, indices, names; invariants.py: sizes, weights). `max_bytes` caps the
    decompressed size. `trusted`: a file this onyxia wrote itself (the plan cache's, named by a key
    that includes onyxia's fingerprint; zip's CRC-32s still catch damage) skips the schema and
    invariant checks, 0.17 of mobilenet_v3_large's 0.24 s read."""
    try:
        with zipfile.ZipFile(path) as zf:
            members = plan_archive.check_members(zf, max_bytes)
            doc = json.loads(plan_archive.read_member(zf, members[plan_archive.PLAN_JSON],
                                                      plan_archive.MAX_PLAN_JSON_BYTES))
            if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
                raise PlanError(f"'{path}' is not an onyxia plan")
            if doc.get("version") != PLAN_VERSION:
                raise PlanError(f"'{path}' is an onyxia plan of version {doc.get('version')!r}; this onyxia "
                                f"reads version {PLAN_VERSION} only: compile the model again")
            if not trusted:
                plan_check.check_document(doc, lambda d: Step.kind(d["t"]).from_json(d))
            limits = plan_archive.data_limits(doc, members)
            if trusted:
                arrays = _mapped_arrays(path, zf, members, limits)
            else:
                arrays = {ref: np.load(io.BytesIO(plan_archive.read_member(zf, members[f"{ref}.npy"], limit)),
                                       allow_pickle=False)
                          for ref, limit in limits.items()}
        model = _plan_from_json(doc, arrays)
        if not trusted:
            plan_invariants.check_model(model)
        return model
    except PlanError as exc:
        if str(path) in str(exc):
            raise
        raise PlanError(f"plan '{path}': {exc}") from None
    except (OSError, KeyError, ValueError, TypeError, IndexError, zipfile.BadZipFile, OnyxiaError) as exc:
        # A damaged file the checks above do not describe: a bad zip, a truncated .npy.
        raise PlanError(f"cannot read plan '{path}': {type(exc).__name__}: {exc}") from exc


def _mapped_arrays(path: str | Path, zf: zipfile.ZipFile, members: dict[str, zipfile.ZipInfo],
                   limits: dict[str, int]) -> dict[str, np.ndarray]:
    """The data members of a trusted plan file (load_plan) as read-only arrays over a memory map
    of the file, not copied out of the archive twice (save_plan stores them uncompressed): XLM-R's
    92 MB: 0.23 -> 0.05 s. Each member's CRC-32 is still checked; a member deflated, or whose data
    would sit unaligned, is read as before."""
    with open(path, "rb") as fh:
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    arrays: dict[str, np.ndarray] = {}
    for ref, limit in limits.items():
        info = members[f"{ref}.npy"]
        if info.compress_type != zipfile.ZIP_STORED or info.file_size > limit:
            arrays[ref] = np.load(io.BytesIO(plan_archive.read_member(zf, info, limit)), allow_pickle=False)
            continue
        name_len, extra_len = struct.unpack("<HH", mapped[info.header_offset + 26:info.header_offset + 30])
        begin = info.header_offset + 30 + name_len + extra_len
        member = memoryview(mapped)[begin:begin + info.file_size]
        if len(member) != info.file_size or zlib.crc32(member) != info.CRC:
            raise PlanError(f"member '{info.filename}' is damaged (its CRC-32 does not match)")
        header = io.BytesIO(member[:4096])
        major, _ = np.lib.format.read_magic(header)
        read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(header)
        if dtype.hasobject:
            raise PlanError(f"member '{info.filename}' holds Python objects")
        offset = begin + header.tell()
        count = int(np.prod(shape, dtype=np.int64))
        if offset + count * dtype.itemsize > begin + info.file_size:
            raise PlanError(f"member '{info.filename}' is shorter than its {shape} {dtype} array")
        array = np.frombuffer(mapped, dtype=dtype, count=count, offset=offset)
        if offset % max(dtype.alignment, 1):
            array = array.copy()
        arrays[ref] = array.reshape(shape, order="F" if fortran else "C")
    return arrays


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
                   tuple(ShaderParam(n, ty) for n, ty in s["immediates"]), s["entry_point"],
                   tuple(BufferDecl(n, dt, bool(r), bool(v), bool(w), bool(raw), bool(wide))
                         for n, dt, r, v, w, raw, wide in s["buffers"]), bool(s["reports"]))
        for s in doc["shaders"])
    operations = tuple(PlannedOp(o["name"], o["op_type"], tuple(Step.kind(s["t"]).from_json(s) for s in o["steps"]),
                                 tuple(o["scratch"])) for o in doc["operations"])
    tensors = {t["name"]: TensorInfo(t["name"], t["dtype"], _dec(t["shape"]), t["kind"],
                                     arrays[t["data"]] if t["data"] else None, t["alias_of"])
               for t in doc["tensors"]}
    bindings = tuple(SymbolicBinding(k, tgt, i, parse_dim(e)) for k, tgt, i, e in doc["symbolic_bindings"])
    constraints = tuple((parse_dim(a), parse_dim(b), node) for a, b, node in doc.get("constraints", []))
    sites = tuple((str(node), str(op), str(what)) for node, op, what in doc["sites"])
    data_symbols = {k: _dec(v) for k, v in doc.get("data_symbols", {}).items()}
    return CompiledModel(shaders, templates, operations, tensors, tuple(doc["inputs"]), tuple(doc["outputs"]),
                         bindings, dict(doc["dims"]), frozenset(doc["static_symbols"]), doc["metadata"],
                         constraints, sites, data_symbols)
