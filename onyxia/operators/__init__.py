"""Built-in operators and the registry that collects them."""

from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.registry import OperatorRegistry


def core_operator_registry() -> OperatorRegistry:
    """A registry holding every built-in operator; register your own on top."""
    from onyxia.operators import conversion, elementwise, indexing, matmul, shape

    registry = OperatorRegistry()
    for op, since in elementwise.elementwise_operators():
        registry.register(op, since)
    for op in (shape.ShapeOp(), shape.Reshape(), shape.Unsqueeze(), shape.Constant(), indexing.Gather(),
               indexing.Concat(), conversion.Cast(), matmul.MatMul()):
        registry.register(op)
    return registry


__all__ = ["FoldCtx", "InferenceCtx", "Operator", "OperatorRegistry", "PlanCtx", "core_operator_registry"]
