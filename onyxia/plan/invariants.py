"""Invariants of a decoded plan at its own dims: step 3 of loading a plan file (onyxia/plan/check.py's
module doc lists all three). Every size and count evaluates to a non-negative integer, copies are
word-aligned and inside their tensors, a dispatch launches at most one workgroup per element of
the largest tensor it binds, and each constant's array has its TensorInfo's shape and dtype."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onyxia.errors import OnyxiaError
from onyxia.ir import dtypes
from onyxia.ir.shapes import evaluate_dim, numel
from onyxia.plan.check import _fail


def check_model(model: Any) -> None:
    """Invariants of a decoded CompiledModel at its own dims (see the module doc, step 3)."""
    dims = model.dims

    def value(v: object, where: str) -> int:
        try:
            out = evaluate_dim(v, dims)  # type: ignore[arg-type]
        except OnyxiaError as exc:
            raise _fail(where, str(exc)) from None
        if out < 0:
            raise _fail(where, f"is {out} at the plan's dims {dims}")
        return out

    for name, t in model.tensors.items():  # each extent: two negative ones make a positive size
        for j, extent in enumerate(t.shape):
            value(extent, f"tensor '{name}' shape[{j}]")
    nbytes = {name: value(t.nbytes, f"tensor '{name}' size") for name, t in model.tensors.items()}
    # Elements, not words: a thread or workgroup per element of a packed (8/16-bit) tensor.
    elements = {name: max(value(numel(t.shape), f"tensor '{name}' shape"), n // 4)
                for (name, t), n in zip(model.tensors.items(), nbytes.values())}
    for name, t in model.tensors.items():
        if t.data is None:
            continue
        want = dtypes.from_name(t.dtype).numpy
        if tuple(t.data.shape) != tuple(t.shape) or t.data.dtype != want:
            raise _fail(f"tensor '{name}' data", f"is {t.data.dtype}{list(t.data.shape)}, its TensorInfo "
                        f"says {want}{list(t.shape)}")
    for i, step in enumerate(model.steps):
        where = f"step {i}"
        for dispatch in step.dispatches():
            counts = [value(w, f"{where} workgroups[{j}]") for j, w in enumerate(dispatch.workgroups)]
            total = counts[0] * counts[1] * counts[2]
            most = max([elements[b.tensor] for b in dispatch.bindings] + [1])
            if total > most:
                raise _fail(f"{where} workgroups", f"{counts} launch {total} workgroups, more than the "
                            f"{most} elements of the largest tensor the dispatch binds")
        for kind, j, v in step.expressions():
            if kind in ("copy", "write"):
                value(v, f"{where} {kind}[{j}]")
        if step.tag == "copy":
            _check_copy(step, (step.size, step.src_offset, step.dst_offset), value, nbytes, f"{where} copy")
        elif step.tag == "loop":
            trips = value(step.trip_count, f"{where} trip_count")
            for j, c in enumerate((*step.enter, *step.leave)):
                at = f"{where} slice copy {j}"
                size, src_off, src_stride, dst_off, dst_stride = (value(v, at) for v in c.values())
                if src_stride % 4 or dst_stride % 4:
                    raise _fail(at, f"strides {src_stride}, {dst_stride} must be multiples of 4")
                if trips:  # the first iteration's copy; later ones move by the strides
                    _check_copy(c, (size, src_off, dst_off), value, nbytes, at)
        elif step.tag == "write" and 4 * len(step.data) > nbytes[step.dst]:
            raise _fail(f"{where} write", f"{len(step.data)} words into tensor '{step.dst}' of "
                        f"{nbytes[step.dst]} bytes")


def _check_copy(copy: Any, values: tuple, value: Callable[[object, str], int], nbytes: dict[str, int],
                where: str) -> None:
    """A buffer copy (size, src offset, dst offset) is word-aligned and inside both tensors."""
    size, src_off, dst_off = (value(v, where) for v in values)
    if size % 4 or src_off % 4 or dst_off % 4:
        raise _fail(where, f"size {size} and offsets {src_off}, {dst_off} must be multiples of 4")
    for tensor, offset in ((copy.src, src_off), (copy.dst, dst_off)):
        if offset + size > nbytes[tensor]:
            raise _fail(where, f"bytes {offset}..{offset + size} of tensor '{tensor}', which has {nbytes[tensor]}")
