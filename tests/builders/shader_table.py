"""The shader validation table of tests/gpu/test_shader_validation.py: BUILDERS maps each
(domain, op_type) to a function returning small models that exercise it."""

from __future__ import annotations

from types import ModuleType

import numpy as np
from onnx import helper as h

from onyxia.operators import core_operator_registry
from tests.builders import (
    control_flow,
    conv,
    conv_epilogue,
    datadep,
    deform_conv,
    dynamic_quant,
    encoder_attention,
    epilogue_fusion,
    functions,
    generators,
    image,
    linalg,
    matmul_epilogue,
    normalization_extra,
    onnx_attention,
    pooling,
    qlinear,
    quantize_sharing,
    quantized,
    recurrent,
    roi,
    selection,
    sequences,
    small_ops,
    spectral,
    storage,
    upsample_conv,
)
from tests.builders.shader_cases import (
    BOOL,
    F32,
    I32,
    I64,
    MS,
    U8,
    U32,
    Builder,
    Case,
    _bitshift,
    _cast,
    _clip,
    _cumprod,
    _cumsum,
    _gelu,
    _mod,
    _where,
    arg_reduce,
    binary,
    case,
    reduce,
    softmax,
    unary,
    variadic,
)
from tests.builders.shader_ops import (
    _cast_like,
    _concat,
    _constant,
    _constant_of_shape,
    _dropout,
    _expand,
    _flatten,
    _gather,
    _gather_block_quantized,
    _gather_elements,
    _gather_nd,
    _gemm,
    _gqa,
    _layer_norm,
    _matmul,
    _matmul_nbits,
    _pad,
    _range,
    _rms_norm,
    _rotary,
    _scatter,
    _scatter_nd,
    _shape_chain,
    _simplified_ln,
    _size,
    _skip_ln,
    _slice,
    _split,
    _squeeze,
    _tile,
    _transpose,
    _trilu,
)

# ---- family builders ------------------------------------------------------------------------


# ---- single-op builders ----------------------------------------------------------------------


# ---- the table ----------------------------------------------------------------------------

FLOAT_UNARY = ["Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Cos", "Cosh", "Erf", "Exp",
               "Floor", "Log", "Neg", "Reciprocal", "Relu", "Round", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus",
               "Softsign", "Sqrt", "Tan", "Tanh", "Mish", "HardSwish", "IsNaN", "IsInf", "Identity", "Selu",
               "ThresholdedRelu", "Shrink"]


SIGNED_UNARY = {"Abs", "Neg", "Sign", "Relu"}


def _fused() -> list[Case]:
    """A chain the default ElementwiseFusionPass merges into one FusedElementwise node: broadcast
    inputs, attribute params from two members (renamed apart) and a value used twice."""
    nodes = [h.make_node("Add", ["x", "b"], ["t0"]), h.make_node("LeakyRelu", ["t0"], ["t1"], alpha=0.1),
             h.make_node("Mul", ["t1", "t0"], ["t2"]), h.make_node("LeakyRelu", ["t2"], ["t3"], alpha=0.3),
             h.make_node("Sigmoid", ["t3"], ["y"])]
    return case(nodes, [("x", F32, ["n", 4]), ("b", F32, [4])], ["y"])


def _from(module: ModuleType, *ops: str) -> Builder:
    """Rows for ops whose builders module (tests/builders/, beside their test module) lists
    validation models (model, dims) covering them."""
    def build() -> list[Case]:
        models = module.validation_models()
        cases = [Case(m, d, ((), tuple(d)) if d else ((),)) for m, d in models
                 if not ops or any(n.op_type in ops for n in m.graph.node)]
        assert cases, f"{module.__name__}.validation_models() has no model using {ops}"
        return cases
    return build


