"""The runtime: adapter choice, the PlanExecutor, device tensors and InferenceSession."""

from onyxia.runtime.device import AdapterInfo, Runtime, list_adapters
from onyxia.runtime.executor import ExecutorStats, PlanExecutor
from onyxia.runtime.tensor import DeviceTensor

__all__ = ["AdapterInfo", "DeviceTensor", "ExecutorStats", "PlanExecutor", "Runtime", "list_adapters"]

from onyxia.runtime.session import InferenceSession, NodeArg  # noqa: E402

__all__ += ["InferenceSession", "NodeArg"]
