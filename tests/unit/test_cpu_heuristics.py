"""The heuristic's kernel on a CPU-type adapter (tuning off) for two cases measured on lavapipe
where it had chosen badly: squeeze-excite's pooled 1x1 convs (small constant weights at M = 1)
take the register matrix kernel, not the decode one; a strided depthwise conv whose rows are not
read as vec4s takes its narrowest register tile, not the workgroup kernel."""

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


def test_squeeze_excite_products_take_the_register_kernel():
    rng = np.random.default_rng(0)
    nodes = [h.make_node("GlobalAveragePool", ["x"], ["p"]), h.make_node("Conv", ["p", "w1", "b1"], ["q"]),
             h.make_node("Relu", ["q"], ["r"]), h.make_node("Conv", ["r", "w2", "b2"], ["s"]),
             h.make_node("Mul", ["x", "s"], ["y"])]
    inits = {"w1": rng.standard_normal((32, 120, 1, 1)).astype(np.float32), "b1": np.zeros(32, np.float32),
             "w2": rng.standard_normal((120, 32, 1, 1)).astype(np.float32), "b2": np.zeros(120, np.float32)}
    model = make_model(nodes, [("x", np.float32, ["n", 120, "h", "w"])], ["y"], inits)
    dims = {"n": 1, "h": 14, "w": 14}
    choices = _choices(compile_model(model, dims), dims)
    products = {key: label for key, label in choices.items() if key.startswith("matmul/f32/")}
    assert len(products) == 2 and set(products.values()) == {"register"}, choices


def test_a_strided_depthwise_conv_read_one_element_at_a_time_stays_on_a_register_tile():
    w = np.random.default_rng(1).standard_normal((24, 1, 5, 5)).astype(np.float32)
    model = make_model([h.make_node("Conv", ["x", "w"], ["y"], group=24, kernel_shape=[5, 5], strides=[2, 2],
                                    pads=[2, 2, 2, 2])], [("x", np.float32, [1, 24, "h", "w"])], ["y"], {"w": w})
    dims = {"h": 15, "w": 15}  # rows 15 wide: no vec4 reads
    labels = _labels(compile_model(model, dims), dims)
    assert labels and all(label.startswith("conv/conv_register") for label in labels), labels
