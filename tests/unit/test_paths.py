"""resolve_inside: a file name from a model folder must stay inside that folder."""

from __future__ import annotations

import os

import pytest

from onyxia.errors import ConfigError, OnyxiaError
from onyxia.paths import resolve_inside


@pytest.mark.parametrize("name,match", [
    ("../x", r"contains '\.\.'"),
    ("a/../../x", r"contains '\.\.'"),
    ("a/../b", r"contains '\.\.'"),  # harmless, but '..' is refused outright: no guessing
    ("..\\x", r"contains '\.\.'"),
    ("/etc/passwd", "absolute"),
    ("C:\\x", "absolute"),
    ("C:x", "absolute"),
    ("\\\\server\\share\\x", "absolute"),
    ("", "file name"),
    ("  ", "file name"),
    ("a\0b", "NUL"),
    (None, "file name"),
    (3, "file name"),
])
def test_hostile_names_are_refused(tmp_path, name, match):
    with pytest.raises(ConfigError, match=match):
        resolve_inside(tmp_path, name, "field 'f'", ConfigError)


def test_symlinks_resolve_and_must_stay_inside(tmp_path):
    inside, outside = tmp_path / "m", tmp_path / "o"
    inside.mkdir(), outside.mkdir()
    (inside / "real.bin").write_bytes(b"x")
    (outside / "secret").write_bytes(b"x")
    os.symlink("real.bin", inside / "alias.bin")
    os.symlink(outside / "secret", inside / "escape.bin")
    os.symlink(outside, inside / "door")
    assert resolve_inside(inside, "alias.bin", "w") == (inside / "real.bin").resolve()
    assert resolve_inside(inside, "sub/new.bin", "w") == (inside / "sub" / "new.bin").resolve()
    for name in ("escape.bin", "door/secret"):
        with pytest.raises(OnyxiaError, match="outside"):
            resolve_inside(inside, name, "w")


def test_symlink_loop_is_an_error(tmp_path):
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    with pytest.raises(OnyxiaError, match="'a'"):
        resolve_inside(tmp_path, "a", "w")
