"""The exported torch models of tests/data/exported (tests/gpu/test_exported.py): their files, feeds,
dims and onnxruntime sessions, shared with tests/unit/test_exported.py."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from onyxia.operators import core_operator_registry

DATA = Path(__file__).resolve().parent.parent / "data" / "exported"


FILES = sorted(p.name for p in DATA.glob("*.onnx"))


VOCAB = 64  # the token-id range of the exported models (VOCAB in tools/export_torch_models.py)


@functools.lru_cache(maxsize=None)
def _model(name: str) -> onnx.ModelProto:
    return onnx.load(str(DATA / name))


def _unregistered(name: str) -> list[str]:
    """The file's ops that onyxia has no implementation of at the file's opset ("Conv-20")."""
    model, registry = _model(name), core_operator_registry()
    opsets = {o.domain: o.version for o in model.opset_import}
    ops = {(n.domain, n.op_type) for n in model.graph.node}
    return sorted(f"{op}-{opsets.get(dom)}" for dom, op in ops if registry.get(op, dom, opsets.get(dom)) is None)


@functools.lru_cache(maxsize=None)
def _ort_session(name: str) -> ort.InferenceSession:
    return ort.InferenceSession(str(DATA / name), providers=["CPUExecutionProvider"])


def _dims(name: str, batch: int, seq: int) -> dict[str, int]:
    """The model's input symbols bound to (batch, seq); the CNN has no seq."""
    symbols = {d.dim_param for i in _model(name).graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
    return {k: v for k, v in {"batch": batch, "seq": seq}.items() if k in symbols}


def _feeds(name: str, dims: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in _model(name).graph.input:
        shape = [dims[d.dim_param] if d.dim_param else d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "input_ids":
            feeds[vi.name] = rng.integers(0, VOCAB, shape).astype(np.int64)
        elif vi.name in ("attention_mask", "mask"):
            mask = np.ones(shape, np.int64)
            mask[0, max(1, shape[1] - 2):] = 0  # pad the first row, never fully (softmax would be NaN)
            feeds[vi.name] = mask
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds
