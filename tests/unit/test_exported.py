"""The committed exporter fixtures: documented, small, every op registered (no GPU; they run in
tests/gpu/test_exported.py)."""

from __future__ import annotations

import pytest

from tests.builders.exported import (
    DATA,
    FILES,
    _dims,
    _feeds,
    _ort_session,
    _unregistered,
)


def test_every_exported_op_is_registered():
    missing = {f: _unregistered(f) for f in FILES if _unregistered(f)}
    assert not missing, f"exported models use ops onyxia does not register: {missing}"


def test_torchscript_encoder_only_runs_at_its_traced_seq() -> None:
    """Why SCHEDULES pins seq=7 for that file: onnxruntime fails at another seq too. If a newer
    torch exports it truly dynamic, this fails: re-export and drop the SCHEDULES entry."""
    name = "text_encoder.torchscript.onnx"
    with pytest.raises(Exception, match="Reshape"):
        _ort_session(name).run(None, _feeds(name, _dims(name, 2, 5), 0))


def test_exported_files_are_documented_and_small() -> None:
    readme = (DATA / "README.md").read_text()
    assert FILES, f"no exported models in {DATA}"
    for name in FILES:
        assert f"`{name}`" in readme, f"{name} is not listed in {DATA / 'README.md'}"
        assert (DATA / name).stat().st_size < 300_000, f"{name}: keep committed models tiny"
    assert sum((DATA / n).stat().st_size for n in FILES) < 2_000_000
