"""Built-in passes, one per file."""

from onyxia.compiler.passes.dce import DeadCodeEliminationPass
from onyxia.compiler.passes.folding import ConstantFoldingPass
from onyxia.compiler.passes.fusion import ElementwiseFusionPass
from onyxia.compiler.passes.inference import ShapeInferencePass
from onyxia.compiler.passes.planning import PlanningPass
from onyxia.compiler.passes.resolution import SymbolicResolutionPass


def default_optimization_passes() -> list:
    """The Optimization-stage passes CompilerPipeline adds unless optimize=False.

    Operator-specific passes live beside their operators and are imported here lazily
    (operators import the compiler's Pass type).
    """
    from onyxia.operators.quantized import PackNBitsWeightsPass

    return [DeadCodeEliminationPass(), PackNBitsWeightsPass(), ElementwiseFusionPass()]


__all__ = ["ConstantFoldingPass", "DeadCodeEliminationPass", "ElementwiseFusionPass", "PlanningPass", "ShapeInferencePass",
           "SymbolicResolutionPass", "default_optimization_passes"]
