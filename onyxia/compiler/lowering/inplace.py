"""In-place elementwise writes: the planning step between operation ordering and memory planning.

An elementwise map (shaders/elementwise/map.wgsl or map4.wgsl, the families and fused chains, or
a Select between the two) whose input 0 dies there — same dtype and shape as the output, an
intermediate nothing reads afterwards — writes its output into that input's buffer. WebGPU
forbids binding one buffer both read-only and read-write in a dispatch, so the rewrite drops the
input's binding and the kernel loads x0 from the output buffer (`y_load`): each invocation reads
exactly the elements of the words it then stores (idx_x0 == i when shapes are equal), so no
invocation reads what another wrote.

Rewrites, per candidate dispatch (every reason a candidate is left alone is counted):
1. a new shader spec: the map's buffers without `in0`, its loads reading x0 through `y_load`
   (`y_load4` for map4's vec4 reads; each of its invocations owns four whole outputs);
2. the dispatch without binding 0 (each alternative of a Select);
3. the output tensor becomes a view of the input's root buffer (and views of the output follow).
Chained maps (Exp → Relu → ...) share one buffer: each output becomes the next input's root.
"""

from __future__ import annotations

import collections
from dataclasses import replace
from typing import Callable

from onyxia.plan import REUSABLE_KINDS, Dispatch, PlannedOp, Select, ShaderSpec, Step, TensorInfo, walk_steps

MAP_TEMPLATE = "elementwise/map.wgsl"
QUAD_TEMPLATE = "elementwise/map4.wgsl"  # four outputs a thread: x0 read as y_load4 / y_load
# Each map kernel's defs that load operands, and the accessor swaps that read x0 from y instead.
LOAD_DEFS = {MAP_TEMPLATE: ("LOADS",), QUAD_TEMPLATE: ("VLOADS", "LANES")}


def _last_uses(ops: list[PlannedOp], root: Callable[[str], str]) -> dict[str, int]:
    last: dict[str, int] = {}
    for i, op in enumerate(ops):
        for s in walk_steps(op.steps):
            for name, _ in s.uses():
                last[root(name)] = i
    return last


def write_in_place(ops: list[PlannedOp], tensors: dict[str, TensorInfo], shaders: list[ShaderSpec],
                   add_shader: Callable[[ShaderSpec], int]) -> tuple[list[PlannedOp], dict[str, TensorInfo], dict]:
    """(operations, tensors, report): maps whose input 0 dies there write into its buffer."""
    tensors = dict(tensors)
    pinned = {t.alias_of for t in tensors.values() if t.alias_of and t.kind not in REUSABLE_KINDS}
    for op in ops:
        for s in walk_steps(op.steps):
            if s.written_at_load:
                pinned.update(n for n, _ in s.uses())

    def root(name: str) -> str:
        t = tensors.get(name)
        return t.alias_of or name if t is not None else name

    last = _last_uses(ops, root)
    skipped: collections.Counter[str] = collections.Counter()
    out = list(ops)
    done = 0
    for i, op in enumerate(ops):
        maps = _maps(op.steps, shaders)
        if not maps:
            continue
        reasons = [_refuse(step, shaders[step.shader], tensors, root, last, pinned, i) for step in maps]
        if any(reasons):
            skipped[next(r for r in reasons if r)] += 1
            continue
        step = maps[0]
        src, dst = step.bindings[0].tensor, _output(step, shaders[step.shader])
        rewritten = {id(m): _in_place(m, shaders[m.shader], add_shader) for m in maps}
        out[i] = replace(op, steps=tuple(_swap(s, rewritten) for s in op.steps))
        target = root(src)
        for name, t in list(tensors.items()):  # the output and its views now live in the input's buffer
            if name == dst or t.alias_of == dst:
                tensors[name] = replace(t, alias_of=target)
        last[target] = max(last.get(dst, i), i)  # the buffer now lives as long as the output
        done += 1
    return out, tensors, {"in_place": done, **({"left": dict(skipped)} if skipped else {})}


