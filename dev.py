#!/usr/bin/env python3
"""Developer entry point: one command sets everything up and runs a job.

    python3 dev.py setup            create .venv, install onyxia + test deps, ensure Vulkan, and
                                    node/npm webgpu/chromium for tests/web
    python3 dev.py test [ARGS...]   setup, ruff (lint), then pytest (ARGS go to pytest)
    python3 dev.py demo             setup, then compile and run the bundled example model

Standard library only: it runs under the system python3 (>= 3.11) on a fresh machine, before any
virtual environment exists. On Debian/Ubuntu, as root, it installs what is missing with apt-get
(python3-venv; lavapipe = mesa-vulkan-drivers + libvulkan1; nodejs, npm and chromium for the web
runtime's tests); otherwise it says what to install.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
VENV_PY = VENV / "bin" / "python"
STAMP = VENV / ".onyxia-install-stamp"
EXAMPLE = ROOT / "examples" / "tiny_mlp.onnx"
APT_VULKAN = ["mesa-vulkan-drivers", "libvulkan1"]
# Bump when what ensure_installed() installs changes, so existing .venvs get it too.
INSTALL_LOGIC_VERSION = "2"
ICD_DIRS = ["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d"]

# Runs inside .venv: lists the adapters wgpu sees and the one it picks, as one JSON line.
PROBE = r"""
import json, sys
out = {"adapters": [], "chosen": None, "error": None}
def describe(a):
    return {"summary": a.summary, "backend": a.info.get("backend_type"),
            "type": a.info.get("adapter_type")}
try:
    import wgpu
    out["adapters"] = [describe(a) for a in wgpu.gpu.enumerate_adapters_sync()]
    a = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    out["chosen"] = describe(a) if a is not None else None
except Exception as e:
    out["error"] = f"{type(e).__name__}: {e}"
print("ONYXIA_PROBE " + json.dumps(out))
"""


class DevError(Exception):
    """A failure with a message for the user; printed without a traceback."""


def log(msg: str) -> None:
    print(f"[dev] {msg}", flush=True)


def run(cmd: list[str], *, env: dict | None = None, what: str | None = None) -> None:
    """Run a command with no stdin (CI has none); raise DevError if it fails."""
    try:
        proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, cwd=ROOT)
    except FileNotFoundError as e:
        raise DevError(f"cannot run {cmd[0]}: {e.strerror}") from None
    if proc.returncode != 0:
        raise DevError(f"{what or ' '.join(cmd)} failed (exit code {proc.returncode})")


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def can_apt() -> bool:
    return is_root() and shutil.which("apt-get") is not None


def apt_install(packages: list[str]) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-q"], env=env, what="apt-get update")
    run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
        env=env, what=f"apt-get install {' '.join(packages)}")


def ensure_xdg_runtime_dir() -> str | None:
    """Mesa (lavapipe) complains loudly when XDG_RUNTIME_DIR is unset; give it a private one.

    Returns the directory when this process created it (the caller removes it)."""
    if os.environ.get("XDG_RUNTIME_DIR"):
        return None
    path = tempfile.mkdtemp(prefix="onyxia-xdg-")  # mkdtemp creates it with mode 0700
    os.environ["XDG_RUNTIME_DIR"] = path
    return path


# --- virtual environment ---------------------------------------------------------------------


def venv_python_works() -> bool:
    if not VENV_PY.exists():
        return False
    probe = subprocess.run([str(VENV_PY), "-c", "import sys"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return probe.returncode == 0


def venv_has_pip() -> bool:
    probe = subprocess.run([str(VENV_PY), "-m", "pip", "--version"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return probe.returncode == 0


def missing_venv_modules() -> list[str]:
    """Debian splits venv/ensurepip out of python3 into the python3-venv package."""
    missing = []
    for name in ("venv", "ensurepip"):
        check = subprocess.run([sys.executable, "-c", f"import {name}"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if check.returncode != 0:
            missing.append(name)
    return missing


def ensure_venv_support() -> None:
    missing = missing_venv_modules()
    if not missing:
        return
    what = f"{sys.executable} lacks the module(s) {', '.join(missing)} needed by 'python3 -m venv'"
    is_debian_python = os.path.realpath(sys.executable).startswith("/usr/bin/")
    if not (is_debian_python and can_apt()):
        hint = ("install the python3-venv package (as root: apt-get install python3-venv)"
                if is_debian_python else "use a Python installation that includes venv and ensurepip")
        raise DevError(f"{what}; {hint}")
    log("installing python3-venv (venv/ensurepip missing)")
    apt_install(["python3-venv"])
    if missing_venv_modules():
        raise DevError(f"{what}, even after installing python3-venv")


def ensure_venv() -> None:
    if venv_python_works() and venv_has_pip():
        return
    ensure_venv_support()
    if VENV.exists() and not venv_python_works():
        # Left behind by another interpreter (or half-created): start over.
        log("recreating .venv (its python does not run)")
        run([sys.executable, "-m", "venv", "--clear", str(VENV)], what="python3 -m venv --clear")
    else:
        log("creating .venv")
        # On an existing venv without pip this (re)runs ensurepip and keeps what is installed.
        run([sys.executable, "-m", "venv", str(VENV)], what="python3 -m venv")
    if not venv_has_pip():
        raise DevError(".venv was created but has no pip (ensurepip failed)")


def install_stamp() -> str:
    """What the installed state depends on: pyproject.toml and the venv's interpreter."""
    digest = hashlib.sha256(INSTALL_LOGIC_VERSION.encode())
    digest.update((ROOT / "pyproject.toml").read_bytes())
    digest.update(os.path.realpath(VENV_PY).encode())
    return digest.hexdigest()


