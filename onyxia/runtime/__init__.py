"""The runtime: adapter choice, the PlanExecutor and device tensors (it never sees the IR)."""

from onyxia.runtime.device import AdapterInfo, Runtime, list_adapters
from onyxia.runtime.executor import ExecutorStats, PlanExecutor
from onyxia.runtime.tensor import DeviceTensor

__all__ = ["AdapterInfo", "DeviceTensor", "ExecutorStats", "PlanExecutor", "Runtime", "list_adapters"]
