"""Built-in operators and the registry that collects them.

Each category module (elementwise, shape, indexing, ...) exposes `operators()`, a list of
(operator, since_version) pairs; `core_operator_registry` registers them all.
"""

from onyxia.operators import (
    attention,
    control,
    conv,
    conversion,
    datadep,
    decomposed,
    elementwise,
    functions,
    fused,
    generators,
    image,
    indexing,
    layout,
    linalg,
    matmul,
    normalization,
    onnx_attention,
    pooling,
    qlinear,
    quantize_linear,
    quantized,
    recurrent,
    reduction,
    resize,
    scatter,
    selection,
    sequences,
    shape,
    unique_nms,
)
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.registry import OperatorRegistry

# Registration order is kept: a later module's (domain, op_type, version) entry would win.
CATEGORY_MODULES = (elementwise, conversion, shape, layout, indexing, scatter, matmul, reduction, normalization,
                    attention, onnx_attention, quantized, conv, pooling, resize, image, selection, linalg, fused,
                    functions, generators, qlinear, decomposed, datadep, unique_nms, control, recurrent, sequences,
                    quantize_linear)


def core_operator_registry() -> OperatorRegistry:
    """A registry holding every built-in operator; register your own on top."""
    registry = OperatorRegistry()
    for module in CATEGORY_MODULES:
        for op, since in module.operators():
            registry.register(op, since)
    return registry


__all__ = ["FoldCtx", "InferenceCtx", "Operator", "OperatorRegistry", "PlanCtx", "core_operator_registry"]
