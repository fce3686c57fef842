"""Shared by tests/unit/test_gemv_heuristic.py and tests/unit/test_gemm_variants.py:
which kernels a plan runs."""

from __future__ import annotations


def running(exe) -> list[str]:
    """(shader label, ROWS def) of every dispatch whose grid is not empty now."""
    out = []
    for d in exe.dispatch_commands():
        if all(d.workgroups):
            spec = exe.model.shaders[d.shader]
            rows = dict(spec.defs).get("ROWS")
            out.append(spec.label.removeprefix("matmul/") + (f"/{rows}" if rows else ""))
    return out
