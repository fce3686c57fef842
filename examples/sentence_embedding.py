"""Sentence embeddings from a small transformer encoder exported by torch, and their similarities.

    python examples/sentence_embedding.py

The model (tests/data/exported/text_encoder.dynamo.onnx: token + position embeddings, two
TransformerEncoderLayers, masked mean pooling to 32 numbers) has random weights and a 64-token
vocabulary, so words are hashed into it here instead of using a trained tokenizer. Sentences of
different lengths go in as one padded batch with an attention mask, the way a sentence-embedding
model is used; the cosine similarity matrix is checked against onnxruntime when it is installed.
"""

from __future__ import annotations

import argparse
import zlib
from pathlib import Path

import numpy as np

import onyxia

DEFAULT = Path(__file__).resolve().parent.parent / "tests" / "data" / "exported" / "text_encoder.dynamo.onnx"
VOCAB = 64
SENTENCES = ["the cat sat on the mat", "a cat was sitting on a mat", "stock markets fell sharply today",
             "rain is expected tomorrow in the north"]


def tokenize(sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Words hashed into ids 1..63 (0 pads); a [batch, longest] id matrix and its mask."""
    rows = [[1 + zlib.crc32(w.encode()) % (VOCAB - 1) for w in s.split()] for s in sentences]
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    for i, r in enumerate(rows):
        ids[i, :len(r)], mask[i, :len(r)] = r, 1
    return ids, mask


def cosine(e: np.ndarray) -> np.ndarray:
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    return e @ e.T


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT)
    args = parser.parse_args()

    ids, mask = tokenize(SENTENCES)
    session = onyxia.InferenceSession(str(args.model))
    embeddings = session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    sims = cosine(embeddings)
    print(f"{len(SENTENCES)} sentences -> embeddings {embeddings.shape}; cosine similarities:")
    for s, row in zip(SENTENCES, sims):
        print(f"  {s[:38]:<40}" + " ".join(f"{v:6.3f}" for v in row))
    try:
        import onnxruntime as ort
    except ImportError:
        return
    ref = ort.InferenceSession(str(args.model), providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids, "attention_mask": mask})[0]
    print(f"max |difference| from onnxruntime: {np.abs(ref - embeddings).max():.2e}")


if __name__ == "__main__":
    main()
