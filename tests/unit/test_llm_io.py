"""Binding an exported decoder's I/O dimensions from its folder (no GPU): tests/data/llm/ fixtures.

Every dimension symbol of every decoder input and output must get a value, from the session
(batch, sequence, past, total) or from the config (genai's `kv_cache_dim` = decoder.head_size,
`past_sliding_length` = the window cache's capacity, ...), and an unknown one is one ConfigError
naming it.
"""

from __future__ import annotations

import json
import shutil

import onnx
import pytest

from onyxia.errors import ConfigError
from onyxia.llm import load_model_config
from onyxia.llm.io import CACHE_BRANCH, bind_decoder_io, take_cache_branch
from onyxia.onnx import load_model
from tests.llm_fixtures import DATA, fixtures

FIXTURES = fixtures()


def bind(folder, max_length=64, decoder=None):
    config = load_model_config(folder, decoder)
    graph = load_model(config.model_path)
    take_cache_branch(graph)  # as compile_decoder does
    return config, bind_decoder_io(graph, config, max_length)


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.name for f in FIXTURES])
def test_every_fixture_binds(fixture):
    config, io = bind(fixture.path, decoder=fixture.decoder)
    assert io.sequence == "sequence_length"
    assert len(io.kv) == 2 * config.decoder.num_hidden_layers
    if fixture.is_genai:
        assert io.fixed["kv_cache_dim"] == config.decoder.head_size
    elif "merged" in fixture.name:  # Optimum 1.x: the mask's length is its own symbol, no position ids
        assert io.total == "attention_mask_sequence_length" and io.positions is None
    else:  # Optimum: names from the graph, mask [batch, past + sequence], position ids (not Gemma-3's)
        assert io.total is None and io.past == "past_sequence_length"
        assert io.positions == (None if fixture.family == "gemma3" else "position_ids")


def test_window_sized_caches_are_found_from_the_graph():
    config, io = bind(DATA / "genai" / "gemma2-cpu-fp32")
    # Layer 0 slides (sliding_window_cache = 1), layer 1 is global.
    assert io.windowed == {"past_key_values.0.key", "past_key_values.0.value"}
    window = config.decoder.sliding_window.window_size
    assert io.window_capacity >= window
    assert io.fixed["past_sliding_length"] == io.fixed["total_sliding_length"] == io.window_capacity
    assert io.past == "past_sequence_length"


def test_optimum_config(tmp_path):
    config = load_model_config(DATA / "optimum" / "qwen3")
    assert config.type == "qwen3" and config.decoder.filename == "model.onnx"
    assert config.eos_token_ids == (2,) and config.vocab_size == 512 and config.context_length == 256
    # transformers.js keeps the decoder under onnx/
    folder = tmp_path / "tjs"
    shutil.copytree(DATA / "optimum" / "qwen3", folder)
    (folder / "onnx").mkdir()
    (folder / "model.onnx").rename(folder / "onnx" / "model.onnx")
    assert load_model_config(folder).model_path == folder / "onnx" / "model.onnx"
    (folder / "onnx" / "model.onnx").unlink()
    with pytest.raises(ConfigError, match="no decoder ONNX file"):
        load_model_config(folder)


TJS = DATA / "transformersjs" / "llama"


@pytest.mark.parametrize("decoder,file", [(None, "onnx/model.onnx"), ("fp32", "onnx/model.onnx"),
                                          ("fp16", "onnx/model_fp16.onnx"), ("q8", "onnx/model_quantized.onnx"),
                                          ("int8", "onnx/model_int8.onnx"), ("uint8", "onnx/model_uint8.onnx"),
                                          ("q4", "onnx/model_q4.onnx"), ("q4f16", "onnx/model_q4f16.onnx"),
                                          ("bnb4", "onnx/model_bnb4.onnx"),
                                          ("onnx/model_q4.onnx", "onnx/model_q4.onnx")])
def test_transformersjs_decoders_by_dtype_name_or_file(decoder, file):
    assert load_model_config(TJS, decoder).decoder.filename == file


def test_transformersjs_folder_without_model_onnx(tmp_path):
    folder = tmp_path / "tjs"
    shutil.copytree(TJS, folder)
    (folder / "onnx" / "model.onnx").unlink()
    with pytest.raises(ConfigError, match=r"several decoders \(onnx/model_bnb4.onnx, .*--decoder FILE or a dtype"):
        load_model_config(folder)
    for path in (folder / "onnx").glob("*.onnx"):
        if path.name != "model_q4f16.onnx":
            path.unlink()
    assert load_model_config(folder).decoder.filename == "onnx/model_q4f16.onnx"  # the only one
    with pytest.raises(ConfigError, match=r"no decoder 'q4' \(looked for onnx/model_q4.onnx.*has onnx/model_q4f16"):
        load_model_config(folder, "q4")


def test_bad_decoder_choices_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="decoder 'q3': not an .onnx file nor one of fp32, fp16"):
        load_model_config(TJS, "q3")
    with pytest.raises(ConfigError, match="must stay inside"):  # no way out of the folder
        load_model_config(TJS, "../../genai/llama-cpu-fp32/model.onnx")
    genai = DATA / "genai" / "llama-cpu-fp32"
    assert load_model_config(genai, "model.onnx").decoder.filename == "model.onnx"
    with pytest.raises(ConfigError, match="no decoder 'q4'"):
        load_model_config(genai, "q4")


@pytest.mark.parametrize("decoder", ["fp32", "q8"])
def test_a_merged_decoder_takes_its_branch_with_a_cache(decoder):
    config = load_model_config(DATA / "transformersjs-merged" / "llama", decoder)
    assert config.decoder.filename.startswith("onnx/decoder_model_merged")
    graph = load_model(config.model_path)
    assert CACHE_BRANCH in graph.inputs and [n.op_type for n in graph.nodes] == ["If"]
    assert take_cache_branch(graph)
    assert CACHE_BRANCH not in graph.inputs and "If" not in {n.op_type for n in graph.nodes}
    assert graph.tensor(CACHE_BRANCH).value.tolist() == [True]
    assert set(graph.outputs) >= {"logits", "present.0.key", "present.1.value"}
    assert not take_cache_branch(load_model(DATA / "optimum" / "llama" / "model.onnx"))


def _edit(tmp_path, edit_model=None, edit_config=None):
    src = DATA / "genai" / "llama-cpu-fp32"
    folder = tmp_path / "model"
    shutil.copytree(src, folder)
    if edit_model:
        model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
        edit_model(model)
        onnx.save(model, str(folder / "model.onnx"))
    if edit_config:
        path = folder / "genai_config.json"
        cfg = json.loads(path.read_text())
        edit_config(cfg)
        path.write_text(json.dumps(cfg))
    return folder


def _dim(model, name, axis):
    vi = next(v for v in [*model.graph.input, *model.graph.output] if v.name == name)
    return vi.type.tensor_type.shape.dim[axis]


def test_unknown_dimension_names_it_and_the_fields(tmp_path):
    folder = _edit(tmp_path, lambda m: setattr(_dim(m, "attention_mask", 0), "dim_param", "num_beams"))
    with pytest.raises(ConfigError, match=r"dimension 'num_beams' of 'attention_mask' axis 0 .*head_size"):
        bind(folder)


def test_a_symbol_with_two_meanings_is_refused(tmp_path):
    # kv_cache_dim used as the past length too: one symbol cannot be both.
    folder = _edit(tmp_path, lambda m: setattr(_dim(m, "past_key_values.0.key", 2), "dim_param", "kv_cache_dim"))
    with pytest.raises(ConfigError, match="kv_cache_dim"):
        bind(folder)
