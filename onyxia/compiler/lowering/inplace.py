"""In-place elementwise writes: the planning step between operation ordering and memory planning.

An elementwise map (shaders/elementwise/map.wgsl, the families and fused chains) whose input 0
dies there — same dtype and shape as the output, an intermediate nothing reads afterwards —
writes its output into that input's buffer. WebGPU forbids binding one buffer both read-only
and read-write in a dispatch, so the rewrite drops the input's binding and the kernel loads x0
from the output buffer (`y_load`): each invocation reads exactly the elements of the words it
then stores (idx_x0 == i when shapes are equal), so no invocation reads what another wrote.

Rewrites, per candidate dispatch (every reason a candidate is left alone is counted):
1. a new shader spec: the map's buffers without `in0`, LOADS reading x0 through `y_load`;
2. the dispatch without binding 0;
3. the output tensor becomes a view of the input's root buffer (and views of the output follow).
Chained maps (Exp → Relu → ...) share one buffer: each output becomes the next input's root.
"""

from __future__ import annotations

import collections
from dataclasses import replace
from typing import Callable

from onyxia.plan import REUSABLE_KINDS, Dispatch, PlannedOp, Select, ShaderSpec, Step, TensorInfo, walk_steps

MAP_TEMPLATE = "elementwise/map.wgsl"


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
        if len(op.steps) != 1 or not isinstance(op.steps[0], Dispatch):
            continue
        step = op.steps[0]
        spec = shaders[step.shader]
        if spec.template != MAP_TEMPLATE:
            continue
        reason = _refuse(step, spec, tensors, root, last, pinned, i)
        if reason:
            skipped[reason] += 1
            continue
        src, dst = step.bindings[0].tensor, _output(step, spec)
        loads = dict(spec.defs)["LOADS"]
        new_spec = replace(spec,
                           defs=tuple((k, str(v).replace("in0_load(", "y_load(") if k == "LOADS" else v)
                                      for k, v in spec.defs),
                           buffers=spec.buffers[1:])
        assert "in0_load(" in str(loads)
        out[i] = replace(op, steps=(replace(step, shader=add_shader(new_spec), bindings=step.bindings[1:]),))
        target = root(src)
        for name, t in list(tensors.items()):  # the output and its views now live in the input's buffer
            if name == dst or t.alias_of == dst:
                tensors[name] = replace(t, alias_of=target)
        last[target] = max(last.get(dst, i), i)  # the buffer now lives as long as the output
        done += 1
    return out, tensors, {"in_place": done, **({"left": dict(skipped)} if skipped else {})}


def _output(step: Dispatch, spec: ShaderSpec) -> str:
    index = next(k for k, b in enumerate(spec.buffers) if b.name == "y")
    return step.bindings[index].tensor


def _refuse(step: Dispatch, spec: ShaderSpec, tensors: dict[str, TensorInfo], root: Callable[[str], str],
            last: dict[str, int], pinned: set[str | None], index: int) -> str:
    """Why this map cannot write into its input 0's buffer ("" when it can)."""
    if not spec.buffers or spec.buffers[0].name != "in0" or spec.buffers[0].vector:
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
