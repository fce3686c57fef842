"""The Operator contract and the contexts that keep operator code free of boilerplate.

An Operator is stateless, one instance per op type (a family class is instantiated once per
table row). The pipeline calls `infer` during shape inference, `fold` when every input has a
value, and `plan` for nodes that still need to run on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from onyxia.codegen.preprocess import inline_imports, load_shader, resolve_shader_import, shader_root
from onyxia.codegen.wgsl import param_type
from onyxia.errors import OnyxiaError, PlanError
from onyxia.ir import dtypes
from onyxia.ir.dim_env import DimEnv
from onyxia.ir.dtypes import DType
from onyxia.ir.graph import IrGraph, Node, TensorDef
from onyxia.ir.shapes import Dim, Shape, SymDim, dim_symbols, numel
from onyxia.operators.common import is_zero
from onyxia.operators.inference import FoldCtx, InferenceCtx, SubgraphServices
from onyxia.plan import (
    ALWAYS,
    NEVER,
    STATUS_TENSOR,
    Alternative,
    Binding,
    BufferDecl,
    CopyBuffer,
    Dispatch,
    Guard,
    Scalar,
    Select,
    ShaderParam,
    ShaderSpec,
    Step,
    WriteBuffer,
    at_most,
)

WORKGROUP_SIZE = 256  # threads per workgroup of the 1-D kernels
# lavapipe stops an invocation's loops after ~65,535 iterations in all (a raw loop of 70,000
# returns 65,535, silently) and real GPUs have watchdogs. A kernel's invocation visits at most
# MAX_TRIPS elements of any axis whose length grows with an input, a few such loops at most:
# longer axes are split across invocations and combined (multi-pass, split-K, split-KV).
MAX_TRIPS = 4096
UNBOUNDED_AXIS = 1 << 32  # the bound of a symbolic length: anything a u32 index reaches


@dataclass(frozen=True)
class Buf:
    """A tensor bound to a dispatch, with how the kernel accesses it (plan.BufferDecl): a plain
    tensor name in `reads`/`writes` is `Buf(name)`."""

    tensor: str
    vector: bool = False  # also read as vec4s (NAME_load4)
    whole_words: bool = False  # written a whole word at a time (NAME_store_unit)
    raw: bool = False  # moved as storage codes, not values
    wide: bool = False  # also read in pairs (NAME_load2, NAME_word8)


class Operator:
    """Base class. Subclasses set `op_type` (and `domain`) and implement infer/plan."""

    op_type: str = ""
    domain: str = ""
    # True for ops whose result depends only on input shapes (Shape, Size): they fold even
    # when their inputs have no values.
    folds_from_shapes: bool = False

    def infer(self, ctx: InferenceCtx) -> list[tuple[DType, Shape]]:
        raise NotImplementedError

    def fold(self, ctx: FoldCtx) -> list[np.ndarray | None] | None:
        """Compute outputs on the host when every input has a value; None = cannot fold."""
        return None

    def plan(self, ctx: PlanCtx) -> list[Step]:
        raise NotImplementedError

    def runs_as_function(self, node: Node) -> bool:
        """Whether FunctionExpansionPass replaces `node` by the op's function body instead of
        planning it (FunctionOp: always; an op with a kernel: for attribute values it lacks)."""
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.domain + '::' if self.domain else ''}{self.op_type})"


# ---- planning -----------------------------------------------------------------------------

@dataclass
class PlanState:
    """What planning accumulates across nodes: templates and shaders (both deduplicated) and
    scratch tensors."""

    graph: IrGraph
    env: DimEnv
    shaders: list[ShaderSpec] = field(default_factory=list)
    shader_index: dict[tuple, int] = field(default_factory=dict)
    scratch: dict[str, tuple[str, tuple[Dim, ...]]] = field(default_factory=dict)  # name -> (dtype, shape)
    aliases: dict[str, str] = field(default_factory=dict)  # tensor -> tensor whose buffer it shares
    # The plan's template table: key -> WGSL with imports inlined. A shader file's key is its path.
    templates: dict[str, str] = field(default_factory=dict)
    # Report sites: (node, op type, what went wrong) of every dispatch that may report an error
    # through the status word; a site's number is its position + 1.
    sites: list[tuple[str, str, str]] = field(default_factory=list)
    # Plans a subgraph's nodes into steps (the compiler's SubgraphServices, given by planning);
    # their tensors are recorded here for the tensor table.
    subgraphs: SubgraphServices | None = None
    subgraph_tensors: dict[str, TensorDef] = field(default_factory=dict)

    def template(self, path: str) -> str:
        """The key of the shader file `path`'s template, read once."""
        if path not in self.templates:
            self.templates[path] = inline_imports(load_shader(path), path, resolve_shader_import)
        return path

    def inline_template(self, label: str, source: str) -> str:
        """The key of a template generated by an operator: its label, suffixed `#2`, `#3`...
        when that key holds other text (never a path: those end in .wgsl)."""
        text = inline_imports(source, label, resolve_shader_import)
        key, n = label, 1
        while self.templates.get(key, text) != text or key.endswith(".wgsl"):
            n += 1
            key = f"{label}#{n}"
        self.templates[key] = text
        return key

    def add_shader(self, spec: ShaderSpec) -> int:
        key = (spec.label, spec.template, spec.defs, spec.constants, spec.immediates, spec.buffers, spec.reports)
        if key not in self.shader_index:
            self.shader_index[key] = len(self.shaders)
            self.shaders.append(spec)
        return self.shader_index[key]


