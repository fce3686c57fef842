"""genai_config.json / tokenizer.json parsing, sampling and LlmSession's errors before any GPU work."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from onyxia.errors import ConfigError, DimensionError, InputError, UnsupportedOperatorError
from onyxia.llm import LlmSession, load_genai_config, load_tokenizer
from onyxia.llm.sampling import SamplingParams, filtered_probabilities, sample
from tests.llm_models import EOS, VARIANTS, build_decoder, build_graph, genai_config


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_decoder(VARIANTS["llama_rope_op"], tmp_path_factory.mktemp("llm") / "llama")


@pytest.fixture
def scratch(model_dir, tmp_path):
    """A writable copy of the model folder."""
    return shutil.copytree(model_dir, tmp_path / "model")


def edit_config(folder, edit) -> None:
    path = folder / "genai_config.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_reads_genai_config(model_dir):
    cfg = load_genai_config(model_dir)
    spec = VARIANTS["llama_rope_op"]
    assert cfg.decoder.num_hidden_layers == spec.num_layers
    assert cfg.decoder.num_key_value_heads == spec.num_kv_heads
    assert cfg.decoder.past_names(1) == ("past_key_values.1.key", "past_key_values.1.value")
    assert cfg.decoder.present_names(0) == ("present.0.key", "present.0.value")
    assert cfg.decoder.position_ids == "position_ids"
    assert cfg.eos_token_ids == (EOS,)
    assert cfg.search.max_length == spec.max_length and cfg.context_length == spec.context_length
    assert cfg.model_path == model_dir / "model.onnx"


def test_eos_as_int(scratch):
    edit_config(scratch, lambda d: d["model"].update(eos_token_id=7))
    assert load_genai_config(scratch).eos_token_ids == (7,)


def test_missing_config_names_the_file(tmp_path):
    with pytest.raises(ConfigError, match="genai_config.json: not found"):
        load_genai_config(tmp_path)


def test_invalid_json_names_file_and_line(scratch):
    (scratch / "genai_config.json").write_text('{"model": {\n  "type": }')
    with pytest.raises(ConfigError, match=r"genai_config.json: not valid JSON \(line 2"):
        load_genai_config(scratch)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["model"].pop("decoder"), "'model.decoder' is missing"),
    (lambda d: d["model"]["decoder"].pop("num_hidden_layers"), "'model.decoder.num_hidden_layers' is missing"),
    (lambda d: d["model"]["decoder"].update(num_attention_heads="4"),
     "'model.decoder.num_attention_heads' must be an integer"),
    (lambda d: d["model"]["decoder"].update(head_size=0), "'model.decoder.head_size' must be positive"),
    (lambda d: d["model"].update(eos_token_id=[]), "'model.eos_token_id' must be a token id"),
    (lambda d: d["model"].update(context_length=True), "'model.context_length' must be an integer"),
    (lambda d: d["search"].update(past_present_share_buffer="yes"),
     "'search.past_present_share_buffer' must be true or false"),
    (lambda d: d["model"]["decoder"]["inputs"].update(past_key_names="past.key"), "must contain one %d"),
    (lambda d: d["model"]["decoder"].update(filename="nope.onnx"), "'model.decoder.filename' names 'nope.onnx'"),
])
def test_malformed_config_names_the_field(scratch, edit, message):
    edit_config(scratch, edit)
    with pytest.raises(ConfigError, match="genai_config.json") as info:
        load_genai_config(scratch)
    assert message in str(info.value)


def test_tokenizer_missing_or_malformed(scratch):
    assert load_tokenizer(scratch).encode("the sun").ids == [1, 4, 85]
    (scratch / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "Nope"}}')
    with pytest.raises(ConfigError, match="tokenizer.json: not a valid tokenizer file"):
        load_tokenizer(scratch)
    (scratch / "tokenizer.json").unlink()
    with pytest.raises(ConfigError, match="tokenizer.json: not found"):
        LlmSession(scratch)


def test_max_length_beyond_context(model_dir):
    with pytest.raises(DimensionError, match="exceeds the model's context_length 128"):
        LlmSession(model_dir, max_length=1000)


def test_config_naming_inputs_the_model_lacks(scratch):
    edit_config(scratch, lambda d: d["model"]["decoder"]["inputs"].update(past_key_names="cache.%d.k"))
    with pytest.raises(ConfigError, match=r"model inputs \['cache.0.k'"):
        LlmSession(scratch)


def test_model_inputs_the_config_does_not_describe(scratch):
    # An input named position_ids is position ids even when the config does not name it (Optimum's
    # layout has no genai_config.json at all); any other name must be described.
    edit_config(scratch, lambda d: d["model"]["decoder"]["inputs"].update(position_ids="positions"))
    from onyxia.llm.io import bind_decoder_io
    from onyxia.onnx import load_model

    config = load_genai_config(scratch)
    assert bind_decoder_io(load_model(config.model_path), config, 64).positions == "position_ids"
    edit_config(scratch, lambda d: d["model"]["decoder"]["inputs"].update(input_ids="tokens"))
    with pytest.raises(ConfigError, match=r"names model inputs \['tokens'\]"):
        LlmSession(scratch)


def test_unknown_operator_names_the_node(tmp_path):
    spec = VARIANTS["llama"]
    model = build_graph(spec)
    node = next(n for n in model.graph.node if n.op_type == "Sigmoid")
    node.op_type, node.domain = "Frobnicate", "com.example"
    model.opset_import.append(__import__("onnx").helper.make_opsetid("com.example", 1))
    folder = build_decoder(spec, tmp_path / "m", model=model)
    with pytest.raises(UnsupportedOperatorError, match=f"com.example::Frobnicate \\(nodes '{node.name}'"):
        LlmSession(folder)


def test_generated_config_round_trips():
    cfg = genai_config(VARIANTS["llama_shared"])
    assert cfg["search"]["past_present_share_buffer"] is True
    assert cfg["model"]["decoder"]["head_size"] == 16


# ---- sampling -------------------------------------------------------------------------------

def test_top_k_and_top_p_filters():
    logits = np.log(np.array([0.05, 0.5, 0.3, 0.15], np.float32))
    ids, probs = filtered_probabilities(logits, SamplingParams(temperature=1.0, top_k=2))
    assert ids.tolist() == [1, 2]
    np.testing.assert_allclose(probs, [0.5 / 0.8, 0.3 / 0.8], rtol=1e-6)
    ids, _ = filtered_probabilities(logits, SamplingParams(temperature=1.0, top_p=0.7))
    assert ids.tolist() == [1, 2]  # 0.5 < 0.7, 0.5 + 0.3 crosses it
    ids, _ = filtered_probabilities(logits, SamplingParams(temperature=1.0, top_p=0.5))
    assert ids.tolist() == [1]


def test_temperature_sharpens_and_seed_reproduces():
    logits = np.random.default_rng(0).standard_normal(50).astype(np.float32)
    params = SamplingParams(temperature=0.7, seed=3)
    draws = [sample(logits, params, np.random.default_rng(3)) for _ in range(3)]
    assert len(set(draws)) == 1
    assert sample(logits, SamplingParams(temperature=0.0), np.random.default_rng()) == int(np.argmax(logits))
    cold = np.random.default_rng(1)
    assert all(sample(logits, SamplingParams(temperature=1e-4), cold) == int(np.argmax(logits)) for _ in range(20))


@pytest.mark.parametrize("kwargs", [dict(temperature=-1.0), dict(top_k=-2), dict(top_p=0.0), dict(top_p=1.5),
                                    dict(temperature=float("nan"))])
def test_invalid_sampling_parameters(kwargs):
    with pytest.raises(InputError):
        SamplingParams(**kwargs)