def onyxia_installed() -> bool:
    check = subprocess.run(
        [str(VENV_PY), "-c", "import importlib.metadata as m; m.version('onyxia')"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return check.returncode == 0


def build_requires() -> list[str]:
    """pyproject's [build-system] requires (hatchling): tests build the wheel without isolation,
    i.e. offline, so the build backend must be in .venv too."""
    import tomllib  # Python >= 3.11, checked in main()

    with open(ROOT / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f).get("build-system", {}).get("requires", []))


def ensure_installed(force: bool = False) -> None:
    stamp = install_stamp()
    current = STAMP.read_text().strip() if STAMP.exists() else None
    if not force and current == stamp and onyxia_installed():
        log("dependencies up to date (pyproject.toml unchanged since the last install)")
        return
    log('installing onyxia, test dependencies and the build backend (pip install -e ".[test]")')
    run([str(VENV_PY), "-m", "pip", "install", "--disable-pip-version-check", "-q",
         "--progress-bar", "off", "-e", ".[test]", *build_requires()],
        what="pip install -e .[test]")
    STAMP.write_text(stamp + "\n")


# --- Vulkan / wgpu adapter -------------------------------------------------------------------


def probe_adapters() -> dict:
    """Ask wgpu (inside .venv) which adapters it sees; returns the probe's JSON."""
    try:
        proc = subprocess.run([str(VENV_PY), "-c", PROBE], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        raise DevError("the wgpu adapter probe hung for 180 s") from None
    for line in proc.stdout.splitlines():
        if line.startswith("ONYXIA_PROBE "):
            result = json.loads(line[len("ONYXIA_PROBE "):])
            result["stderr"] = proc.stderr
            return result
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
    raise DevError(f"the wgpu adapter probe crashed (exit code {proc.returncode}):\n{tail}")


def has_vulkan_adapter(probe: dict) -> bool:
    return any(a["backend"] == "Vulkan" for a in probe["adapters"])


def libvulkan_present() -> bool:
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout
    except OSError:
        out = ""
    if "libvulkan.so.1" in out:
        return True
    # ldconfig may be missing or stale; fall back to the usual library directories.
    return any(glob.glob(f"{d}/libvulkan.so.1") for d in
               ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"))


def vulkan_icds() -> list[str]:
    return sorted(p for d in ICD_DIRS for p in glob.glob(f"{d}/*.json"))


def missing_vulkan_parts() -> list[str]:
    missing = []
    if not libvulkan_present():
        missing.append("the Vulkan loader libvulkan.so.1 (package libvulkan1)")
    if not any("lvp_icd" in os.path.basename(p) for p in vulkan_icds()):
        missing.append("lavapipe's ICD lvp_icd*.json in /usr/share/vulkan/icd.d "
                       "(package mesa-vulkan-drivers)")
    return missing


def adapter_ok(adapter: dict | None) -> bool:
    """A real adapter: Vulkan on Linux, any non-GL backend elsewhere (Metal, D3D12)."""
    if adapter is None:
        return False
    if os.environ.get("ONYXIA_ALLOW_GL") == "1":
        return True
    if platform.system() == "Linux":
        return adapter["backend"] == "Vulkan"
    return adapter["backend"] != "OpenGL"


def ensure_vulkan() -> dict:
    """Make sure wgpu reaches a Vulkan adapter, installing lavapipe if needed and allowed."""
    probe = probe_adapters()
    if platform.system() != "Linux" or has_vulkan_adapter(probe):
        return probe
    if os.environ.get("ONYXIA_ALLOW_GL") == "1" and probe["chosen"] is not None:
        return probe  # the developer accepts OpenGL; verify_adapter says which one
    missing = missing_vulkan_parts()
    if missing and can_apt():
        log("no Vulkan adapter: installing lavapipe (mesa-vulkan-drivers, libvulkan1)")
        apt_install(APT_VULKAN)
        probe = probe_adapters()
        if has_vulkan_adapter(probe):
            return probe
        missing = missing_vulkan_parts()
    seen = ", ".join(a["summary"] for a in probe["adapters"]) or "none"
    if missing:
        how = ("apt-get install did not provide them" if can_apt() else
               "run this again as root, or install them: apt-get install -y "
               + " ".join(APT_VULKAN))
        raise DevError("no Vulkan adapter for wgpu (adapters seen: " + seen + ").\n"
                       "      missing: " + "; ".join(missing) + "\n      " + how)
    raise DevError(_no_vulkan_message(probe, seen))


def _no_vulkan_message(probe: dict, seen: str) -> str:
    icds = ", ".join(os.path.basename(p) for p in vulkan_icds()) or "none"
    msg = (f"the Vulkan loader and ICDs are installed ({icds}) but wgpu sees no Vulkan "
           f"adapter (adapters seen: {seen})")
    if probe.get("error"):
        msg += f"\n      wgpu: {probe['error']}"
    tail = "\n".join(probe.get("stderr", "").strip().splitlines()[-10:])
    return msg + (f"\n{tail}" if tail else "")


def verify_adapter(probe: dict) -> None:
    chosen = probe["chosen"]
    if chosen is None:
        detail = f" ({probe['error']})" if probe.get("error") else ""
        raise DevError(f"wgpu found no adapter{detail}")
    if not adapter_ok(chosen):
        raise DevError(f"wgpu picked {chosen['summary']}, which is not a Vulkan adapter "
                       "(set ONYXIA_ALLOW_GL=1 to accept OpenGL anyway)")
    log(f"wgpu adapter: {chosen['summary']}")


# --- the web runtime's test tools (tests/web) ----------------------------------------------

WEB_TESTS = ROOT / "tests" / "web"
APT_WEB = {"node": "nodejs", "npm": "npm", "/usr/bin/chromium": "chromium"}


def ensure_web_tools() -> None:
    """node + npm's webgpu (Dawn) and Debian's chromium, which tests/web drive (playwright comes
    with the test extra). Installed with apt-get as root; otherwise a warning: those tests fail,
    saying what is missing, and the rest of the suite runs."""
    missing = [pkg for tool, pkg in APT_WEB.items()
               if not (Path(tool).is_file() if tool.startswith("/") else shutil.which(tool))]
    if missing and can_apt():
        log(f"installing the web runtime's test tools: {' '.join(missing)}")
        apt_install(missing)
        missing = []
    if missing:
        log(f"warning: {', '.join(missing)} missing (tests/web will fail): apt-get install -y {' '.join(missing)}")
        return
    stamp = WEB_TESTS / "node_modules" / ".onyxia-stamp"
    lock = hashlib.sha256((WEB_TESTS / "package-lock.json").read_bytes()).hexdigest()
    if stamp.is_file() and stamp.read_text().strip() == lock:
        return
    log("installing npm's webgpu into tests/web/node_modules (npm ci)")
    run(["npm", "ci", "--no-audit", "--no-fund", "--prefix", str(WEB_TESTS)], what="npm ci (tests/web)")
    stamp.write_text(lock + "\n")


# --- commands --------------------------------------------------------------------------------


def cmd_setup(args: list[str]) -> int:
    unknown = [a for a in args if a != "--force"]
    if unknown:
        raise DevError(f"setup: unknown argument(s) {' '.join(unknown)} (only --force)")
    ensure_venv()
    ensure_installed(force="--force" in args)
    verify_adapter(ensure_vulkan())
    ensure_web_tools()
    return 0


def chooses_workers(args: list[str]) -> bool:
    """True when the pytest args already pick xdist workers (-n N) or disable xdist."""
    for a in args:
        if a in ("-n", "--numprocesses") or a.startswith("--numprocesses="):
            return True
        if a.startswith("-n") and not a.startswith("--"):
            return True  # -n4, -nauto
        if a in ("no:xdist", "-pno:xdist"):
            return True
    return False


def xdist_installed() -> bool:
    check = subprocess.run([str(VENV_PY), "-c", "import xdist"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return check.returncode == 0


def run_lint() -> int:
    """ruff over the repository, configured in pyproject.toml (well under a second)."""
    log("running: ruff check .")
    code = subprocess.run([str(VENV_PY), "-m", "ruff", "check", "."], cwd=ROOT,
                          stdin=subprocess.DEVNULL).returncode
    if code != 0:
        log(f"ruff failed (exit code {code}); '.venv/bin/ruff check --fix' fixes some findings")
    return code


def cmd_test(args: list[str]) -> int:
    cmd_setup([])
    if run_lint() != 0:
        return 1  # lint findings fail the run before minutes of tests
    # The suite fails (instead of skipping) GPU tests when no adapter is reachable.
    os.environ.setdefault("ONYXIA_REQUIRE_GPU", "1")
    pytest_args = list(args)
    if not chooses_workers(pytest_args) and xdist_installed():
        pytest_args = ["-n", "auto", *pytest_args]
    log("running: python -m pytest " + " ".join(pytest_args))
    code = subprocess.run([str(VENV_PY), "-m", "pytest", *pytest_args], cwd=ROOT).returncode
    if code == 5:
        log("error: pytest collected no tests (exit code 5); treating it as a failure")
        return 1
    if code != 0:
        log(f"pytest failed (exit code {code})")
    return code


def cmd_demo(args: list[str]) -> int:
    if args:
        raise DevError(f"demo takes no arguments (got {' '.join(args)})")
    cmd_setup([])
    if not EXAMPLE.exists():
        log("creating the example models (examples/make_examples.py)")
        run([str(VENV_PY), "examples/make_examples.py"], what="python examples/make_examples.py")
        if not EXAMPLE.exists():
            raise DevError("examples/make_examples.py did not create examples/tiny_mlp.onnx")
    onyxia = str(VENV / "bin" / "onyxia")
    model = str(EXAMPLE.relative_to(ROOT))
    for sub, extra in (("compile", []), ("run", ["--check"])):
        cmd = [onyxia, sub, model, "--dim", "batch=4", *extra]
        log("running: onyxia " + " ".join(cmd[1:]))
        code = subprocess.run(cmd, cwd=ROOT, stdin=subprocess.DEVNULL).returncode
        if code != 0:
            log(f"error: onyxia {sub} failed (exit code {code})")
            return code
    log("demo finished")
    return 0


COMMANDS = {"setup": cmd_setup, "test": cmd_test, "demo": cmd_demo}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help") or argv[0] not in COMMANDS:
        print(__doc__.strip())
        return 0 if argv and argv[0] in ("-h", "--help", "help") else 2
    if sys.version_info < (3, 11):
        raise DevError(f"onyxia needs Python >= 3.11; {sys.executable} is "
                       f"{platform.python_version()}")
    created_xdg = ensure_xdg_runtime_dir()
    try:
        return COMMANDS[argv[0]](argv[1:])
    finally:
        if created_xdg:
            shutil.rmtree(created_xdg, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except DevError as e:
        log(f"error: {e}")
        sys.exit(1)
    except KeyboardInterrupt:
        log("interrupted")
        sys.exit(130)
