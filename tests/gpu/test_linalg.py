"""Einsum on the GPU against onnxruntime: matmul-like equations run on the matmul kernels, the
rest (transposes, reductions, diagonals, three operands) on the general strided kernel."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

from tests.builders.linalg import einsum_model
from tests.helpers import assert_matches_ort, compile_model, make_model, run_onyxia, run_ort

RNG = np.random.default_rng(0)


def feeds(shapes, dtype=np.float32):
    if np.issubdtype(dtype, np.integer):
        return {f"x{i}": RNG.integers(-3, 4, s).astype(dtype) for i, s in enumerate(shapes)}
    return {f"x{i}": RNG.standard_normal(s).astype(dtype) for i, s in enumerate(shapes)}


def kernels(model, dims=None) -> set[str]:
    return {spec.label for spec in compile_model(model, dims).shaders}


# (equation, operand shapes, the kernel family it must run on)
CASES = [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], "matmul"),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 8), (1, 2, 5, 8)], "matmul"),
    ("bhqk,bhkd->bhqd", [(2, 2, 3, 5), (2, 2, 5, 4)], "matmul"),
    ("ij,jk", [(3, 4), (4, 5)], "matmul"),
    ("ji,jk->ik", [(4, 3), (4, 5)], "matmul"),
    ("i,i", [(5,), (5,)], "matmul"),
    ("i,j->ij", [(3,), (4,)], "matmul"),
    ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 5)], "matmul"),
    ("bi,bi->b", [(3, 4), (3, 4)], "matmul"),
    ("bij,bkj->bik", [(2, 3, 4), (1, 5, 4)], "matmul"),
    ("ij->ji", [(3, 4)], "einsum"),
    ("abc->cba", [(2, 3, 4)], "einsum"),
    ("ij->i", [(3, 4)], "einsum"),
    ("ij->", [(3, 4)], "einsum"),
    ("ii->i", [(3, 3)], "einsum"),
    ("ii", [(3, 3)], "einsum"),
    ("...ii->...i", [(2, 3, 3)], "einsum"),
    ("bii->b", [(2, 3, 3)], "einsum"),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)], "einsum"),
    ("ij,ij->ij", [(3, 4), (3, 4)], "einsum"),
    ("bjk,bij->bik", [(2, 4, 5), (2, 3, 4)], "einsum"),
    ("ij,kj->", [(2, 3), (4, 3)], "einsum"),
    ("...j->...", [(2, 3, 4)], "einsum"),
]


@pytest.mark.parametrize("equation,shapes,family", CASES, ids=[c[0] for c in CASES])
def test_einsum_matches_ort(runtime, equation, shapes, family):
    model = einsum_model(equation, shapes)
    labels = kernels(model)
    assert (family == "einsum") == ("einsum" in labels), labels
    assert_matches_ort(runtime, model, feeds(shapes), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_einsum_integers(runtime, dtype):
    for equation, shapes in [("ij,jk->ik", [(3, 4), (4, 2)]), ("ij->ji", [(2, 5)]), ("ii->", [(4, 4)])]:
        assert_matches_ort(runtime, einsum_model(equation, shapes, dtype), feeds(shapes, dtype), rtol=0, atol=0)


def test_einsum_symbolic_dims(runtime):
    """Symbolic sizes stay params: the same plan serves every size without a recompile."""
    for equation, shapes in [("bqd,bkd->bqk", [("b", "s", 8), ("b", "s", 8)]), ("sd->ds", [("s", 8)])]:
        model = einsum_model(equation, shapes)
        used = {d for shape in shapes for d in shape if isinstance(d, str)}
        exe = runtime.load_model(compile_model(model, {k: v for k, v in {"b": 1, "s": 2}.items() if k in used}))
        for b, s in ((1, 2), (3, 9)):
            exe.update_dimensions({k: v for k, v in {"b": b, "s": s}.items() if k in used})
            concrete = [tuple({"b": b, "s": s}.get(d, d) for d in shape) for shape in shapes]
            f = feeds(concrete)
            np.testing.assert_allclose(exe.run(f)["y"], run_ort(model, f)[0], rtol=1e-4, atol=1e-5)
        assert exe.stats.recompiles == 0


def test_einsum_folds_constants(runtime):
    a, b = RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal((4,)).astype(np.float32)
    model = make_model([h.make_node("Einsum", ["a", "b"], ["y"], equation="ij,j->i")], [], ["y"], {"a": a, "b": b},
                       opset=12)
    assert not any(op.steps for op in compile_model(model).operations if op.op_type != "WriteBuffer")
    np.testing.assert_allclose(run_onyxia(runtime, model, {})[0], a @ b, rtol=1e-5)


