"""onnx.backend.base.Backend for onyxia, so onnx's conformance suite (BackendTest) can drive it.

    import onyxia.backend as backend
    rep = backend.prepare(model)          # an OnyxiaBackendRep
    outputs = rep.run([x, y])             # tuple of numpy arrays, in the graph's output order

Devices: onyxia always runs on a WebGPU adapter, the one the Runtime picks (discrete > integrated >
CPU; ONYXIA_ADAPTER overrides; `prepare(..., runtime=Runtime(adapter=...))` names one). Two device
names select it, the two onnxruntime's backend uses:
- "GPU": onyxia's adapter, the natural name for it (a WebGPU device). It does not insist on
  GPU hardware: where the only adapter is lavapipe (a CPU Vulkan driver, as in CI), that is it.
- "CPU": onnx's default device name (Backend's default argument, BackendTest's *_cpu cases), so
  that code written for any onnx backend runs unchanged; it also means onyxia's adapter, not the
  host CPU.
`supports_device` is True for both (a ":0" index is accepted, as onnx's Device parses it) and
False for anything else ("CUDA" included, so the suite's *_cuda copies skip instead of running
the same thing twice).

All reps share ONE Runtime (wgpu device): opening a device costs far more than a small node test.
Pass `runtime=` to `prepare` to use your own. OnyxiaErrors propagate unchanged, so a test fails
with onyxia's message; if the device itself fails (DeviceError), the shared Runtime is dropped
and the next `prepare` opens a fresh one, so one lost device does not fail every later test.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from onyxia.errors import DeviceError, InputError
from onyxia.onnx import DEFAULT_OPSET
from onyxia.runtime.device import Runtime
from onyxia.session import InferenceSession

_DEVICES = ("GPU", "CPU")  # see the module docstring: both select onyxia's adapter
_runtime_lock = threading.Lock()
_shared = None  # the process-wide Runtime, opened on first use


def shared_runtime():
    """The Runtime every rep uses unless given another (opened lazily, once per process)."""
    global _shared
    with _runtime_lock:
        if _shared is None:
            _shared = Runtime()
        return _shared


def _drop_shared_runtime(runtime) -> None:
    """Forget a Runtime whose device failed, so the next prepare opens a new one."""
    global _shared
    with _runtime_lock:
        if _shared is runtime:
            _shared = None


class OnyxiaBackendRep(BackendRep):
    """A prepared model: `run(inputs)` takes a list (graph input order), a dict or one array."""

    def __init__(self, session: InferenceSession, runtime):
        self.session = session
        self._runtime = runtime
        self.input_names = [a.name for a in session.get_inputs()]
        self.output_names = [a.name for a in session.get_outputs()]

    def _feeds(self, inputs: Any) -> dict[str, Any]:
        if isinstance(inputs, Mapping):
            return dict(inputs)
        if isinstance(inputs, np.ndarray):  # a lone array for a one-input model
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) != len(self.input_names):
            raise InputError(f"got {len(inputs)} inputs, the model takes {len(self.input_names)} "
                             f"({', '.join(self.input_names) or 'none'})")
        return dict(zip(self.input_names, inputs))

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        try:
            return tuple(self.session.run(None, self._feeds(inputs)))
        except DeviceError:
            _drop_shared_runtime(self._runtime)
            raise


class OnyxiaBackend(Backend):
    """onnx's Backend interface over InferenceSession on a shared Runtime."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto | str | bytes, device: str = "CPU", *, runtime=None,
                dims: Mapping[str, int] | None = None, **kwargs: Any) -> OnyxiaBackendRep:
        """Load `model`; symbolic input dims are bound from the feeds at each run (InferenceSession).

        Extra kwargs from the test runner (rtol, atol) are accepted and ignored.
        """
        if not cls.supports_device(device):
            raise DeviceError(f"onyxia runs on its wgpu adapter; device '{device}' is not available "
                              "(use 'GPU' or 'CPU': both mean that adapter)")
        runtime = runtime if runtime is not None else shared_runtime()
        return OnyxiaBackendRep(InferenceSession(model, runtime=runtime, dims=dims), runtime)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Sequence[np.ndarray], device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run one node: wrap it in a model whose inputs are the node's (non-empty) inputs."""
        opset = kwargs.pop("opset_version", None)
        names = [n for n in node.input if n]
        graph_inputs = [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype),
                                                          list(np.shape(x)))
                        for n, x in zip(names, inputs)]
        if outputs_info is not None:
            graph_outputs = [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dt)),
                                                               list(shape))
                             for n, (dt, shape) in zip(node.output, outputs_info)]
        else:
            graph_outputs = [onnx.helper.make_empty_tensor_value_info(n) for n in node.output if n]
        # A model must import the opset its node uses (onnxruntime and the checker refuse it
        # otherwise); without one given, the loader's default (contrib domains start at 1).
        default = DEFAULT_OPSET if node.domain in ("", "ai.onnx") else 1
        opsets = [onnx.helper.make_opsetid(node.domain, opset or default)]
        model = onnx.helper.make_model(onnx.helper.make_graph([node], f"{node.op_type}_node", graph_inputs,
                                                              graph_outputs), opset_imports=opsets)
        return cls.run_model(model, list(inputs)[:len(names)], device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """True for "GPU" and "CPU" (optionally with ":0"): both stand for onyxia's wgpu adapter."""
        if not isinstance(device, str):
            return False
        name, _, index = device.partition(":")
        return name.upper() in _DEVICES and index in ("", "0")


prepare = OnyxiaBackend.prepare
run_model = OnyxiaBackend.run_model
run_node = OnyxiaBackend.run_node
supports_device = OnyxiaBackend.supports_device
is_compatible = OnyxiaBackend.is_compatible
