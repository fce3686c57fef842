"""The models the JavaScript runtime is tested on (tests/web/test_node.py in Node,
tests/web/test_browser.py in headless Chromium): the MLP example, a float16 MLP, and the shared
model table's CNN, BERT-style encoder and GPT-2 block."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.builders.model_cases import CASES, _compiled, _model
from tests.helpers import compile_model, make_model
from tests.models import ModelCase

RTOL = ATOL = 1e-4  # as tests/gpu/test_models.py
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny_mlp.onnx"


def mlp_feeds(dims: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"features": rng.standard_normal((dims["batch"], 8, 8)).astype(np.float32)}


MLP = ModelCase(lambda: onnx.load(EXAMPLE), mlp_feeds, {"batch": 2},
                ({"batch": 2}, {"batch": 1}, {"batch": 70}, {"batch": 3}))


def _mlp_fp16() -> onnx.ModelProto:
    """float16 end to end: SwiftShader has no shader-f16, so the packed-word accessors run."""
    rng = np.random.default_rng(4)
    inits = {"w1": (rng.standard_normal((16, 32)) * 0.3).astype(np.float16),
             "b1": (rng.standard_normal(32) * 0.1).astype(np.float16),
             "w2": (rng.standard_normal((32, 8)) * 0.3).astype(np.float16)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    return make_model(nodes, [("x", np.float16, ["batch", 16])], ["y"], inits)


def _fp16_feeds(dims: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((dims["batch"], 16)).astype(np.float16)}


MLP_FP16 = ModelCase(_mlp_fp16, _fp16_feeds, {"batch": 2}, ({"batch": 2}, {"batch": 1}, {"batch": 9}))
def _attention_products() -> onnx.ModelProto:
    """An encoder attention block over 516 static keys (a head of 128): a CPU-type adapter
    (SwiftShader) runs FusedAttention's products alternative, nested matmul Selects included."""
    from tests.builders.encoder_attention import attention_block, static_sequence

    return static_sequence(attention_block("eager", None, heads=1, head=128), 516)


def _attention_tiles() -> onnx.ModelProto:
    """The block with heads of 32: a CPU-type adapter runs the register-tile kernel
    (sdpa_tiles.wgsl: subgroup shuffles where the adapter has them, workgroup memory else)."""
    from tests.builders.encoder_attention import attention_block, static_sequence

    return static_sequence(attention_block("eager", None, heads=2, head=32), 516)


def _attention_feeds(build):
    def feeds(dims: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
        from tests.builders.encoder_attention import block_feeds

        return block_feeds(build(), dims["batch"], 516, seed)
    return feeds


def _attention_case(build) -> ModelCase:
    return ModelCase(build, _attention_feeds(build), {"batch": 1}, ({"batch": 1}, {"batch": 2}))


LOCAL = {"tiny_mlp": MLP, "mlp_fp16": MLP_FP16, "attention_products": _attention_case(_attention_products),
         "attention_tiles": _attention_case(_attention_tiles)}
TOLERANCE = {"mlp_fp16": 4e-3}  # as tests/gpu/test_matmul_epilogue.py's float16 products
WEB_MODELS = ["tiny_mlp", "mlp_fp16", "small_cnn", "bert_encoder", "gpt2_range_opset18", "attention_products",
              "attention_tiles"]


def web_case(name: str):
    """(its ModelCase, the ONNX model, the plan compiled at its compile dims)."""
    if name in LOCAL:
        model = LOCAL[name].build()
        return LOCAL[name], model, compile_model(model, LOCAL[name].compile_dims)
    if name not in CASES:
        pytest.fail(f"{name} is not runnable by this registry")
    return CASES[name], _model(name), _compiled(name)
