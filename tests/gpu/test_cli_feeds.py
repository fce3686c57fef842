"""`onyxia run --check` and `onyxia bench` on a model whose integer input indexes a table of 2 rows:
the random feeds stay in range, so both run (random integers in [0, 8) made every exported BERT
fail with an index error)."""

import numpy as np
import onnx
import pytest
from onnx import helper as h

from onyxia.cli import main
from tests.helpers import make_model

pytestmark = pytest.mark.gpu


@pytest.fixture
def model_path(tmp_path, monkeypatch):
    monkeypatch.setenv("ONYXIA_CACHE_DIR", str(tmp_path / "cache"))
    nodes = [h.make_node("Gather", ["words", "input_ids"], ["we"]),
             h.make_node("Gather", ["types", "token_type_ids"], ["te"]),
             h.make_node("Add", ["we", "te"], ["y"])]
    rng = np.random.default_rng(0)
    ids = [("input_ids", np.int64, ["batch", "seq"]), ("token_type_ids", np.int64, ["batch", "seq"])]
    model = make_model(nodes, ids, ["y"], {"words": rng.standard_normal((30, 8)).astype(np.float32),
                                        "types": rng.standard_normal((2, 8)).astype(np.float32)})
    path = tmp_path / "emb.onnx"
    onnx.save(model, path)
    return str(path)


def test_run_check_and_bench_feed_indices_within_the_tables(model_path, runtime, capsys):  # runtime: a real adapter
    assert main(["run", model_path, "--dim", "batch=2", "--dim", "seq=16", "--check"]) == 0
    assert "check: OK" in capsys.readouterr().out
    assert main(["bench", model_path, "--dim", "batch=2", "--dim", "seq=16", "--iterations", "2", "--no-ort"]) == 0
