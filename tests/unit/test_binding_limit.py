"""Activations over the device's storage-binding limit (issue 12: the logits of a long prefill
over a 262k vocabulary are 160 MiB, over WebGPU's guaranteed 128 MiB).

Weights over the limit are split at compile time (SplitLargeTensorsPass). An activation's size
is only known against a device: the executor refuses it before anything runs, when it is
created (static sizes) or when update_dimensions would need it (symbolic ones), naming the
tensor, its size and the device's limit, and stays usable. The null backend with a small limit
proves it at the smallest size; the real limit is the same comparison.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper as h

from onyxia.errors import DeviceError
from onyxia.runtime.null import NULL_LIMITS, null_executor
from tests.helpers import compile_model, make_model

F = np.float32
LIMIT = 32 << 10  # 32 KiB: logits [1, 160, 64] f32 (40 KiB) do not fit, [1, 16, 64] do
SMALL = dataclasses.replace(NULL_LIMITS, max_binding_bytes=LIMIT)


def lm_head(seq):
    w = np.random.default_rng(0).standard_normal((16, 64)).astype(F)
    return make_model([h.make_node("MatMul", ["x", "w"], ["y"], name="lm_head")], [("x", F, [1, seq, 16])], ["y"],
                      {"w": w})


def test_a_static_activation_over_the_limit_is_refused_when_the_executor_is_created():
    with pytest.raises(DeviceError, match=rf"tensor 'y' needs 40960 bytes .* max storage binding of {LIMIT} bytes"):
        null_executor(compile_model(lm_head(160)), limits=SMALL)
    null_executor(compile_model(lm_head(16)), limits=SMALL)  # 4 KiB: fine


def test_a_symbolic_activation_over_the_limit_is_refused_by_update_dimensions():
    exe = null_executor(compile_model(lm_head("S"), {"S": 16}), limits=SMALL)
    exe.run({"x": np.zeros((1, 16, 16), F)})
    with pytest.raises(DeviceError, match=rf"tensor 'y' would need 40960 bytes for {{'S': 160}}.* {LIMIT} bytes"):
        exe.update_dimensions({"S": 160})
    assert exe.dims["S"] == 16  # nothing changed: the executor still runs at the old size
    exe.run({"x": np.zeros((1, 16, 16), F)})
    exe.update_dimensions({"S": 128})  # 32 KiB exactly: fits
    exe.run({"x": np.zeros((1, 128, 16), F)})


def test_a_limit_guarded_alternative_leaves_its_buffers_unmade_past_the_limit():
    """FusedAttention's products alternative binds [B, H, S, T] scores and is guarded by the
    binding limit: past it the scores are not made (no DeviceError), another kernel runs, and
    back under it the scores regrow and the products run again."""
    from onyxia.runtime.select import SelectCommand
    from tests.builders.encoder_attention import attention_block, block_feeds, static_sequence

    model = static_sequence(attention_block("eager", None, heads=2, head=128), 516)  # (heads of 32-64: tiles)
    limits = dataclasses.replace(NULL_LIMITS, max_binding_bytes=4 << 20, cpu_adapter=True)  # scores: 2.1 MB a batch
    exe = null_executor(compile_model(model, {"batch": 1}), limits=limits)
    [select] = [c for c in exe.commands if isinstance(c, SelectCommand) and c.step.key == "fused_attention"]
    assert select.step.labels[select.chosen] == "products"
    for batch, kernel in ((2, "rows"), (3, "rows"), (1, "products")):
        exe.update_dimensions({"batch": batch})
        assert select.step.labels[select.chosen] == kernel, batch
        exe.run(block_feeds(model, batch, 516))
    # the same limit still refuses a tensor every run binds: the block's input past it
    with pytest.raises(DeviceError, match="max storage binding"):
        exe.update_dimensions({"batch": 40})
