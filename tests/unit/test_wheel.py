"""The wheel ships the WGSL shaders, and an installed (non-editable) onyxia finds them.

The shaders live in the top-level shaders/ folder and pyproject.toml force-includes them as
onyxia/shaders. An editable install would find them through the source tree either way, so this
builds the real wheel, installs it into a throwaway venv and asks the installed package.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHADERS = ROOT / "shaders"

pytestmark = pytest.mark.slow  # a few seconds: builds a wheel and a venv

# Runs in the throwaway venv (cwd outside the repo, -I) so only the installed wheel is importable.
CHECK_INSTALLED = r"""
import json, sys, sysconfig
from pathlib import Path
import onyxia
out = {"onyxia": onyxia.__file__, "site": sysconfig.get_paths()["purelib"]}
if sys.argv[1] == "shaders":
    from onyxia.codegen.preprocess import shader_root
    root = Path(str(shader_root())).resolve()
    out["root"] = str(root)
    out["wgsl"] = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.wgsl"))
print(json.dumps(out))
"""


def source_shaders() -> set[str]:
    return {p.relative_to(SHADERS).as_posix() for p in SHADERS.rglob("*.wgsl")}


def _run(cmd: list, what: str, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, **kwargs)
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # Without build isolation (~1 s, offline) when the backend is in this venv, as dev.py
    # installs it; otherwise pip fetches hatchling into an isolated build env (needs PyPI).
    if importlib.util.find_spec("hatchling") is None:
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
               "-w", out, ROOT]
    elif importlib.util.find_spec("build") is not None:
        cmd = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", out, ROOT]
    else:
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
               "--disable-pip-version-check", "-w", out, ROOT]
    _run(cmd, "building the wheel")
    wheels = list(out.glob("onyxia-*.whl"))
    assert len(wheels) == 1, f"expected one onyxia wheel in {out}, found {wheels}"
    return wheels[0]


def test_wheel_contains_package_and_all_shaders(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "onyxia/__init__.py" in names
    prefix = "onyxia/shaders/"
    packed = {n[len(prefix):] for n in names if n.startswith(prefix) and n.endswith(".wgsl")}
    expected = source_shaders()
    assert expected, f"no .wgsl files under {SHADERS}"
    assert packed, f"the wheel has no {prefix}*.wgsl files"
    missing = sorted(expected - packed)
    assert not missing, f"shaders missing from the wheel: {missing}"


def _installed_venv(wheel: Path, tmp_path: Path) -> Path:
    """A fresh venv holding the wheel; dependencies come from the test venv via a .pth file."""
    venv_dir = tmp_path / "venv"
    # --without-pip saves ~4 s of ensurepip; the test venv's pip installs into it (--python).
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv_dir],
         "creating the venv")
    python = venv_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
          "--disable-pip-version-check", "-q", wheel], "pip install --no-deps <wheel>")
    # numpy, onnx, wgpu... live in the test venv. A path listed in a .pth file is not itself
    # scanned for .pth files, so the editable install of the source tree stays invisible there.
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                "locating site-packages").stdout.strip()
    ours = sysconfig.get_paths()
    deps = dict.fromkeys([ours["purelib"], ours["platlib"]])
    (Path(site) / "_onyxia_test_deps.pth").write_text("\n".join(deps) + "\n")
    return python


def _check_installed(python: Path, tmp_path: Path, what: str) -> dict:
    proc = _run([python, "-I", "-c", CHECK_INSTALLED, what], "importing the installed onyxia",
                cwd=tmp_path)
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    site = Path(info["site"]).resolve()
    assert site in Path(info["onyxia"]).resolve().parents, (
        f"onyxia was imported from {info['onyxia']}, not from the venv's {site}")
    return info


def test_installed_wheel_finds_its_shaders(wheel: Path, tmp_path: Path) -> None:
    python = _installed_venv(wheel, tmp_path)
    _check_installed(python, tmp_path, "import")
    info = _check_installed(python, tmp_path, "shaders")
    root, site = Path(info["root"]), Path(info["site"]).resolve()
    assert site in root.parents, f"shader_root() is {root}, outside site-packages {site}"
    found = set(info["wgsl"])
    assert found, f"shader_root() {root} holds no .wgsl files"
    missing = sorted(source_shaders() - found)
    assert not missing, f"installed shader_root() lacks: {missing}"
