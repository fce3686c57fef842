"""The scripts under examples/ run as the README shows and agree with onnxruntime."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def run_example(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("script", ["examples/classify_image.py", "examples/sentence_embedding.py"])
def test_example_matches_onnxruntime(script, runtime):  # runtime: asserts a real adapter exists
    proc = run_example(script)
    assert proc.returncode == 0, proc.stderr
    diff = float(re.search(r"max \|difference\| from onnxruntime: (\S+)", proc.stdout).group(1))
    assert diff < 1e-4, proc.stdout


def test_generate_example_matches_onnxruntime_genai(runtime):
    proc = run_example("examples/generate.py", "--max-new-tokens", "12", "--check")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("The river ran past")
    assert "same tokens as onnxruntime-genai: True" in proc.stderr, proc.stderr
