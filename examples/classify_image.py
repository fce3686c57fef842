"""Classify images with a small CNN exported by torch (tests/data/exported/small_cnn.dynamo.onnx).

    python examples/classify_image.py            # 4 synthetic 16x16 RGB images, top-3 classes each

The model (Conv-BatchNorm-ReLU-MaxPool-Conv-ReLU-GlobalAveragePool-Linear, 10 classes) has random
weights; the point is the pipeline: onnxruntime-style `InferenceSession`, a batch of images, class
probabilities, checked against onnxruntime when it is installed. Point it at your own model with
`--model`: the input must be [batch, 3, H, W] float32.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import onyxia

DEFAULT = Path(__file__).resolve().parent.parent / "tests" / "data" / "exported" / "small_cnn.dynamo.onnx"


def synthetic_images(n: int, size: int) -> np.ndarray:
    """Stripes, a disc, a gradient and noise: images that differ, without a dataset."""
    y, x = np.mgrid[0:size, 0:size] / size
    patterns = [np.sin(12 * x), ((x - 0.5) ** 2 + (y - 0.5) ** 2 < 0.1).astype(float), x * y,
                np.random.default_rng(0).random((size, size))]
    images = np.stack([np.stack([p, p.T, 1 - p]) for p in patterns[:n]]).astype(np.float32)
    mean, std = np.float32(0.5), np.float32(0.25)  # the usual normalisation, per channel
    return (images - mean) / std


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT)
    args = parser.parse_args()

    session = onyxia.InferenceSession(str(args.model))
    (name, shape), = [(i.name, i.shape) for i in session.get_inputs()]
    images = synthetic_images(4, shape[2] if isinstance(shape[2], int) else 16)
    logits = session.run(None, {name: images})[0]
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    for i, p in enumerate(probs):
        top = np.argsort(p)[::-1][:3]
        print(f"image {i}: " + ", ".join(f"class {c} ({p[c]:.1%})" for c in top))
    try:
        import onnxruntime as ort
    except ImportError:
        return
    ref = ort.InferenceSession(str(args.model), providers=["CPUExecutionProvider"]).run(None, {name: images})[0]
    print(f"max |difference| from onnxruntime: {np.abs(ref - logits).max():.2e}")


if __name__ == "__main__":
    main()
