"""Builders shared by tests/unit/test_split_large.py and tests/gpu/test_split_large.py: models
past the binding limit and the split pipeline."""

from __future__ import annotations

import numpy as np
from onnx import helper

import onyxia
from onyxia.compiler import CompilerPipeline, Stage
from onyxia.compiler.passes import default_optimization_passes
from onyxia.compiler.passes.split_large import SplitLargeTensorsPass, SplitReport
from onyxia.ir.graph import IrGraph
from onyxia.operators import core_operator_registry
from tests.helpers import make_model

LIMIT = 4096


def split_pipeline(limit: int = LIMIT) -> CompilerPipeline:
    """The default optimization passes with the split pass at this limit."""
    pipeline = CompilerPipeline(core_operator_registry(), optimize=False)
    for p in default_optimization_passes():
        pipeline.add_pass(SplitLargeTensorsPass(limit) if isinstance(p, SplitLargeTensorsPass) else p)
    return pipeline


def compiled(model, dims, limit: int = LIMIT):
    return split_pipeline(limit).compile(onyxia.load_model(model), dims)


def decoder_model(rng, *, vocab: int = 300, hidden: int = 16, tied: bool = False, opset: int = 18):
    """Embedding Gather -> MatMul -> Relu -> lm_head MatMul over symbolic [B, S] token ids.

    `tied`: the lm_head is Transpose(embedding) (a weight the exporter shares), not its own.
    """
    inits = {"embed": rng.standard_normal((vocab, hidden)).astype(np.float32),
             "wq": rng.standard_normal((hidden, hidden)).astype(np.float32)}
    nodes = [helper.make_node("Gather", ["embed", "ids"], ["h"], name="embed_tokens"),
             helper.make_node("MatMul", ["h", "wq"], ["q"], name="proj"),
             helper.make_node("Relu", ["q"], ["r"], name="act")]
    if tied:
        nodes.append(helper.make_node("Transpose", ["embed"], ["embed_t"], perm=[1, 0], name="tie"))
        nodes.append(helper.make_node("MatMul", ["r", "embed_t"], ["logits"], name="lm_head"))
    else:
        inits["head"] = rng.standard_normal((hidden, vocab)).astype(np.float32)
        nodes.append(helper.make_node("MatMul", ["r", "head"], ["logits"], name="lm_head"))
    return make_model(nodes, [("ids", np.int64, ["B", "S"])], ["logits"], inits, opset=opset)


def gemm_model(rng, *, trans_b: bool, c: str | None, k: int = 24, n: int = 100):
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    inits = {"Bw": b}
    inputs = ["A", "Bw"]
    if c is not None:
        inits["C"] = rng.standard_normal({"row": (n,), "full": (3, n), "scalar": ()}[c]).astype(np.float32)
        inputs.append("C")
    node = helper.make_node("Gemm", inputs, ["Y"], transB=int(trans_b), alpha=0.5, beta=2.0, name="gemm")
    return make_model([node], [("A", np.float32, [3, k])], ["Y"], inits)


def unfolded_split(model, dims, limit: int = LIMIT) -> tuple[IrGraph, SplitReport]:
    """The split pass on the graph before constant folding: a real tied lm_head's Transpose of the
    embedding is too big to fold (over FOLD_MAX_ELEMENTS), which these small tables are not."""
    pipeline = split_pipeline(limit)
    graph = pipeline.run_passes(onyxia.load_model(model), dims, until=Stage.INFERENCE)
    SplitLargeTensorsPass(limit).run(graph, pipeline.context)
    return graph, pipeline.context.reports["split-large-tensors"]


def genai_tied_model(rng, *, vocab: int = 300, hidden: int = 16):
    """onnxruntime-genai's tied layout: lm_head MatMul(x, W [hidden, vocab]), embedding Gather(Transpose(W))."""
    inits = {"W": rng.standard_normal((hidden, vocab)).astype(np.float32)}
    nodes = [helper.make_node("Transpose", ["W"], ["table"], perm=[1, 0], name="embed_t"),
             helper.make_node("Gather", ["table", "ids"], ["h"], name="embed_tokens"),
             helper.make_node("Relu", ["h"], ["r"], name="act"),
             helper.make_node("MatMul", ["r", "W"], ["logits"], name="lm_head")]
    return make_model(nodes, [("ids", np.int64, ["B", "S"])], ["logits"], inits)
