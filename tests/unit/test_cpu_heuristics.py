"""The heuristic's kernel on a CPU-type adapter (tuning off) where it had chosen badly: a strided
depthwise conv whose rows are not read as vec4s takes its narrowest register tile, not the
workgroup kernel (a 5x5 s2 depthwise of mobilenet_v3_large on lavapipe: 1.46 vs 0.59 ms)."""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from onyxia.plan import AdapterFacts, Select, walk_steps
from tests.helpers import compile_model, live_dispatches, make_model


def _labels(compiled, dims) -> list[str]:
    return [compiled.shaders[d.shader].label for d in live_dispatches(compiled, dims, "cpu")]


def _choices(compiled, dims) -> dict[str, str]:
    """{select key: the alternative the heuristic replays on a CPU-type adapter}."""
    env = {**compiled.dims, **dims}
    return {s.key: s.labels[s.choose(env, AdapterFacts("cpu"))] for op in compiled.operations
            for s in walk_steps(op.steps) if isinstance(s, Select)}


def test_a_strided_depthwise_conv_read_one_element_at_a_time_stays_on_a_register_tile():
    w = np.random.default_rng(1).standard_normal((24, 1, 5, 5)).astype(np.float32)
    model = make_model([h.make_node("Conv", ["x", "w"], ["y"], group=24, kernel_shape=[5, 5], strides=[2, 2],
                                    pads=[2, 2, 2, 2])], [("x", np.float32, [1, 24, "h", "w"])], ["y"], {"w": w})
    dims = {"h": 15, "w": 15}  # rows 15 wide: no vec4 reads
    labels = _labels(compile_model(model, dims), dims)
    assert labels and all(label.startswith("conv/conv_register") for label in labels), labels
