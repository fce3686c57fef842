"""The random inputs of `onyxia run` / `onyxia bench`: integer inputs stay within the rows of the
weight tables they index (BERT's token_type_ids: a table of 2)."""

from pathlib import Path

import numpy as np
import onnx
from onnx import helper as h

from onyxia.cli_feeds import index_bounds
from tests.helpers import make_model

DATA = Path(__file__).resolve().parents[1] / "data"


def _bert_like():
    nodes = [
        h.make_node("Gather", ["words", "input_ids"], ["we"]),
        h.make_node("Cast", ["token_type_ids"], ["tt"], to=onnx.TensorProto.INT64),
        h.make_node("Unsqueeze", ["tt", "zero"], ["tt1"]),
        h.make_node("Gather", ["types", "tt1"], ["te"]),
        h.make_node("Gather", ["wide", "position_ids"], ["pe"], axis=1),  # axis 1: 3 columns
        h.make_node("Gather", ["words", "position_ids"], ["pw"]),
        h.make_node("Cast", ["attention_mask"], ["m"], to=onnx.TensorProto.FLOAT),
        h.make_node("Gather", ["m", "input_ids"], ["not_a_table"]),  # data not a weight: no bound
    ]
    inputs = [("input_ids", np.int64, [2, 5]), ("token_type_ids", np.int32, [2, 5]),
              ("position_ids", np.int64, [5]), ("attention_mask", np.int64, [2, 5])]
    weights = {"words": np.zeros((30, 4), np.float32), "types": np.zeros((2, 4), np.float32),
               "wide": np.zeros((40, 3), np.float32), "zero": np.zeros(1, np.int64)}
    return make_model(nodes, inputs, ["we", "te", "pe", "pw", "not_a_table"], weights)


def test_integer_inputs_are_bounded_by_the_smallest_table_they_index(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_bert_like(), path)
    assert index_bounds(str(path)) == {"input_ids": 30, "token_type_ids": 2, "position_ids": 3}


def test_plans_folders_and_unreadable_files_have_no_bounds(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    assert index_bounds(str(tmp_path / "bad.onnx")) == {}
    assert index_bounds(str(tmp_path)) == {}
    assert index_bounds(str(tmp_path / "m.onyxia")) == {}


def test_a_transformers_bert_export_bounds_its_token_types_by_the_type_table():
    # torch.onnx export of a transformers BERT (tests/data/exported/families, tools/export_bench_models.py)
    bounds = index_bounds(str(DATA / "exported" / "families" / "bert_minilm.onnx"))
    assert bounds == {"input_ids": 100, "token_type_ids": 2}
