"""Plans in the memory-aware order (compiler/lowering/ordering.py) compute what onnxruntime does,
also after a dimension change."""

import numpy as np
import onnx
import pytest

from tests.builders.memory_order import branches
from tests.helpers import check_across_dims, compile_model, compile_with_default_passes, run_ort
from tests.models import bert_encoder, bert_feeds

pytestmark = pytest.mark.gpu


def _check(runtime, model, dims_list, make_feeds, rtol=1e-4, atol=1e-5, spelled_attention=False):
    # spelled_attention: attention left as the export spells it (its [B, H, S, S] scores are what
    # the plain order peaks on); AttentionFusionPass would otherwise leave nothing to reorder.
    compiled = (compile_with_default_passes(model, dims_list[0], without="attention-fusion")[1]
                if spelled_attention else compile_model(model, dims_list[0]))
    assert compiled.metadata["order"]["memory_aware"], "the case should be reordered"
    check_across_dims(runtime, model, make_feeds, dims_list, rtol=rtol, atol=atol, compiled=compiled)


def test_reordered_branches_match_onnxruntime(runtime):
    rng = np.random.default_rng(1)
    _check(runtime, branches(), [{"n": 64}, {"n": 5}],
           lambda d: {"x": rng.standard_normal((d["n"], 8)).astype(np.float32)})


def test_reordered_bert_matches_onnxruntime(runtime):
    _check(runtime, bert_encoder(), [{"batch": 2, "seq": 32}, {"batch": 1, "seq": 7}], bert_feeds,
           spelled_attention=True)


def test_reordered_decoder_matches_onnxruntime(runtime):
    # Optimum's Gemma-3 export: its plain order peaks in the attention (Llama's does not reorder
    # since its P@V product's Select alternatives each hold a split-K scratch buffer).
    model = onnx.load("tests/data/llm/optimum/gemma3/model.onnx")
    rng = np.random.default_rng(2)

    def feeds(d):
        b, s, p = d["batch_size"], d["sequence_length"], d["past_sequence_length"]
        out = {"input_ids": rng.integers(0, 64, (b, s)).astype(np.int64),
               "attention_mask": np.ones((b, p + s), np.int64),
               "position_ids": np.arange(p, p + s, dtype=np.int64)[None].repeat(b, 0)}
        for inp in model.graph.input:
            if inp.name.startswith("past"):
                heads = inp.type.tensor_type.shape.dim[1].dim_value
                size = inp.type.tensor_type.shape.dim[3].dim_value
                out[inp.name] = rng.standard_normal((b, heads, p, size)).astype(np.float32)
        return {k: v for k, v in out.items() if k in {i.name for i in model.graph.input}}

    _check(runtime, model, [{"batch_size": 1, "sequence_length": 16, "past_sequence_length": 16},
                            {"batch_size": 1, "sequence_length": 1, "past_sequence_length": 30}], feeds,
           spelled_attention=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_in_place_maps_match_onnxruntime(runtime, dtype):
    from tests.builders.memory_order import chain

    model = chain(dtype)
    compiled = compile_model(model, {"n": 16})
    assert compiled.metadata["memory"]["in_place"] == 2
    exe = runtime.load_model(compiled)
    rng = np.random.default_rng(4)
    for n in (16, 3, 33):
        exe.update_dimensions({"n": n})
        x = rng.standard_normal((n, 8)).astype(dtype)
        tol = 1e-5 if dtype == np.float32 else 2e-3
        np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=tol, atol=tol)