BUILDERS: dict[tuple[str, str], Builder] = {
    **{("", op): unary(op, F32, I64, I32) if op in SIGNED_UNARY else unary(op, F32) for op in FLOAT_UNARY},
    ("", "Celu"): unary("Celu", F32, alpha=0.7),
    ("", "Swish"): unary("Swish", F32, opset=24, alpha=0.5),
    ("", "Elu"): unary("Elu", F32, alpha=0.7),
    ("", "HardSigmoid"): unary("HardSigmoid", F32, alpha=0.3, beta=0.4),
    ("", "LeakyRelu"): unary("LeakyRelu", F32, alpha=0.05),
    ("", "Not"): unary("Not", BOOL),
    ("", "BitwiseNot"): unary("BitwiseNot", I32, U8, I64),
    ("", "Gelu"): _gelu,
    ("", "Clip"): _clip,
    ("", "Cast"): _cast,
    **{("", op): binary(op, F32, I64, I32) for op in ("Add", "Sub", "Mul", "Div")},
    ("", "Pow"): binary("Pow", F32),
    ("", "PRelu"): binary("PRelu", F32, I64, I32, U32),
    ("", "Mod"): _mod,
    ("", "BitShift"): _bitshift,
    **{("", op): binary(op, I32, U8, I64) for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor")},
    **{("", op): binary(op, BOOL) for op in ("And", "Or", "Xor")},
    **{("", op): binary(op, F32, I64, BOOL if op == "Equal" else F32)
       for op in ("Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual")},
    **{("", op): variadic(op, F32, I64) for op in ("Max", "Min")},
    **{("", op): variadic(op, F32) for op in ("Sum", "Mean")},
    ("", "Where"): _where,
    **{("", op): reduce(op, F32) for op in ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMean",
                                            "ReduceSumSquare")},
    **{("", op): reduce(op, F32, I64) for op in ("ReduceMax", "ReduceMin", "ReduceProd", "ReduceSum")},
    ("", "ArgMax"): arg_reduce("ArgMax"),
    ("", "ArgMin"): arg_reduce("ArgMin"),
    ("", "CumSum"): _cumsum,
    ("", "CumProd"): _cumprod,
    ("", "Softmax"): softmax("Softmax"),
    ("", "LogSoftmax"): softmax("LogSoftmax"),
    ("", "LayerNormalization"): _layer_norm,
    ("", "SimplifiedLayerNormalization"): _simplified_ln(""),
    ("", "RMSNormalization"): _rms_norm,
    (MS, "SimplifiedLayerNormalization"): _simplified_ln(MS),
    (MS, "SkipLayerNormalization"): _skip_ln("SkipLayerNormalization", with_beta=True),
    (MS, "SkipSimplifiedLayerNormalization"): _skip_ln("SkipSimplifiedLayerNormalization", with_beta=False),
    ("", "MatMul"): _matmul,
    ("", "Gemm"): _gemm,
    ("", "Gather"): _gather,
    ("", "GatherElements"): _gather_elements,
    ("", "GatherND"): _gather_nd,
    ("", "Scatter"): _scatter("Scatter", opset=10),
    ("", "ScatterElements"): _scatter("ScatterElements", reductions=("none", "add", "mul", "max", "min")),
    ("", "ScatterND"): _scatter_nd,
    ("", "Slice"): _slice,
    ("", "Trilu"): _trilu,
    ("", "Reshape"): lambda: case([h.make_node("Reshape", ["x", "s"], ["y"])], [("x", F32, ["n", 4])], ["y"],
                                  {"s": np.array([-1], I64)}),
    ("", "Unsqueeze"): lambda: case([h.make_node("Unsqueeze", ["x", "a"], ["y"])], [("x", F32, ["n", 4])], ["y"],
                                    {"a": np.array([0, -1], I64)}),
    ("", "Shape"): lambda: _shape_chain([], {}, outputs=("s",)),
    ("", "Constant"): _constant,
    ("", "ConstantOfShape"): _constant_of_shape,
    ("", "Expand"): _expand,
    ("", "Range"): _range,
    ("", "Tile"): _tile,
    ("", "CastLike"): _cast_like,
    ("", "Concat"): _concat,
    ("", "Dropout"): _dropout,
    ("", "Flatten"): _flatten,
    ("", "Pad"): _pad,
    ("", "Size"): _size,
    ("", "Split"): _split,
    ("", "Squeeze"): _squeeze,
    ("", "Transpose"): _transpose,
    (MS, "MatMulNBits"): _matmul_nbits,
    (MS, "GatherBlockQuantized"): _gather_block_quantized,
    (MS, "MatMulBnb4"): _from(quantized, "MatMulBnb4"),
    (MS, "RotaryEmbedding"): _rotary,
    (MS, "GroupQueryAttention"): _gqa,
    ("onyxia", "FusedElementwise"): _fused,
    ("onyxia", "FusedAttention"): _from(encoder_attention, "Softmax"),  # made by AttentionFusionPass
    # Made by SharedQuantizationPass / EpilogueFusionPass from MatMulNBits graphs.
    ("onyxia", "QuantizeQ8"): _from(quantize_sharing),
    ("onyxia", "RmsNormQ8"): _from(quantize_sharing),
    ("onyxia", "MatMulNBitsShared"): lambda: _from(quantize_sharing)() + _from(epilogue_fusion)(),
    ("onyxia", "MatMulEpilogue"): _from(matmul_epilogue, "MatMul"),
    # Made by DynamicQuantFusionPass from DynamicQuantizeLinear -> MatMulInteger chains.
    ("onyxia", "DynamicQuantMatMul"): _from(dynamic_quant),
    ("onyxia", "DynamicRange"): _from(dynamic_quant),
    ("onyxia", "MatMulBnb4"): _from(quantized, "MatMulBnb4"),  # EpilogueFusionPass's
    ("onyxia", "GemmEpilogue"): _from(matmul_epilogue, "Gemm"),
    ("onyxia", "ConvEpilogue"): _from(conv_epilogue, "Conv"),
    ("onyxia", "ConvTransposeEpilogue"): _from(conv_epilogue, "ConvTranspose"),
    ("onyxia", "PhaseInterleave"): _from(upsample_conv),  # made by UpsampleConvPass
    ("", "Attention"): _from(onnx_attention),
    ("", "TopK"): _from(selection, "TopK"),
    ("", "Hardmax"): _from(selection, "Hardmax"),
    ("", "OneHot"): _from(selection, "OneHot"),
    ("", "If"): _from(control_flow, "If"),
    ("", "Loop"): _from(control_flow, "Loop"),
    ("", "Scan"): _from(control_flow, "Scan"),
    ("", "LinearAttention"): _from(control_flow, "LinearAttention"),
    ("", "RNN"): _from(recurrent, "RNN"),
    ("", "GRU"): _from(recurrent, "GRU"),
    ("", "LSTM"): _from(recurrent, "LSTM"),
    ("", "SequenceConstruct"): _from(sequences, "SequenceConstruct"),
    ("", "SequenceEmpty"): _from(sequences, "SequenceEmpty"),
    ("", "SequenceInsert"): _from(sequences, "SequenceInsert"),
    ("", "SequenceErase"): _from(sequences, "SequenceErase"),
    ("", "SequenceAt"): _from(sequences, "SequenceAt"),
    ("", "SequenceLength"): _from(sequences, "SequenceLength"),
    ("", "SplitToSequence"): _from(sequences, "SplitToSequence"),
    ("", "ConcatFromSequence"): _from(sequences, "ConcatFromSequence"),
    ("", "SequenceMap"): _from(sequences, "SequenceMap"),
    ("", "Optional"): _from(sequences, "Optional"),
    ("", "OptionalHasElement"): _from(sequences, "OptionalHasElement"),
    ("", "OptionalGetElement"): _from(sequences, "OptionalGetElement"),
    ("", "NonZero"): _from(datadep, "NonZero"),
    ("", "Compress"): _from(datadep, "Compress"),
    ("", "Unique"): _from(datadep, "Unique"),
    ("", "NonMaxSuppression"): _from(datadep, "NonMaxSuppression"),
    ("", "Einsum"): _from(linalg),
    ("", "DFT"): _from(spectral, "DFT"),
    ("", "RoiAlign"): _from(roi, "RoiAlign"),
    ("", "MaxRoiPool"): _from(roi, "MaxRoiPool"),
    ("", "DeformConv"): _from(deform_conv, "DeformConv"),
    ("", "STFT"): _from(spectral, "STFT"),
    ("", "Conv"): _from(conv, "Conv"),
    ("", "ConvTranspose"): _from(conv, "ConvTranspose"),
    ("", "CausalConvWithState"): _from(conv, "CausalConvWithState"),
    ("", "AveragePool"): _from(pooling, "AveragePool"),
    ("", "GlobalAveragePool"): _from(pooling, "GlobalAveragePool"),
    ("", "GlobalLpPool"): _from(pooling, "GlobalLpPool"),
    ("", "GlobalMaxPool"): _from(pooling, "GlobalMaxPool"),
    ("", "LpPool"): _from(pooling, "LpPool"),
    ("", "MaxPool"): _from(pooling, "MaxPool"),
    ("", "MaxUnpool"): _from(pooling, "MaxUnpool"),
    ("", "AffineGrid"): _from(image, "AffineGrid"),
    ("", "DepthToSpace"): _from(image, "DepthToSpace"),
    ("", "GridSample"): _from(image, "GridSample"),
    ("", "Resize"): _from(image, "Resize"),
    ("", "SpaceToDepth"): _from(image, "SpaceToDepth"),
    ("", "Upsample"): _from(image, "Upsample"),
    ("", "BatchNormalization"): _from(normalization_extra, "BatchNormalization"),
    ("", "GroupNormalization"): _from(normalization_extra, "GroupNormalization"),
    ("", "InstanceNormalization"): _from(normalization_extra, "InstanceNormalization"),
    ("", "LpNormalization"): _from(normalization_extra, "LpNormalization"),
    ("", "MeanVarianceNormalization"): _from(normalization_extra, "MeanVarianceNormalization"),
    **{(d, op): _from(functions, op) for d, op in (
        ("", "NegativeLogLikelihoodLoss"), ("", "SoftmaxCrossEntropyLoss"), ("", "HannWindow"), ("", "HammingWindow"),
        ("", "BlackmanWindow"), ("", "CenterCropPad"), ("", "RotaryEmbedding"), ("", "SwiGLU"),
        ("ai.onnx.preview", "FlexAttention"))},
    **{("", op): _from(generators, op) for op in (
        "EyeLike", "RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli", "BitCast")},
    **{(d, op): _from(qlinear, op) for d, op in (
        ("", "MatMulInteger"), ("", "QLinearMatMul"), ("", "ConvInteger"), ("", "QLinearConv"),
        ("", "DynamicQuantizeLinear"), (MS, "QLinearConv"),
        (MS, "MatMulIntegerToFloat"), (MS, "DynamicQuantizeMatMul"), (MS, "QGemm"), (MS, "QLinearAdd"),
        (MS, "QLinearMul"), (MS, "QLinearSigmoid"), (MS, "QLinearLeakyRelu"), (MS, "QLinearSoftmax"),
        (MS, "QLinearAveragePool"), (MS, "QLinearGlobalAveragePool"), (MS, "QLinearConcat"))},
    **{("", op): _from(small_ops, op) for op in (
        "ReverseSequence", "TensorScatter", "LRN", "Col2Im", "Det", "Multinomial", "MelWeightMatrix")},
    **{(d, op): _from(storage, op) for d in ("", MS) for op in ("QuantizeLinear", "DequantizeLinear")},
}
# Rows for ops not (yet) in the registry are harmless: only registered ops are exercised.


def registered_ops() -> list[tuple[str, str]]:
    return sorted(core_operator_registry())
