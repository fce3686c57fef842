"""Issue 12 root cause 7: every user error at the command line is one `onyxia: error:` line.

Each case runs `onyxia.cli.main` in its own process (what the console script calls); an exception
escaping main() is the traceback a user would see, and fails the case.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.builders.hostile import h, make_model, relu_model, run_cli
from tests.builders.isolate import expect_value


def prepare(tmp: Path, kind: str) -> list[str]:
    """Files for one case; returns the argv."""
    model = tmp / "m.onnx"
    onnx.save(relu_model(), model)
    if kind == "compile_into_missing_dir":
        return ["compile", str(model), "-o", str(tmp / "nope" / "m.onyxia")]
    if kind == "compile_onto_directory":
        return ["compile", str(model), "-o", str(tmp)]
    if kind == "bench_zero_iterations":
        return ["bench", str(model), "--iterations", "0", "--no-ort"]
    if kind == "bench_negative_warmup":
        return ["bench", str(model), "--warmup", "-1", "--no-ort"]
    if kind == "check_rejected_by_onnxruntime":
        gather = make_model([h.make_node("Gather", ["data", "idx"], ["y"], name="g")],
                            [("data", np.float32, [4, 2]), ("idx", np.int64, [2])], ["y"])
        onnx.save(gather, tmp / "g.onnx")
        np.save(tmp / "idx.npy", np.int64([1, 9]))  # row 9 of 4: onnxruntime raises
        return ["run", str(tmp / "g.onnx"), "--input", f"idx={tmp / 'idx.npy'}", "--check"]
    if kind == "duplicate_initializer":
        m = make_model([h.make_node("Add", ["x", "w"], ["y"])], [("x", np.float32, [2])], ["y"],
                       {"w": np.ones(2, np.float32)})
        m.graph.initializer.append(m.graph.initializer[0])
        onnx.save(m, tmp / "dup.onnx")
        return ["inspect", str(tmp / "dup.onnx")]
    if kind == "recursion_dim_param":
        onnx.save(relu_model("-" * 999 + "n"), tmp / "deep.onnx")
        return ["inspect", str(tmp / "deep.onnx")]
    if kind == "empty_model_file":
        (tmp / "empty.onnx").write_bytes(b"")
        return ["inspect", str(tmp / "empty.onnx")]
    if kind == "model_is_a_directory":
        return ["run", str(tmp)]
    if kind == "pickled_input":
        np.save(tmp / "x.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
        return ["run", str(model), "--input", f"x={tmp / 'x.npy'}"]
    if kind == "dim_not_an_integer":
        return ["run", str(model), "--dim", "n=abc"]
    if kind == "unknown_dim":
        return ["compile", str(model), "--dim", "nonesuch=3"]
    if kind == "plan_that_is_not_a_plan":
        (tmp / "bad.onyxia").write_bytes(b"PK\x03\x04 not really a zip")
        return ["run", str(tmp / "bad.onyxia")]
    if kind in ("genai_bad_pattern", "generate_max_length_zero"):
        from tests.builders.hostile import decoder_folder

        edits = {"model.decoder.inputs.past_key_names": "past_%"} if kind == "genai_bad_pattern" else {}
        folder = decoder_folder(tmp / "llm", **edits)
        extra = ["--max-length", "0"] if kind == "generate_max_length_zero" else []
        return ["generate", str(folder), "--prompt", "the sun", "--max-new-tokens", "2", *extra]
    raise AssertionError(kind)


def cli_case(tmp: str, kind: str) -> tuple[int, str, str]:
    return run_cli(prepare(Path(tmp), kind))


CASES = {
    "compile_into_missing_dir": "directory .* does not exist",
    "compile_onto_directory": "is a directory",
    "bench_zero_iterations": "--iterations must be at least 1",
    "bench_negative_warmup": "--warmup at least 0",
    "check_rejected_by_onnxruntime": "(--check: onnxruntime cannot run|node 'g'.*index)",
    "duplicate_initializer": "initializer 'w' is declared twice",
    "recursion_dim_param": "input 'x' dim 0: dimension expression",
    "empty_model_file": "empty.onnx",
    "model_is_a_directory": "an LLM folder needs genai_config.json",
    "pickled_input": "--input x: cannot read",
    "dim_not_an_integer": "--dim n: 'abc' is not an integer",
    "unknown_dim": "nonesuch",
    "plan_that_is_not_a_plan": "bad.onyxia",
    "genai_bad_pattern": "past_key_names.*one %d",
    "generate_max_length_zero": "max_length must be an integer >= 2, got 0",
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_user_error_is_one_line(tmp_path, kind):
    code, _out, err = expect_value(cli_case, str(tmp_path), kind, timeout=120)
    lines = err.strip().splitlines()
    assert code == 1, f"exit code {code}, stderr: {err}"
    assert len(lines) == 1 and lines[0].startswith("onyxia: error: "), f"stderr: {err}"
    assert "internal error" not in lines[0] and "Traceback" not in err
    assert re.search(CASES[kind], lines[0]), lines[0]


def test_console_entry_point_prints_one_line(tmp_path):
    """The real command, in a fresh interpreter: exit status 1 and one line on stderr."""
    (tmp_path / "empty.onnx").write_bytes(b"")
    proc = subprocess.run([sys.executable, "-m", "onyxia.cli", "inspect", str(tmp_path / "empty.onnx")],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("onyxia: error: ") and "empty.onnx" in proc.stderr
