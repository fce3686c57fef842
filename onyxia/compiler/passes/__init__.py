"""Built-in passes, one Pass class per file (planning, which lowers the graph to a plan rather
than rewriting it, and its helpers are in compiler/lowering/)."""

from onyxia.compiler.passes.attention_fusion import AttentionFusionPass
from onyxia.compiler.passes.channel_layernorm import ChannelLayerNormPass
from onyxia.compiler.passes.channel_scale import ChannelScalePass
from onyxia.compiler.passes.conv_batchnorm import ConvBatchNormPass
from onyxia.compiler.passes.conv_weights import ConvWeightsPass
from onyxia.compiler.passes.dce import DeadCodeEliminationPass
from onyxia.compiler.passes.div_mul import DivMulFusionPass
from onyxia.compiler.passes.dynamic_quant_fusion import DynamicQuantFusionPass
from onyxia.compiler.passes.epilogue_fusion import EpilogueFusionPass
from onyxia.compiler.passes.expansion import FunctionExpansionPass
from onyxia.compiler.passes.folding import ConstantFoldingPass
from onyxia.compiler.passes.fusion import ElementwiseFusionPass
from onyxia.compiler.passes.if_inlining import IfInliningPass
from onyxia.compiler.passes.inference import ShapeInferencePass
from onyxia.compiler.passes.nbits_tiles import NBitsTilesPass
from onyxia.compiler.passes.pooled_conv import PooledConvWeightsPass
from onyxia.compiler.passes.quantize_sharing import SharedQuantizationPass
from onyxia.compiler.passes.resolution import SymbolicResolutionPass
from onyxia.compiler.passes.rms_norm_fusion import RmsNormFusionPass
from onyxia.compiler.passes.sequences import SequenceLoweringPass
from onyxia.compiler.passes.split_large import SplitLargeTensorsPass
from onyxia.compiler.passes.upsample_conv import UpsampleConvPass
from onyxia.compiler.passes.weight_panels import WeightPanelsPass


def default_optimization_passes() -> list:
    """The passes CompilerPipeline adds unless optimize=False: Optimization-stage ones, and
    DynamicQuantFusionPass, which must see its chain before function expansion decomposes it."""
    return [DynamicQuantFusionPass(), ConvBatchNormPass(), UpsampleConvPass(), DivMulFusionPass(), RmsNormFusionPass(),
            ChannelLayerNormPass(), ChannelScalePass(), AttentionFusionPass(), DeadCodeEliminationPass(),
            SplitLargeTensorsPass(),
            SharedQuantizationPass(), ElementwiseFusionPass(), EpilogueFusionPass(), PooledConvWeightsPass(),
            WeightPanelsPass(), ConvWeightsPass(), NBitsTilesPass()]


__all__ = ["AttentionFusionPass", "ChannelLayerNormPass", "ChannelScalePass", "ConstantFoldingPass",
           "ConvBatchNormPass", "ConvWeightsPass",
           "DeadCodeEliminationPass", "DivMulFusionPass", "DynamicQuantFusionPass", "EpilogueFusionPass",
           "ElementwiseFusionPass", "FunctionExpansionPass", "IfInliningPass",
           "NBitsTilesPass", "PooledConvWeightsPass", "RmsNormFusionPass", "SequenceLoweringPass",
           "SharedQuantizationPass",
           "ShapeInferencePass", "SplitLargeTensorsPass", "SymbolicResolutionPass", "UpsampleConvPass",
           "WeightPanelsPass",
           "default_optimization_passes"]
