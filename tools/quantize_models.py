"""Quantize committed float models with onnxruntime's quantization tools, for
tests/gpu/test_quantized_models.py.

    .venv/bin/python tools/quantize_models.py

Needs only onnxruntime (a test dependency of onyxia). The float inputs are the torch exports in
tests/data/exported/ (tools/export_torch_models.py); the outputs go to tests/data/quantized/ with
a README recording the onnxruntime version, the settings of each file and its op histogram.
Calibration data is seeded, so a rerun with the same onnxruntime writes the same files.

- small_cnn.qdq.onnx: `quantize_static`, QDQ format (QuantizeLinear/DequantizeLinear pairs around
  float Conv/Gemm/pools), uint8 activations, int8 per-channel weights;
- small_cnn.qoperator.onnx: `quantize_static`, QOperator format (QLinearConv, QGemm,
  QLinearGlobalAveragePool, ...), same types;
- causal_block.qdq.onnx / causal_block.qoperator.onnx: the same two formats on a GPT-style block
  (QLinearMatMul, QLinearAdd, ... in the QOperator file);
- text_encoder.dynamic.onnx: `quantize_dynamic` with int8 weights (DynamicQuantizeLinear +
  MatMulInteger per MatMul).

And the optimum encoder-decoder exports (tests/data/exported/seq2seq/<model>/merged,
tools/export_seq2seq_models.py), for tests/gpu/test_seq2seq.py: every file of the folder through
`quantize_dynamic` (QInt8 weights, the If branches of the merged decoder included) into
`<model>/merged-q8/` for Whisper, T5 and BART, and through `MatMulNBitsQuantizer` (int4, block 32,
symmetric) into `whisper/merged-q4/`; the folder's config and tokenizer files copied beside them.
"""

from __future__ import annotations

import collections
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "tests" / "data" / "exported"
OUT = ROOT / "tests" / "data" / "quantized"
SEED = 0
VOCAB = 64  # token ids of the exported text models (tools/export_torch_models.py)


class Feeds(CalibrationDataReader):
    """A few seeded batches for calibration."""

    def __init__(self, batches: list[dict[str, np.ndarray]]):
        self.batches = iter(batches)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.batches, None)


def image_batches(rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    return [{"images": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)} for _ in range(8)]


def token_batches(rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    return [{"input_ids": rng.integers(0, VOCAB, (2, 7)).astype(np.int64)} for _ in range(8)]


def static(src: str, dst: str, fmt: QuantFormat, batches) -> str:
    quantize_static(str(SRC / src), str(OUT / dst), Feeds(batches(np.random.default_rng(SEED))), quant_format=fmt,
                    per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return f"`quantize_static`, {fmt.name}, per_channel=True, QUInt8 activations, QInt8 weights"


def dynamic(src: str, dst: str) -> str:
    quantize_dynamic(str(SRC / src), str(OUT / dst), weight_type=QuantType.QInt8)
    return "`quantize_dynamic`, QInt8 weights"


SEQ2SEQ = SRC / "seq2seq"
SEQ2SEQ_VARIANTS = [("whisper", "q8"), ("t5", "q8"), ("bart", "q8"), ("whisper", "q4")]


def seq2seq_variants() -> list[str]:
    """The quantized encoder-decoder folders (module doc); README lines for them."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    lines = []
    for model, kind in SEQ2SEQ_VARIANTS:
        src, dst = SEQ2SEQ / model / "merged", SEQ2SEQ / model / f"merged-{kind}"
        shutil.rmtree(dst, ignore_errors=True)
        dst.mkdir(parents=True)
        for f in sorted(src.iterdir()):
            if f.suffix != ".onnx":
                shutil.copy(f, dst / f.name)
            elif kind == "q8":
                quantize_dynamic(str(f), str(dst / f.name), weight_type=QuantType.QInt8)
            else:
                quantizer = MatMulNBitsQuantizer(onnx.load(str(f)), block_size=32, is_symmetric=True)
                quantizer.process()
                onnx.save(quantizer.model.model, str(dst / f.name))
        size = sum(p.stat().st_size for p in dst.iterdir()) / 1024
        how = "`quantize_dynamic`, QInt8 weights" if kind == "q8" else "`MatMulNBitsQuantizer`, 4 bits, block 32"
        lines.append(f"| `seq2seq/{model}/merged-{kind}/` | `seq2seq/{model}/merged/` | {how} | {size:.1f} KB | |")
        print(dst)
    return lines


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    for src, dst, make in (
        ("small_cnn.torchscript.onnx", "small_cnn.qdq.onnx", lambda s, d: static(s, d, QuantFormat.QDQ, image_batches)),
        ("small_cnn.torchscript.onnx", "small_cnn.qoperator.onnx",
         lambda s, d: static(s, d, QuantFormat.QOperator, image_batches)),
        ("causal_block.torchscript.onnx", "causal_block.qdq.onnx",
         lambda s, d: static(s, d, QuantFormat.QDQ, token_batches)),
        ("causal_block.torchscript.onnx", "causal_block.qoperator.onnx",
         lambda s, d: static(s, d, QuantFormat.QOperator, token_batches)),
        ("text_encoder.dynamo.onnx", "text_encoder.dynamic.onnx", dynamic),
    ):
        how = make(src, dst)
        model = onnx.load(str(OUT / dst))
        ops = collections.Counter(f"{n.domain + '::' if n.domain else ''}{n.op_type}" for n in model.graph.node)
        size = (OUT / dst).stat().st_size / 1024
        rows.append(f"| `{dst}` | `{src}` | {how} | {size:.1f} KB | "
                    + ", ".join(f"{op} ×{k}" for op, k in sorted(ops.items())) + " |")
        print(dst, dict(ops))
    rows += seq2seq_variants()
    # the tools write intermediate files next to their outputs
    for leftover in [*OUT.glob("*-inferred.onnx"), *SEQ2SEQ.glob("*/*/*-inferred.onnx")]:
        leftover.unlink()
    readme = [
        "# Models quantized by onnxruntime's quantization tools",
        "",
        "Written by `tools/quantize_models.py` (do not edit by hand; rerun the script). Tested by",
        "`tests/gpu/test_quantized_models.py` against onnxruntime. The float sources are the torch",
        "exports in `tests/data/exported/`.",
        "",
        f"- onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__}; calibration seed {SEED}",
        "",
        "| file | float source | quantization | size | ops |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]
    (OUT / "README.md").write_text("\n".join(readme))


if __name__ == "__main__":
    main()
