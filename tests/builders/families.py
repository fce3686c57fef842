"""Feeds for the exported model families (tools/model_zoo.py): each `<model>.onnx` written by
tools/export_bench_models.py has a `<model>.json` beside it naming its inputs (dtype, shape with
symbols, value kind) and the two sizes to run it at. Used by tests/gpu/test_exported_models.py,
benchmarks/bench_models.py and the export tool's own check; numpy only (no torch, no onyxia)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parent.parent / "data" / "exported" / "families"


@dataclass(frozen=True)
class ModelInfo:
    name: str
    path: Path  # the .onnx file
    inputs: list[dict]  # {"name", "dtype", "shape": [int | symbol], "kind"}
    outputs: list[str]
    sizes: list[dict[str, int]]  # symbol bindings to run at (two)

    def shapes(self, size: dict[str, int]) -> dict[str, tuple[int, ...]]:
        return {i["name"]: tuple(size[d] if isinstance(d, str) else d for d in i["shape"]) for i in self.inputs}

    def feeds(self, size: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {i["name"]: _values(i["kind"], np.dtype(i["dtype"]), shape, rng)
                for i, shape in zip(self.inputs, self.shapes(size).values())}


def _values(kind: str, dtype: np.dtype, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if kind.startswith("ids:"):
        return rng.integers(0, int(kind[4:]), shape).astype(dtype)
    if kind == "mask":
        mask = np.ones(shape, dtype)
        if len(shape) == 2 and shape[0] > 1:
            mask[0, max(1, shape[1] - 2):] = 0  # pad the first row, never fully
        return mask
    if kind == "zeros":
        return np.zeros(shape, dtype)
    if kind == "uniform":
        return rng.random(shape).astype(dtype)
    if kind == "time":  # a diffusion timestep
        return rng.uniform(1.0, 999.0, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def load_info(onnx_path: Path) -> ModelInfo:
    meta = json.loads(onnx_path.with_suffix(".json").read_text())
    return ModelInfo(onnx_path.stem, onnx_path, meta["inputs"], meta["outputs"], meta["sizes"])


def models(folder: Path = FIXTURES) -> list[ModelInfo]:
    """Every exported model of `folder` (an .onnx with its .json), by name."""
    return [load_info(p) for p in sorted(folder.glob("*.onnx")) if p.with_suffix(".json").exists()]
