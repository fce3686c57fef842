"""The ledger reasons of the conformance report (benchmarks/conformance_report.py): one reason per
failing ONNX node case, decided from the model where no implementation could make it pass
(training and ai.onnx.ml domains, non-tensor values, dtypes with no GPU representation), from
the cases onyxia deliberately computes otherwise (DISPUTED, each pinned by a GPU test), or from
the exception the case raised."""

from __future__ import annotations

import re
from typing import Any

# Element types with a device representation (onyxia/ir/dtypes.py's storage codecs).
DEVICE_DTYPES = frozenset(
    "float32 float16 bfloat16 float8e4m3fn float8e4m3fnuz float8e5m2 float8e5m2fnuz float8e8m0 "
    "float4e2m1 int32 int64 bool int8 uint8 int16 uint16 uint32 uint64 int4 uint4 int2 uint2".split())

# Reasons decided from the model alone: these cases cannot pass whatever gets implemented next.
DOMAIN_REASONS = {
    "ai.onnx.preview.training": "training operators (ai.onnx.preview.training) are out of scope for an "
                                "inference runtime",
    "ai.onnx.ml": "ai.onnx.ml (classical ML) operators are not implemented",
}
NON_TENSOR_REASON = "map values: onyxia carries tensors, sequences and optionals only"
RUNNER_REASON = ("onnx's test runner cannot compare this output: its assert_similar_outputs calls len() on "
                 "the 0-d tensor a sequence holds (onyxia returns the reference's values)")
STRING_REASON = "string tensors have no GPU representation"
FLOAT64_REASON = "float64 has no GPU representation (no f64 storage on the device)"
# Cases whose failure the exception alone would misdescribe, with the reason that applies.
CASE_REASONS = {
    "test_attention_4d_causal_fp16_expanded":
        "float16 rounding: onyxia computes each op in f32 and rounds once per stored tensor; the expected "
        "output rounds every numpy float16 step (1 ulp apart, just over the case's rtol)",
}


# Seeded random ops: any generator other than numpy's draws other numbers (ONNX fixes none).
RANDOM_OPS = frozenset("Bernoulli RandomUniform RandomNormal RandomUniformLike RandomNormalLike Multinomial".split())
RANDOM_REASON = ("random values: onyxia's counter-based generator is not numpy's (the distribution is tested in "
                 "tests/gpu/test_generators.py)")


# Cases whose expected values onyxia deliberately does not reproduce: onnx.reference where
# onnxruntime (and the exporters' own frameworks) compute otherwise, or numpy's own rounding
# where the exact value differs by more than the case's tolerance. A GPU test pins each choice.
DISPUTED = {
    **dict.fromkeys(("test_resize_downsample_scales_cubic_align_corners",
                     "test_resize_downsample_scales_linear_align_corners"),
                    "Resize: onnx.reference divides align_corners by the fractional width scale * length (2.4 for "
                    "0.6 x 4); onyxia divides by the integer output length, as the spec's formula, onnxruntime "
                    "and PyTorch do (tests/gpu/test_image.py)"),
    "test_maxunpool_export_with_output_shape":
        "MaxUnpool: the case's indices address the inferred 4x4 output, padded to output_shape 5x5 after; "
        "onyxia reads them as flat indices into output_shape, as onnxruntime does and as MaxPool of a 5x5 input "
        "produces them (tests/gpu/test_pooling.py)",
    **dict.fromkeys(("test_dft_inverse", "test_dft_inverse_opset19"),
                    "DFT: the expected values are numpy 2's complex64 FFT, whose Nyquist bins carry an imaginary "
                    "part of 1.9e-7 where the exact value is 0 (float64: 7e-16); onyxia's is exactly 0, and the "
                    "case's atol is 1e-7 (tests/gpu/test_spectral.py)"),
}

def dtype_reason(dtype: str) -> str:
    if dtype == "float64":
        return FLOAT64_REASON
    if dtype == "string":
        return STRING_REASON
    return f"{dtype} has no GPU representation"


def generic(message: str) -> str:
    """A message with the names of model elements blanked, so equal problems group together."""
    return re.sub(r"\b(nodes?|tensor|input|output|initializer|attribute) '[^']*'", r"\1 '…'", message)


def reason(info: Any, result: dict[str, Any]) -> str:
    """The one ledger reason for a failing case (`info`: conformance_report.CaseInfo)."""
    if info.name in CASE_REASONS:
        return CASE_REASONS[info.name]
    for domain, text in DOMAIN_REASONS.items():
        if domain in info.domains:
            return text
    io = info.io_types
    if "map" in io:
        return NON_TENSOR_REASON
    for dtype in ("string", "float64", *sorted(io - DEVICE_DTYPES - {"string", "float64", "sequence", "optional"})):
        if dtype in io:
            return dtype_reason(dtype)
    kind, key = result["kind"], result.get("key")
    op = info.principal
    if kind == "op":
        return f"not implemented yet: {', '.join(key)}"
    if kind == "dtype":
        return dtype_reason(key)
    if kind == "load":
        detail = result["detail"]
        if "onyxia takes tensors, sequences and optionals" in detail:
            return NON_TENSOR_REASON
        m = re.search(r"element type (\w+) is not supported", detail)
        if m:
            return dtype_reason({"DOUBLE": "float64", "STRING": "string"}.get(m.group(1), m.group(1).lower()))
        return f"the model does not load: {generic(detail.split(': ', 1)[-1])}"
    if kind == "mismatch":
        if info.name in DISPUTED and key == "values":
            return DISPUTED[info.name]
        if op in RANDOM_OPS and key == "values":
            return RANDOM_REASON
        return f"wrong {key} vs the onnx reference (rtol/atol of the case): {op}"
    if kind == "onyxia" and key == "ShapeInferenceError":  # the message is the reason, minus the node's name
        message = re.sub(r"^node '[^']*' \([^)]*\)( input \d+)?: ", "", result["detail"])
        return f"{result.get('op') or op}: {generic(message)}"
    if kind == "onyxia":
        what = {"ShaderError": "a shader fails to compile",
                "PlanError": "planning fails", "InputError": "feeds rejected", "DimensionError": "dimension error",
                "DeviceError": "device error"}.get(key, key)
        return f"{what}: {result.get('op') or op}"
    if "Unable to compare expected type" in str(result.get("detail", "")):
        return RUNNER_REASON
    if kind == "crash":
        return f"onyxia bug, raises {key} instead of an OnyxiaError: {op}"
    if kind == "timeout":
        return f"hangs (no result within the report's timeout): {op}"
    if kind == "died":
        return f"kills the process (native crash): {op}"
    return f"{kind}: {op}"
