"""Issue 12 root cause 3: no file outside the model's folder is ever read.

genai_config.json's decoder.filename, tokenizer.json and external-data locations must resolve
inside the model folder (no '..', no absolute path, no symlink out of it); a model given as bytes
or a ModelProto never reads external data relative to the current directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest

from onyxia.errors import ConfigError, ModelLoadError
from tests.builders.hostile import compile_and_run, decoder_folder, external_model
from tests.builders.isolate import expect_error, expect_value

X = np.linspace(-1, 1, 8, dtype=np.float32)


# ---- genai_config.json / LLM folders --------------------------------------------------------

def genai_filename_case(tmp: str, filename_kind: str) -> None:
    from onyxia.llm import LlmSession

    root = Path(tmp)
    decoder_folder(root / "outside")  # a real, loadable model outside the folder
    folder = decoder_folder(root / "model")
    filename = {"dotdot": "../outside/model.onnx", "absolute": str(root / "outside" / "model.onnx"),
                "symlink": "escape.onnx", "nested_dotdot": "sub/../../outside/model.onnx"}[filename_kind]
    os.symlink(root / "outside" / "model.onnx", folder / "escape.onnx")
    (folder / "sub").mkdir()
    text = (folder / "genai_config.json").read_text().replace('"model.onnx"', f'"{filename}"')
    (folder / "genai_config.json").write_text(text)
    LlmSession(folder, max_length=8)


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink", "nested_dotdot"])
def test_decoder_filename_outside_the_folder_is_refused(tmp_path, kind):
    expect_error(genai_filename_case, str(tmp_path), kind, error=ConfigError,
                 match=r"model\.decoder\.filename", timeout=120)


def generate_through_inner_symlink(tmp: str) -> list[int]:
    from onyxia.llm import LlmSession

    folder = decoder_folder(Path(tmp) / "model")
    (folder / "weights").mkdir()
    os.rename(folder / "model.onnx", folder / "weights" / "model.onnx")
    os.rename(folder / "model.onnx.data", folder / "weights" / "model.onnx.data")
    os.symlink("weights/model.onnx", folder / "model.onnx")  # inside the folder: fine
    # The decoder's own folder is where its external data lives (onnx's convention).
    os.symlink("weights/model.onnx.data", folder / "model.onnx.data")
    return LlmSession(folder, max_length=12).generate([1, 5, 7], max_new_tokens=3)


def test_symlinks_inside_the_folder_load(tmp_path):
    tokens = expect_value(generate_through_inner_symlink, str(tmp_path), timeout=120)
    assert len(tokens) == 3


def optimum_decoder_symlink_out(tmp: str) -> None:
    """Optimum's layout has no genai_config.json; its decoder file name is fixed, but may be a
    symlink out of the folder."""
    import json

    from onyxia.llm.hf_config import load_hf_config

    root = Path(tmp)
    outside = decoder_folder(root / "outside")
    folder = root / "model"
    (folder / "onnx").mkdir(parents=True)
    os.symlink(outside / "model.onnx", folder / "onnx" / "model.onnx")
    (folder / "config.json").write_text(json.dumps({
        "num_attention_heads": 2, "hidden_size": 32, "num_hidden_layers": 1, "num_key_value_heads": 1,
        "max_position_embeddings": 32, "vocab_size": 64, "eos_token_id": 2}))
    load_hf_config(folder)


def test_optimum_decoder_symlink_out_of_the_folder_is_refused(tmp_path):
    expect_error(optimum_decoder_symlink_out, str(tmp_path), error=ConfigError, match="onnx/model.onnx.*outside")


def tokenizer_symlink_out(tmp: str) -> None:
    from onyxia.llm.config import load_tokenizer

    root = Path(tmp)
    folder = decoder_folder(root / "model")
    os.rename(folder / "tokenizer.json", root / "tokenizer.json")
    os.symlink(root / "tokenizer.json", folder / "tokenizer.json")
    load_tokenizer(folder)


def test_tokenizer_symlink_out_of_the_folder_is_refused(tmp_path):
    expect_error(tokenizer_symlink_out, str(tmp_path), error=ConfigError, match="tokenizer.json.*outside")


# ---- bytes and ModelProto sources -------------------------------------------------------------

def bytes_with_external_data_from_cwd(tmp: str) -> dict:
    folder = Path(tmp)
    model = external_model(folder)
    os.chdir(folder)  # w.bin is right here: it must still not be read
    return compile_and_run(model.SerializeToString(), {"x": X})


def test_bytes_with_external_data_do_not_read_the_cwd(tmp_path):
    expect_error(bytes_with_external_data_from_cwd, str(tmp_path), error=ModelLoadError,
                 match="initializer 'w'.*base_dir")


def proto_with_external_data_from_cwd(tmp: str) -> dict:
    folder = Path(tmp)
    model = external_model(folder)
    os.chdir(folder)
    return compile_and_run(model, {"x": X})


def test_proto_with_external_data_does_not_read_the_cwd(tmp_path):
    expect_error(proto_with_external_data_from_cwd, str(tmp_path), error=ModelLoadError, match="base_dir")


def external_data_with_base_dir(tmp: str, as_bytes: bool) -> None:
    folder = Path(tmp) / "model"
    w = np.float32([3, 1, 4, 1, 5, 9, 2, 6])
    model = external_model(folder, values=w)
    before = model.SerializeToString()
    source = before if as_bytes else model
    out = compile_and_run(source, {"x": X}, base_dir=str(folder))
    np.testing.assert_array_equal(out["y"], X + w)
    assert model.SerializeToString() == before, "the caller's ModelProto was modified"


@pytest.mark.parametrize("as_bytes", [True, False], ids=["bytes", "proto"])
def test_external_data_with_base_dir_loads(tmp_path, as_bytes):
    expect_value(external_data_with_base_dir, str(tmp_path), as_bytes)


# ---- external data locations ------------------------------------------------------------------

def load_with_location(tmp: str, kind: str) -> None:
    import onyxia

    root = Path(tmp)
    folder = root / "model"
    external_model(root)  # root/w.bin: a real file outside the model folder
    location = {
        "dotdot": "../w.bin",
        "absolute": str(root / "w.bin"),
        "windows_dotdot": "..\\w.bin",
        "windows_drive": "C:\\w.bin",
        "symlink_out": "link.bin",
        "missing": "nothing.bin",
        "directory": "adir",
        "fifo": "pipe.bin",
        "empty": "",
    }[kind]
    model = external_model(folder, location)
    os.symlink(root / "w.bin", folder / "link.bin")
    (folder / "adir").mkdir()
    os.mkfifo(folder / "pipe.bin")  # opening it for reading would block forever
    onnx.save(model, folder / "m.onnx")
    onyxia.load_model(folder / "m.onnx")


@pytest.mark.parametrize("kind,match", [
    ("dotdot", r"contains '\.\.'"),
    ("absolute", "absolute"),
    ("windows_dotdot", r"contains '\.\.'"),
    ("windows_drive", "absolute"),
    ("symlink_out", "outside"),
    ("missing", "does not exist"),
    ("directory", "not a regular file"),
    ("fifo", "not a regular file"),
    ("empty", "file name"),
])
def test_external_data_location_is_checked(tmp_path, kind, match):
    expect_error(load_with_location, str(tmp_path), kind, error=ModelLoadError,
                 match=f"initializer 'w'.*{match}")


def load_with_bounds(tmp: str, offset: str, length: str, extra_key: str | None) -> None:
    import onyxia

    folder = Path(tmp)
    model = external_model(folder)
    entries = {e.key: e for e in model.graph.initializer[0].external_data}
    entries["offset"].value, entries["length"].value = offset, length
    if extra_key:
        entry = model.graph.initializer[0].external_data.add()
        entry.key, entry.value = extra_key, "1"
    onnx.save(model, folder / "m.onnx")
    onyxia.load_model(folder / "m.onnx")


@pytest.mark.parametrize("offset,length,extra,match", [
    ("0", "4096", None, "do not fit"),  # longer than the tensor
    ("-8", "32", None, "do not fit"),
    ("16", "32", None, "which has 32"),  # runs past the end of the file
    ("zero", "32", None, "must be integers"),
    ("0", "32", "evil", "unknown external data keys"),
])
def test_external_data_bounds_are_checked(tmp_path, offset, length, extra, match):
    expect_error(load_with_bounds, str(tmp_path), offset, length, extra, error=ModelLoadError,
                 match=f"initializer 'w'.*{match}")


def load_through_inner_symlink(tmp: str) -> None:
    folder = Path(tmp)
    model = external_model(folder, "alias.bin")
    os.symlink("w.bin", folder / "alias.bin")
    onnx.save(model, folder / "m.onnx")
    out = compile_and_run(str(folder / "m.onnx"), {"x": X})
    np.testing.assert_array_equal(out["y"], X + np.arange(8, dtype=np.float32))


def test_external_data_through_a_symlink_inside_the_folder_loads(tmp_path):
    expect_value(load_through_inner_symlink, str(tmp_path))
