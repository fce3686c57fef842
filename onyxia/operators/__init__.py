"""Built-in operators and the registry that collects them.

Each category module (elementwise, shape, indexing, ...) exposes `operators()`, a list of
(operator, since_version) pairs; `core_operator_registry` registers them all.
"""

from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.registry import OperatorRegistry

CATEGORY_MODULES = ("elementwise", "conversion", "shape", "layout", "indexing", "matmul", "reduction", "normalization",
                    "attention", "quantized", "conv", "pooling", "image", "selection", "linalg", "fused")


def core_operator_registry() -> OperatorRegistry:
    """A registry holding every built-in operator; register your own on top."""
    import importlib

    registry = OperatorRegistry()
    for name in CATEGORY_MODULES:
        module = importlib.import_module(f"onyxia.operators.{name}")
        for op, since in module.operators():
            registry.register(op, since)
    return registry


__all__ = ["FoldCtx", "InferenceCtx", "Operator", "OperatorRegistry", "PlanCtx", "core_operator_registry"]
