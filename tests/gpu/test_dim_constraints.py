"""Two differently named symbols broadcast together are assumed equal, and the runtime holds
the model to it (exporters name one length twice: input_ids [b, seq], attention_mask [b, mask_seq])."""

import numpy as np
import pytest

import onyxia
from onyxia.errors import DimensionError
from onyxia.plan import CompiledModel
from tests.builders.dim_constraints import _model
from tests.helpers import compile_model, run_ort


def test_equal_symbols_broadcast_and_are_checked(runtime, tmp_path):
    model = _model()
    compiled = compile_model(model, {"batch": 2, "seq": 5, "mask_seq": 5})
    assert [(str(a), str(b)) for a, b, _ in compiled.constraints] == [("seq", "mask_seq")]
    compiled.save(tmp_path / "m.onyxia")
    assert CompiledModel.load(tmp_path / "m.onyxia").constraints == compiled.constraints
    exe = runtime.load_model(compiled)
    rng = np.random.default_rng(0)
    for seq in (5, 3):
        exe.update_dimensions({"seq": seq, "mask_seq": seq})
        feeds = {"x": rng.standard_normal((2, seq)).astype(np.float32), "mask": rng.integers(0, 2, (2, seq))}
        np.testing.assert_allclose(exe.run(feeds)["y"], run_ort(model, feeds)[0])
    with pytest.raises(DimensionError, match="seq = 4 and mask_seq = 3 must be equal"):
        exe.update_dimensions({"seq": 4})
    assert exe.dims["seq"] == 3  # unchanged after the refusal


def test_session_binds_both_names_from_feeds(runtime):
    model = _model()
    sess = onyxia.InferenceSession(model, runtime=runtime)
    x = np.ones((1, 6), np.float32)
    feeds = {"x": x, "mask": np.array([[1, 0, 1, 1, 0, 1]])}
    np.testing.assert_allclose(sess.run(None, feeds)[0], run_ort(model, feeds)[0])
