"""Models quantized by onnxruntime's own tools (tests/data/quantized/, written by
tools/quantize_models.py) against onnxruntime on the same file.

quantize_static in both formats (QDQ: QuantizeLinear/DequantizeLinear around float ops;
QOperator: QLinearConv, QLinearMatMul, QGemm, QLinearAdd, ...) on a small CNN and a GPT-style
block, and quantize_dynamic (DynamicQuantizeLinear + MatMulInteger) on a text encoder. The static
files compute on integers end to end, and their outputs equal onnxruntime's exactly; the dynamic
one runs LayerNorm, Softmax and GELU in float between its integer products (within 1e-5).
Each file runs at two batch sizes from one compile.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onyxia
from onyxia.operators import core_operator_registry
from tests.helpers import compile_model
from tests.ort_oracle import exact_for_ort

DATA = Path(__file__).resolve().parent.parent / "data" / "quantized"
FILES = sorted(p.name for p in DATA.glob("*.onnx"))
VOCAB = 64  # token ids of the exported text models
SCHEDULE = [{"batch": 2, "seq": 7}, {"batch": 3, "seq": 7}, {"batch": 1, "seq": 7}]
# Every static file is integer arithmetic plus requantization, as onnxruntime does it: no tolerance.
EXACT = {name for name in FILES if ".dynamic." not in name}


@functools.lru_cache(maxsize=None)
def _model(name: str) -> onnx.ModelProto:
    return onnx.load(str(DATA / name))


@functools.lru_cache(maxsize=None)
def _ort(name: str) -> ort.InferenceSession:
    """onnxruntime on the file with its int8 weights as uint8 (tests/ort_oracle.py): exact
    integer products on every x86 CPU, VNNI or not."""
    model, _ = exact_for_ort(_model(name), {})
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _feeds(name: str, dims: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in _model(name).graph.input:
        shape = [dims[d.dim_param] if d.dim_param else d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "input_ids":
            feeds[vi.name] = rng.integers(0, VOCAB, shape).astype(np.int64)
        elif vi.name == "attention_mask":
            mask = np.ones(shape, np.int64)
            mask[0, shape[1] - 2:] = 0
            feeds[vi.name] = mask
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _dims(name: str, dims: dict[str, int]) -> dict[str, int]:
    symbols = {d.dim_param for i in _model(name).graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
    return {k: v for k, v in dims.items() if k in symbols}


def test_fixtures_use_the_quantized_ops():
    ops = {n.op_type for name in FILES for n in _model(name).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd",
            "DynamicQuantizeLinear", "MatMulInteger"} <= ops
    registry = core_operator_registry()
    opsets = {name: {o.domain: o.version for o in _model(name).opset_import} for name in FILES}
    missing = {(n.domain, n.op_type) for name in FILES for n in _model(name).graph.node
               if registry.get(n.op_type, n.domain, opsets[name].get(n.domain)) is None}
    assert not missing


@pytest.mark.parametrize("name", FILES)
def test_matches_onnxruntime_across_batch_sizes(runtime, name):
    compiled = compile_model(_model(name), _dims(name, SCHEDULE[0]))
    exe = runtime.load_model(compiled)
    for step, dims in enumerate(SCHEDULE):
        exe.update_dimensions(_dims(name, dims))
        feeds = _feeds(name, _dims(name, dims) | dims, step)
        feeds = {k: v for k, v in feeds.items() if k in {i.name for i in _model(name).graph.input}}
        out = exe.run(feeds)
        for i, (ours, theirs) in enumerate(zip([out[n] for n in compiled.outputs], _ort(name).run(None, feeds))):
            assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
            if name in EXACT:
                np.testing.assert_array_equal(ours, theirs, err_msg=f"output {i} at {dims}")
            else:
                np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5, err_msg=f"output {i} at {dims}")
    assert exe.stats.recompiles == 0


@pytest.mark.parametrize("name", FILES)
def test_session_matches_onnxruntime(runtime, name):
    feeds = _feeds(name, {"batch": 2, "seq": 7}, 7)
    ours = onyxia.InferenceSession(str(DATA / name), runtime=runtime).run(None, feeds)
    for a, b in zip(ours, _ort(name).run(None, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 if name not in EXACT else 0)
