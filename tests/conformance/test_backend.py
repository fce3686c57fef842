"""ONNX conformance: onnx's node test cases (BackendTest, OnnxBackendNodeModelTest) run on onyxia.

Every *_cpu node case runs except those in ledger.py, which are skipped with their reason; the
ledger is the public list of what onyxia does not support yet. Regenerate it with
`python benchmarks/conformance_report.py --write-ledger` (it also reports entries that started
passing). Comparison tolerances are onnx's own per case (default rtol=1e-3, atol=1e-7).

"CPU" is onnx's name for the default device; onyxia runs these on its wgpu adapter (see
onyxia/backend.py). The *_cuda copies and the other categories (simple, real, pytorch-*) are not
collected.
"""

from __future__ import annotations

import re
import unittest
import warnings

import onnx.backend.test
import pytest

import onyxia.backend
from tests.conformance.ledger import LEDGER

pytestmark = [pytest.mark.conformance, pytest.mark.gpu]

NODE_CLASS = "OnnxBackendNodeModelTest"
_CPU_CASE = re.compile(r"^test_.*_cpu$")
# One alternation per reason: a case is skipped with the reason of the first group matching it.
_LEDGER = [(reason, re.compile("|".join(f"(?:{p})" for p in patterns))) for reason, patterns in LEDGER.items()]


def ledger_reason(name: str) -> str | None:
    return next((reason for reason, pattern in _LEDGER if pattern.search(name)), None)


def _node_cases() -> type[unittest.TestCase]:
    with warnings.catch_warnings():  # onnx's case generators divide by zero on purpose
        warnings.simplefilter("ignore")
        backend_test = onnx.backend.test.BackendTest(onyxia.backend, __name__)
    backend_test.include(_CPU_CASE.pattern)
    cases = backend_test.test_cases[NODE_CLASS]
    for name in [n for n in vars(cases) if n.startswith("test_")]:
        if not _CPU_CASE.match(name):
            delattr(cases, name)  # *_cuda: not collected instead of 1884 "unsupported device" skips
        elif (reason := ledger_reason(name)) is not None:
            setattr(cases, name, unittest.skip(f"ledger: {reason}")(getattr(cases, name)))
    return cases


globals()[NODE_CLASS] = _node_cases()


# ---- the backend's own API (what the suite relies on, plus run_node and symbolic dims) ----------

def test_backend_devices() -> None:
    for name in ("CPU", "GPU", "gpu", "CPU:0", "GPU:0"):
        assert onyxia.backend.supports_device(name), name
    for name in ("CUDA", "GPU:1", "nonsense", "", None):
        assert not onyxia.backend.supports_device(name), name


def test_prepare_on_gpu_and_cpu_runs_on_onyxias_adapter() -> None:
    """onnxruntime's device names: "GPU" and "CPU" both mean the adapter onyxia picks."""
    import numpy as np
    from onnx import TensorProto, helper

    from onyxia.errors import DeviceError

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    x = np.float32([-1, 2, -3, 4])
    for device in ("GPU", "CPU"):
        rep = onyxia.backend.prepare(model, device)
        np.testing.assert_array_equal(rep.run([x])[0], np.maximum(x, 0))
        assert rep.session.executor.runtime is onyxia.backend.shared_runtime()
    np.testing.assert_array_equal(onyxia.backend.run_model(model, [x], "GPU")[0], np.maximum(x, 0))
    with pytest.raises(DeviceError, match="device 'CUDA' is not available \\(use 'GPU' or 'CPU'"):
        onyxia.backend.prepare(model, "CUDA")


def test_prepare_binds_symbolic_dims_from_feeds() -> None:
    import numpy as np
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 3])
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add", [x, y], [z])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    rep = onyxia.backend.prepare(model, "CPU")
    b = np.arange(3, dtype=np.float32)[None]
    for n in (2, 5):  # one rep, two sizes: the plan is patched, not recompiled
        a = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        (out,) = rep.run([a, b])
        np.testing.assert_allclose(out, a + b, rtol=1e-6)
    (out,) = rep.run({"x": a, "y": b})
    np.testing.assert_allclose(out, a + b, rtol=1e-6)
    assert onyxia.backend.prepare(model).session.executor is None  # compiled lazily, on first run


def test_run_node_and_errors_propagate() -> None:
    import numpy as np
    from onnx import helper

    from onyxia.errors import InputError, OnyxiaError

    a, b = np.float32([[1, 2], [3, 4]]), np.float32([[5, 6], [7, 8]])
    (out,) = onyxia.backend.run_node(helper.make_node("Mul", ["a", "b"], ["c"]), [a, b])
    np.testing.assert_array_equal(out, a * b)
    with pytest.raises(OnyxiaError, match="NoSuchOp"):
        onyxia.backend.run_node(helper.make_node("NoSuchOp", ["a"], ["c"]), [a])
    rep = onyxia.backend.prepare(helper.make_model(helper.make_graph(
        [helper.make_node("Mul", ["a", "b"], ["c"])], "mul",
        [helper.make_tensor_value_info(n, 1, [2, 2]) for n in "ab"], [helper.make_tensor_value_info("c", 1, [2, 2])]),
        opset_imports=[helper.make_opsetid("", 18)], ir_version=10))
    with pytest.raises(InputError, match="the model takes 2"):
        rep.run([a])