def _maps(steps: tuple[Step, ...], shaders: list[ShaderSpec]) -> list[Dispatch]:
    """The map dispatches of an operation that is one map, or a Select of one-map alternatives
    (map4.wgsl where the axis is a multiple of 4, map.wgsl otherwise) over the same tensors."""
    if len(steps) != 1:
        return []
    step = steps[0]
    alts = [a.steps for a in step.alternatives] if isinstance(step, Select) else [steps]
    if not all(len(a) == 1 and isinstance(a[0], Dispatch) and shaders[a[0].shader].template in LOAD_DEFS
               for a in alts):
        return []
    maps = [a[0] for a in alts]
    return maps if len({tuple(b.tensor for b in m.bindings) for m in maps}) == 1 else []


def _in_place(step: Dispatch, spec: ShaderSpec, add_shader: Callable[[ShaderSpec], int]) -> Dispatch:
    """The map reading x0 from its output's buffer, input 0's binding dropped."""
    keys = LOAD_DEFS[spec.template]
    defs = tuple((k, str(v).replace("in0_load4(", "y_load4(").replace("in0_load(", "y_load(") if k in keys else v)
                 for k, v in spec.defs)
    assert any("in0_load" in str(v) for k, v in spec.defs if k in keys)
    return replace(step, shader=add_shader(replace(spec, defs=defs, buffers=spec.buffers[1:])),
                   bindings=step.bindings[1:])


def _swap(step: Step, rewritten: dict[int, Dispatch]) -> Step:
    if isinstance(step, Select):
        return replace(step, alternatives=tuple(replace(a, steps=(rewritten[id(a.steps[0])],))
                                                for a in step.alternatives))
    return rewritten[id(step)]


def _output(step: Dispatch, spec: ShaderSpec) -> str:
    index = next(k for k, b in enumerate(spec.buffers) if b.name == "y")
    return step.bindings[index].tensor


def _refuse(step: Dispatch, spec: ShaderSpec, tensors: dict[str, TensorInfo], root: Callable[[str], str],
            last: dict[str, int], pinned: set[str | None], index: int) -> str:
    """Why this map cannot write into its input 0's buffer ("" when it can)."""
    if not spec.buffers or spec.buffers[0].name != "in0" or spec.buffers[0].vector != (spec.template == QUAD_TEMPLATE):
        return "input 0 is not a plain in0 binding"
    y = next((b for b in spec.buffers if b.name == "y"), None)
    if y is None or y.raw:
        return "raw output"
    src, dst = step.bindings[0].tensor, _output(step, spec)
    s, d = tensors[src], tensors[dst]
    if s.dtype != d.dtype or tuple(s.shape) != tuple(d.shape):
        return "input 0 differs from the output in dtype or shape (broadcast)"
    if d.kind not in REUSABLE_KINDS or d.alias_of is not None or d.data is not None:
        return "the output is not a plain intermediate"
    r = root(src)
    t = tensors.get(r)
    if t is None or t.kind not in REUSABLE_KINDS or t.data is not None or r in pinned or dst in pinned:
        return "input 0's buffer is not an intermediate's"
    if last.get(r) != index:
        return "input 0 is read later"
    if sum(1 for b in step.bindings if root(b.tensor) == r) != 1:
        return "input 0 is bound twice"
    return ""


def drop_unused_shaders(ops: list[PlannedOp], shaders: list[ShaderSpec]) -> tuple[list[PlannedOp], list[ShaderSpec]]:
    """The shaders no dispatch uses any more (the maps rewritten above) left out, the dispatches'
    indices renumbered (a Select's alternatives included). Plans with host control flow
    (branches, loops) keep their list as it is."""
    steps = [s for op in ops for s in walk_steps(op.steps)]
    if any(s.children() and not isinstance(s, Select) for s in steps):
        return ops, shaders
    used = sorted({d.shader for s in steps for d in s.dispatches()})
    if len(used) == len(shaders):
        return ops, shaders
    index = {old: new for new, old in enumerate(used)}

    def renumber(s: Step) -> Step:
        if isinstance(s, Dispatch):
            return replace(s, shader=index[s.shader])
        if isinstance(s, Select):
            return replace(s, alternatives=tuple(replace(a, steps=tuple(renumber(x) for x in a.steps))
                                                 for a in s.alternatives))
        return s

    renumbered = [replace(op, steps=tuple(renumber(s) for s in op.steps)) for op in ops]
    return renumbered, [shaders[i] for i in used]
