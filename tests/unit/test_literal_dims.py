"""A symbol the dims (or the feeds) give a value is a literal wherever a shape rule needs one.

optimum declares `pixel_values: [batch_size, num_channels, height, width]`; the patch Conv of
ViT, CLIP and DETR needs its channel count as a literal. InferenceCtx.literal takes the symbol's
value and records `num_channels = 3` as a plan constraint, which update_dimensions holds the
plan to; a symbol with no value fails naming itself and the feed that gives it one.
(tests/gpu/test_literal_dims.py runs these models against onnxruntime.)
"""

from __future__ import annotations

import pytest

import onyxia
from onyxia.compiler import CompilerPipeline, Stage
from onyxia.errors import DimensionError, ValueRequiredError
from onyxia.operators import core_operator_registry
from onyxia.runtime.null import null_executor
from tests.builders import vision_stems as stems
from tests.helpers import compile_model

DIMS = {"batch_size": 2, "num_channels": 3, "height": 16, "width": 12}


def constraints(compiled) -> set[tuple[str, str, str]]:
    return {(str(a), str(b), node) for a, b, node in compiled.constraints}


@pytest.mark.parametrize("build, node", [
    (stems.vit_patch_embedding, stems.CONV),
    (stems.clip_vision_stem, stems.CONV),
    (stems.detr_backbone_stem, "/backbone/conv_encoder/model/conv1/Conv"),
])
def test_optimum_vision_stems_take_num_channels_from_the_dims(build, node):
    compiled = compile_model(build(), DIMS)
    assert constraints(compiled) == {("num_channels", "3", node)}
    # Only the channel count became a literal: batch and image size stay dynamic.
    out = compiled.tensors[compiled.outputs[0]].shape
    assert str(out[0]) == "batch_size" and "height" in str(out[-2] if len(out) == 4 else out[1])


def test_group_counts_over_a_symbolic_channel_expression():
    # The second Conv reads depthwise(3) ++ pixel_values channels: num_channels + 3 = 6 in 2 groups.
    compiled = compile_model(stems.grouped_conv(), DIMS)
    assert constraints(compiled) == {("num_channels", "3", "depthwise"), ("num_channels + 3", "6", "grouped")}


def test_split_sizes_and_reshape_targets_from_the_channel_count():
    compiled = compile_model(stems.channel_split_reshape(), DIMS)
    assert constraints(compiled) == {("num_channels - 1", "2", "others_conv")}
    assert [str(d) for d in compiled.tensors["mean"].shape] == ["batch_size", "num_channels"]


def test_update_dimensions_to_another_channel_count_is_refused_naming_the_node():
    exe = null_executor(compile_model(stems.vit_patch_embedding(), DIMS))
    exe.update_dimensions({"batch_size": 1, "height": 8, "width": 20})  # still fine
    with pytest.raises(DimensionError, match=r"num_channels = 1 must be 3: node "
                                             r"'/embeddings/patch_embeddings/projection/Conv' needs them equal"):
        exe.update_dimensions({"num_channels": 1})
    assert exe.dims["num_channels"] == 3 and exe.dims["width"] == 20  # unchanged after the refusal


def test_without_a_value_the_error_names_the_symbol_and_the_feed():
    """InferenceSession describes outputs before any feed with stand-in values: those never stand
    for a literal, and the error says what would give the symbol one."""
    pipe = CompilerPipeline(core_operator_registry())
    with pytest.raises(ValueRequiredError) as info:
        pipe.run_passes(onyxia.load_model(stems.vit_patch_embedding()), {**DIMS, "num_channels": 1},
                        until=Stage.INFERENCE, placeholders={"num_channels"})
    err = info.value
    assert err.node == stems.CONV and err.symbols == {"num_channels"}
    assert "the channel axis must be a literal, got num_channels" in str(err)
    assert "pass dims={'num_channels': 3} or feed pixel_values" in str(err)


def test_a_symbol_in_an_expression_names_every_feed_of_it():
    pipe = CompilerPipeline(core_operator_registry())
    with pytest.raises(ValueRequiredError, match=r"'others_conv'.*got num_channels - 1, which has no value here "
                                                 r"\(pass dims=\{'num_channels': N\} or feed pixel_values\)"):
        pipe.run_passes(onyxia.load_model(stems.channel_split_reshape()), {**DIMS, "num_channels": 1},
                        until=Stage.INFERENCE, placeholders={"num_channels"})


def test_session_describes_outputs_once_num_channels_is_given():
    model = stems.vit_patch_embedding()
    assert onyxia.InferenceSession(model).get_outputs()[0].type == "tensor(unknown)"  # needs a feed first
    out = onyxia.InferenceSession(model, dims={"num_channels": 3}).get_outputs()[0]
    assert out.type == "tensor(float)" and out.shape == ["batch_size", "(height // 4) * (width // 4)", 24]


def test_a_data_dependent_count_is_no_literal():
    from onyxia.ir.dim_env import DimEnv
    from onyxia.ir.shapes import SymDim

    env = DimEnv(dims={"c": 3})
    count = env.data_symbol("nonzero", None)
    assert env.literal(SymDim.symbol("c"), "conv") == 3 and env.literal(count, "conv") is None
    assert [(str(a), str(b)) for a, b, _ in env.constraints.values()] == [("c", "3")]


def test_literal_uses_name_the_node_and_what_it_needed(tmp_path):
    from onyxia.plan.show import literal_uses

    compiled = compile_model(stems.grouped_conv(), DIMS)
    uses = {(u.expr, u.value, u.node, u.symbols) for u in literal_uses(compiled)}
    assert uses == {("num_channels", 3, "depthwise", ("num_channels",)),
                    ("num_channels + 3", 6, "grouped", ("num_channels",))}
    assert {u.reason for u in literal_uses(compiled)} == {"the channel axis"}
    compiled.save(tmp_path / "plan.onyxia")  # the reasons travel with the plan file
    assert literal_uses(onyxia.CompiledModel.load(tmp_path / "plan.onyxia")) == literal_uses(compiled)


def test_inspect_lists_the_literal_bound_symbols_with_their_node(tmp_path, capsys):
    import onnx

    from onyxia.cli import main

    path = tmp_path / "stem.onnx"
    onnx.save(stems.vit_patch_embedding(), path)
    assert main(["inspect", str(path)]) == 0
    assert "pass --dim for batch_size, height, num_channels, width" in capsys.readouterr().out
    assert main(["inspect", str(path), *(f"--dim={k}={v}" for k, v in DIMS.items())]) == 0
    out = capsys.readouterr().out
    assert ("num_channels = 3: node '/embeddings/patch_embeddings/projection/Conv' needs a concrete value "
            "(the channel axis)") in out
    plan = tmp_path / "stem.onyxia"
    compile_model(stems.vit_patch_embedding(), DIMS).save(plan)
    assert main(["inspect", str(plan)]) == 0
    assert "num_channels = 3: node '/embeddings/patch_embeddings/projection/Conv'" in capsys.readouterr().out
