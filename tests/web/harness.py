"""Runs onyxia/web/onyxia.js for tests: in Node on Dawn (npm `webgpu`, tests/web/package.json)
and in headless Chromium driven by playwright. Both on SwiftShader, the CPU Vulkan that Debian's
chromium package ships (Dawn refuses Debian 12's Mesa 22.3 lavapipe). `python3 dev.py setup`
installs node, the npm package, chromium and playwright; a missing one FAILS the test (never a
skip), naming what to install. ONYXIA_WEB_ICD points Node at another Vulkan ICD (e.g. Mesa 25's).
Every launch is time-bounded: a broken adapter hangs requestAdapter instead of failing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

WEB_TESTS = Path(__file__).resolve().parent
SWIFTSHADER_ICD = Path("/usr/lib/chromium/vk_swiftshader_icd.json")
CHROMIUM = Path("/usr/bin/chromium")
SETUP_HINT = "run `python3 dev.py setup` (it installs nodejs, npm's webgpu, chromium and playwright)"


def _icd() -> str:
    icd = os.environ.get("ONYXIA_WEB_ICD") or str(SWIFTSHADER_ICD)
    if not Path(icd).is_file():
        pytest.fail(f"Vulkan ICD {icd} is missing (apt package chromium ships SwiftShader's): {SETUP_HINT}")
    return icd


def node_command(args: list[str], timeout: float = 60,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`node ARGS` in tests/web, time-bounded; fails the test when node is missing or fails."""
    node = shutil.which("node")
    if node is None:
        pytest.fail(f"node is not installed: {SETUP_HINT}")
    try:
        proc = subprocess.run([node, *args], cwd=WEB_TESTS, env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"node did not finish within {timeout} s (a hung WebGPU adapter?)")
    if proc.returncode != 0:
        pytest.fail(f"node exited with {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def run_node(spec: dict[str, Any], tmp_path: Path, timeout: float = 180) -> dict[str, Any]:
    """tests/web/run_node.mjs on `spec`; its JSON report."""
    return run_node_script("run_node.mjs", spec, tmp_path, timeout)


def as_array(output: dict[str, Any]) -> np.ndarray:
    """An output of the JS runtime ({dims, dtype, data}) as numpy."""
    return np.asarray(output["data"], dtype=np.dtype(output["dtype"] if output["dtype"] != "bool" else np.bool_)
                      ).reshape(output["dims"])


def run_node_script(script: str, spec: dict[str, Any], tmp_path: Path, timeout: float = 180) -> dict[str, Any]:
    """tests/web/SCRIPT on `spec` (a JSON file; the script writes its report to spec["out"])."""
    if not (WEB_TESTS / "node_modules" / "webgpu" / "package.json").is_file():
        pytest.fail(f"npm package webgpu is missing from tests/web/node_modules: {SETUP_HINT}")
    spec = {**spec, "out": str(tmp_path / f"{Path(script).stem}_report.json")}
    spec_path = tmp_path / f"{Path(script).stem}_spec.json"
    spec_path.write_text(json.dumps(spec))
    env = {**os.environ, "VK_ICD_FILENAMES": _icd(), "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp")}
    proc = node_command([str(WEB_TESTS / script), str(spec_path)], timeout, env)
    if not Path(spec["out"]).is_file():
        pytest.fail(f"node wrote no report:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(Path(spec["out"]).read_text())
