"""Memory planning: intermediates with disjoint lifetimes share buffers.

Used by planning after every op is planned. Two tensors may share a buffer only when their
byte sizes are the *same expression* (e.g. the per-layer activations of a transformer): with
symbolic sizes that is what keeps the shared buffer's capacity and reallocation exact for every
future value of the dimensions. Lifetimes are measured in steps; a tensor written at step i
reuses a buffer whose last reader ran strictly before i, so no dispatch reads and writes one buffer.
"""

from __future__ import annotations

from dataclasses import replace

from onyxia.plan import REUSABLE_KINDS, PlannedOp, TensorInfo


def plan_memory(operations: list[PlannedOp], tensors: dict[str, TensorInfo]) -> tuple[dict[str, TensorInfo], dict]:
    """Return the tensor table with `alias_of` set for buffer reuse, and a summary."""
    root = {n: (t.alias_of or n) for n, t in tensors.items()}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    pinned: set[str] = set()  # written outside the step order (WriteBuffer data lives from load time)
    for t in tensors.values():  # an output (or input) viewing an intermediate keeps it alive
        if t.alias_of is not None and t.kind not in REUSABLE_KINDS:
            pinned.add(t.alias_of)
    steps = [s for op in operations for s in op.steps]
    for i, step in enumerate(steps):
        for name, _writes in step.uses():
            r = root.get(name, name)
            first.setdefault(r, i)
            last[r] = i
            if step.written_at_load:
                pinned.add(r)
    candidates = sorted(
        (n for n, t in tensors.items()
         if t.alias_of is None and t.kind in REUSABLE_KINDS and t.data is None and n in first and n not in pinned),
        key=lambda n: first[n])
    free: dict[object, list[tuple[int, str]]] = {}  # size expr -> [(last use, buffer owner)]
    assigned: dict[str, str] = {}
    for name in candidates:
        key = tensors[name].nbytes
        pool = free.setdefault(key, [])
        owner = None
        for k, (end, buf) in enumerate(pool):
            if end < first[name]:
                owner = buf
                pool[k] = (last[name], buf)
                break
        if owner is None:
            pool.append((last[name], name))
        else:
            assigned[name] = owner
    if not assigned:
        return tensors, {"buffers": sum(1 for t in tensors.values() if t.alias_of is None), "shared": 0}
    out = dict(tensors)
    for name, owner in assigned.items():
        out[name] = replace(out[name], alias_of=owner)
    # Views of a tensor that now borrows a buffer must point at the buffer's owner.
    for name, t in out.items():
        if t.alias_of in assigned:
            out[name] = replace(t, alias_of=assigned[t.alias_of])
    buffers = sum(1 for t in out.values() if t.alias_of is None)
    return out, {"buffers": buffers, "shared": len(assigned)}
