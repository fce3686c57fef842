"""onyxia sets Mesa llvmpipe's worker thread count at import unless the user chose one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

SCRIPT = "import os, onyxia; print(os.environ.get('LP_NUM_THREADS'))"


def _imported_value(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "LP_NUM_THREADS"}
    if env_value is not None:
        env["LP_NUM_THREADS"] = env_value
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_import_sets_twice_the_cores_when_unset():
    assert _imported_value(None) == str(min(2 * (os.cpu_count() or 1), 16))


def test_a_users_setting_is_kept():
    assert _imported_value("3") == "3"