class PlanCtx(InferenceCtx):
    def __init__(self, graph: IrGraph, node: Node, state: PlanState):
        super().__init__(graph, node, state.env)
        self.state = state

    def plan_subgraph(self, attr: str) -> list[Step]:
        """The steps of the subgraph in attribute `attr` (its live, unfolded nodes)."""
        graph = self.attr(attr)
        assert isinstance(graph, IrGraph) and self.state.subgraphs is not None
        return self.state.subgraphs.plan_subgraph(graph, self.state)

    # buffers
    def input(self, i: int) -> str:
        return self.input_tensor(i).name

    def output(self, i: int = 0) -> str:
        return self.node.outputs[i]

    def output_shape(self, i: int = 0) -> Shape:
        shape = self.graph.tensor(self.node.outputs[i]).shape
        assert shape is not None
        return shape

    def output_dtype(self, i: int = 0) -> DType:
        dtype = self.graph.tensor(self.node.outputs[i]).dtype
        assert dtype is not None
        return dtype

    def compute_type(self, dtype: DType, what: str) -> str:
        """The WGSL type kernels compute `dtype` in (f32, i32, u32), or a clear error naming this
        node when `dtype` has no device representation."""
        try:
            dtype.require_device(f"{self.node.describe()} {what}")
        except OnyxiaError as exc:
            raise type(exc)(str(exc)) from None
        return dtype.compute

    def tensor_dtype(self, name: str) -> DType:
        """The dtype of a graph tensor or of one of the plan's scratch buffers."""
        if name in self.state.scratch:
            return dtypes.from_name(self.state.scratch[name][0])
        dtype = (self.state.subgraph_tensors.get(name) or self.graph.tensor(name)).dtype
        assert dtype is not None, f"tensor '{name}' has no dtype"
        return dtype

    def lanes(self, name: str) -> int:
        """Elements per thread of a kernel writing tensor `name` whole words at a time: a word's
        worth of a packed dtype, 1 otherwise (float16 counts as native f16; where it is packed
        instead, half the threads find no element and return)."""
        dtype = self.tensor_dtype(name)
        return 1 if dtype.storage == "f16" or not dtype.packed else dtype.per_word

    def scratch(self, count: Dim, dtype: str = "float32", hint: str = "scratch") -> str:
        """A temporary buffer of `count` elements private to this op."""
        name = self.graph.fresh_name(f"{self.node.name}/{hint}")
        while name in self.state.scratch:
            name += "_"
        self.state.scratch[name] = (dtype, (count,))
        return name

    def alias_output(self, out: int = 0, inp: int = 0) -> list[Step]:
        """Let output `out` share input `inp`'s buffer (same bytes, new shape): no steps."""
        self.state.aliases[self.output(out)] = self.input(inp)
        return []

    def is_static(self, value: object) -> bool:
        """A value is baked into the shader when it depends on no dynamic symbol."""
        return self.env.is_static(value)

    # shaders and steps
    def dispatch(
        self,
        shader: str,
        *,
        reads: Mapping[str, str | Buf],
        writes: Mapping[str, str | Buf],
        workgroups: tuple[Dim, Dim, Dim] | Dim,
        params: Mapping[str, Scalar | tuple[Scalar, str]] | None = None,
        defs: Mapping[str, object] | None = None,
        label: str | None = None,
        source: str | None = None,
        reports: str | None = None,
        immediates: tuple[str, ...] = (),
    ) -> Dispatch:
        """One dispatch of the WGSL template `shader` (a path under shaders/, or `source`).

        `reads` and `writes` map the kernel's buffer names to tensors (read-only storage, then
        read-write storage, numbered from 0 in group 0): the kernel uses the accessors
        codegen/storage.py generates for each from the tensor's dtype (`x_load(i)`,
        `y_store(i, v)`, ...) and declares no storage itself. Each entry of `params` becomes an
        accessor `NAME()`: baked into the shader when it is static, an immediate (patched on
        dimension changes) otherwise. A param may be `(value, "i32"|"u32"|"f32")` to force its
        type. `reports`: what the kernel's `onyxia_report()` calls mean ("int64 overflow", ...);
        the run that hits one raises an error naming this node. `immediates`: params that stay
        immediates even when they are numbers, so that one shader serves several dispatches
        (passes; products and convs of other sizes); a value over symbols compiled static is
        still baked.
        """
        bound = {**{k: (v if isinstance(v, Buf) else Buf(v), True) for k, v in reads.items()},
                 **{k: (v if isinstance(v, Buf) else Buf(v), False) for k, v in writes.items()}}
        if len(bound) != len(reads) + len(writes):
            raise PlanError(f"{self.node.describe()}: a buffer name is both read and written")
        tensors = [b.tensor for b, _ in bound.values()]
        for name in writes.values():
            tensor = name.tensor if isinstance(name, Buf) else name
            if tensors.count(tensor) > 1:
                raise PlanError(f"{self.node.describe()}: buffer '{tensor}' bound both read-only and read-write")
        buffers = tuple(BufferDecl(k, self.tensor_dtype(b.tensor).name, ro, b.vector, b.whole_words, b.raw,
                                   b.wide)
                        for k, (b, ro) in bound.items())
        constants: list[tuple[ShaderParam, Scalar]] = []
        dynamic: list[tuple[ShaderParam, Scalar]] = []
        for pname, raw in sorted((params or {}).items()):
            value, ptype = raw if isinstance(raw, tuple) else (raw, param_type(raw))
            # a forced immediate is a number; a size over symbols made static stays baked
            forced = pname in immediates and isinstance(value, (int, float))
            target = constants if self.is_static(value) and not forced else dynamic
            target.append((ShaderParam(pname, ptype), value))
        if reports:
            # The site travels as an immediate, so that one shader serves every node using it.
            self.state.sites.append((self.node.name, self.node.op_type, reports))
            dynamic.append((ShaderParam("ONYXIA_SITE", "u32"), len(self.state.sites)))
        resolved_defs = tuple(sorted((defs or {}).items()))
        for k, v in resolved_defs:
            if not self.is_static(v):
                raise PlanError(f"{self.node.describe()}: shader def {k}={v} depends on a dynamic dimension; "
                                "pass it as a param instead")
        template = (self.state.inline_template(label or "<inline>", source) if source
                    else self.state.template(shader))
        spec = ShaderSpec(label or shader.removesuffix(".wgsl"), template, resolved_defs,
                          tuple(constants), tuple(p for p, _ in dynamic), buffers=buffers, reports=bool(reports))
        index = self.state.add_shader(spec)
        wg = workgroups if isinstance(workgroups, tuple) else (workgroups, 1, 1)
        bindings = tuple(Binding(b.tensor, ro) for b, ro in bound.values())
        if reports:
            bindings += (Binding(STATUS_TENSOR, False),)
        return Dispatch(index, bindings, wg, tuple(v for _, v in dynamic))

    @staticmethod
    def grid(count: Dim, per_workgroup: int = WORKGROUP_SIZE) -> tuple[Dim, Dim, Dim]:
        """Workgroups for a 1-D kernel over `count` items (the runtime folds x > 65535 into y)."""
        return ((count + per_workgroup - 1) // per_workgroup, 1, 1)

    def unit_grid(self, count: Dim, tensor: str) -> tuple[Dim, Dim, Dim]:
        """Workgroups for a 1-D kernel writing `count` elements of `tensor` whole words at a
        time: a thread per `lanes(tensor)` elements."""
        lanes = self.lanes(tensor)
        return self.grid(count if lanes == 1 else (count + lanes - 1) // lanes)

    def copy(self, src: str, dst: str, nbytes: Dim, src_offset: Dim = 0, dst_offset: Dim = 0) -> CopyBuffer:
        return CopyBuffer(src, dst, nbytes, src_offset, dst_offset)

    def select(self, key: str, alternatives: Sequence[tuple[str, Sequence[Step], Guard, Guard]], *,
               tuned: bool = False, shape: Sequence[Dim] = (), interchangeable: bool = False) -> list[Step]:
        """Alternatives computing the same outputs, `(label, steps, guard, prefer)` each, as one
        plan.Select step (plan/select.py says how the runtime chooses; `tuned`: the autotuner
        may, per shape class of `shape`, under `key`; `interchangeable`: untuned, but any eligible
        alternative computes the same, so the runtime may stand one in for another).
        Never-eligible alternatives are left out, and untuned, those after one always eligible and
        preferred; one left: its steps as they are. The last one kept must be always eligible (an
        empty guard)."""
        kept = [Alternative(label, tuple(steps), guard, prefer) for label, steps, guard, prefer in alternatives
                if not guard.never]
        first = next((k for k, a in enumerate(kept) if not a.guard.clauses and not a.prefer.clauses), None)
        if not tuned and first is not None:  # a never-preferred one before it could only be a fallback
            kept = [a for a in kept[:first] if not a.prefer.never] + [kept[first]]
        if not kept or kept[-1].guard.clauses:
            raise PlanError(f"{self.node.describe()}: select '{key}' has no alternative that is always eligible")
        if len(kept) == 1:
            return list(kept[0].steps)
        return [Select(key, tuple(kept), tuned, tuple(shape) if tuned else (), interchangeable)]


def quads_guard(dims: Sequence[Dim]) -> Guard:
    """That every one of `dims` is a multiple of 4: ALWAYS / NEVER where that is known now (a
    static dim, or a symbolic one as 512 * seq), else a guard on the run's dims."""
    guard = ALWAYS
    for d in dims:
        rest = d % 4
        if isinstance(rest, int) or is_zero(rest):
            if not is_zero(rest):
                return NEVER
            continue
        guard &= at_most(rest, 0)
    return guard


def by_quads(ctx: PlanCtx, key: str, guard: Guard, steps: Callable[[bool], list[Step]]) -> list[Step]:
    """A kernel's quad-wise steps (`steps(True)`) where `guard` (quads_guard) holds, else its
    element-wise ones: one of them where that is known now, else a Select on the run's dims (a
    data-movement kernel: each compiles in well under 0.1 s on lavapipe)."""
    if guard.never:
        return steps(False)
    if not guard.clauses:
        return steps(True)
    return ctx.select(key, [("quads", steps(True), guard, ALWAYS), ("elements", steps(False), ALWAYS, ALWAYS)],
                      interchangeable=True)


def symbolic_write(dst: str, values: np.ndarray, dtype: DType) -> WriteBuffer:
    """A WriteBuffer materializing a (possibly symbolic) small host value on the device."""
    flat = tuple(v if isinstance(v, SymDim) else (float(v) if dtype.is_float else int(v))
                 for v in np.asarray(values).reshape(-1).tolist())
    return WriteBuffer(dst, flat, dtype.name)


__all__ = ["Buf", "FoldCtx", "InferenceCtx", "MAX_TRIPS", "Operator", "PlanCtx", "PlanState", "UNBOUNDED_AXIS",
           "WORKGROUP_SIZE", "by_quads", "dim_symbols", "dtypes", "numel", "quads_guard", "shader_root",
           "symbolic_write"]
