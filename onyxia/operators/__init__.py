"""Built-in operators and the registry that collects them.

Operators live in one subpackage per family, named as the family's folder of shaders/
(operators/matmul/ plans shaders/matmul/). Each category module in them (matmul/matmul.py,
matmul/gemv.py, ...) that registers ops exposes `operators()`, a list of (operator, since_version)
pairs; `core_operator_registry` registers those of CATEGORY_MODULES.
"""

# One subpackage per family, named as its shaders/ folder; a module named as its family is imported
# under an alias, so that `onyxia.operators.<family>` stays the subpackage.
from onyxia.operators.attention import fused as fused_attention
from onyxia.operators.attention import gqa, onnx_attention, rotary
from onyxia.operators.base import FoldCtx, InferenceCtx, Operator, PlanCtx
from onyxia.operators.control import control as control_ops
from onyxia.operators.conv import col2im, deform, phases
from onyxia.operators.conv import conv as conv_ops
from onyxia.operators.conv import fused as conv_fused
from onyxia.operators.elementwise import conversion, fused
from onyxia.operators.elementwise import elementwise as elementwise_ops
from onyxia.operators.generators import generators as generator_ops
from onyxia.operators.generators import multinomial
from onyxia.operators.image import image as image_ops
from onyxia.operators.image import resize, roi
from onyxia.operators.indexing import indexing as indexing_ops
from onyxia.operators.indexing import layout, scatter
from onyxia.operators.linalg import linalg as linalg_ops
from onyxia.operators.matmul import matmul as matmul_ops
from onyxia.operators.normalization import lrn
from onyxia.operators.normalization import normalization as normalization_ops
from onyxia.operators.pooling import pooling as pooling_ops
from onyxia.operators.quantized import dynamic_matmul, matmul_bnb4, qlinear, quantize_linear
from onyxia.operators.quantized import quantized as quantized_ops
from onyxia.operators.reduction import losses, scan
from onyxia.operators.reduction import reduction as reduction_ops
from onyxia.operators.registry import OperatorRegistry
from onyxia.operators.rnn import recurrent
from onyxia.operators.selection import datadep, unique_nms
from onyxia.operators.selection import selection as selection_ops
from onyxia.operators.sequences import sequences as sequence_ops
from onyxia.operators.shape import shape as shape_ops
from onyxia.operators.spectral import spectral as spectral_ops
from onyxia.operators.spectral import windows

# Registration order is kept: a later module's (domain, op_type, version) entry would win.
CATEGORY_MODULES = (
    elementwise_ops, conversion, fused,  # elementwise/
    shape_ops, sequence_ops, control_ops,  # shape/, sequences/, control/
    layout, indexing_ops, scatter,  # indexing/
    matmul_ops,  # matmul/
    reduction_ops, scan, losses,  # reduction/
    normalization_ops, lrn,  # normalization/
    gqa, rotary, onnx_attention, fused_attention,  # attention/
    quantized_ops, qlinear, quantize_linear, matmul_bnb4, dynamic_matmul,  # quantized/
    conv_ops, conv_fused, deform, col2im, phases,  # conv/
    pooling_ops,  # pooling/
    resize, image_ops, roi,  # image/
    selection_ops, datadep, unique_nms,  # selection/
    linalg_ops,  # linalg/
    generator_ops, multinomial,  # generators/
    recurrent,  # rnn/
    spectral_ops, windows,  # spectral/
)


def core_operator_registry() -> OperatorRegistry:
    """A registry holding every built-in operator; register your own on top."""
    registry = OperatorRegistry()
    for module in CATEGORY_MODULES:
        for op, since in module.operators():
            registry.register(op, since)
    return registry


__all__ = ["FoldCtx", "InferenceCtx", "Operator", "OperatorRegistry", "PlanCtx", "core_operator_registry"]
