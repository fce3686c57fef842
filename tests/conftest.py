"""Test-suite wiring: a private XDG_RUNTIME_DIR, the `gpu` marker, and the wgpu adapter fixture.

GPU tests are never skipped silently. Tests under tests/gpu/ (or marked `gpu`) need a real wgpu
adapter: Vulkan (lavapipe in CI, backend "Vulkan", adapter type "CPU"), Metal or D3D12 — OpenGL
only with ONYXIA_ALLOW_GL=1. Without one they FAIL when ONYXIA_REQUIRE_GPU=1 or CI is set (what
`python3 dev.py test` and CI do) and skip with the reason otherwise (a laptop without a GPU).
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Mesa's lavapipe prints "XDG_RUNTIME_DIR is invalid or not set" on every device creation. Set a
# private one before anything imports wgpu, instead of filtering its stderr (real errors stay).
if not os.environ.get("XDG_RUNTIME_DIR"):
    _xdg_dir = tempfile.mkdtemp(prefix="onyxia-xdg-")  # created with mode 0700
    os.environ["XDG_RUNTIME_DIR"] = _xdg_dir
    atexit.register(shutil.rmtree, _xdg_dir, ignore_errors=True)

# Kernel variants (tuned Select steps): the deterministic heuristic unless the run asks for tuning
# (ONYXIA_TUNE=1 python3 dev.py test runs the suite with it on); either way the tuning cache
# lives in a private folder, never in the user's ~/.cache.
os.environ.setdefault("ONYXIA_TUNE", "0")
if not os.environ.get("ONYXIA_CACHE_DIR"):
    _cache_dir = tempfile.mkdtemp(prefix="onyxia-cache-")
    os.environ["ONYXIA_CACHE_DIR"] = _cache_dir
    atexit.register(shutil.rmtree, _cache_dir, ignore_errors=True)

GPU_TEST_DIR = (Path(__file__).parent / "gpu").resolve()


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def gpu_required() -> bool:
    """Missing adapter = failure (dev.py test, CI) rather than a skip."""
    return _env_flag("ONYXIA_REQUIRE_GPU") or _env_flag("CI")


@functools.lru_cache(maxsize=1)
def _probe_adapter():
    """(adapter, None) for a usable adapter, else (None, why not). Probed once per process."""
    try:
        import wgpu
    except Exception as e:  # noqa: BLE001 - any import failure means no GPU tests
        return None, f"wgpu cannot be imported ({type(e).__name__}: {e})"
    try:
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except Exception as e:  # noqa: BLE001 - wgpu raises various errors when nothing is found
        return None, f"wgpu found no adapter ({type(e).__name__}: {e})"
    if adapter is None:
        return None, "wgpu found no adapter"
    backend = adapter.info["backend_type"]
    if backend == "OpenGL" and not _env_flag("ONYXIA_ALLOW_GL"):
        return None, (f"wgpu only offers an OpenGL adapter ({adapter.summary}); install a "
                      "Vulkan driver (apt-get install mesa-vulkan-drivers libvulkan1) or set "
                      "ONYXIA_ALLOW_GL=1")
    return adapter, None


def _no_adapter(reason: str) -> None:
    message = f"GPU test needs a real wgpu adapter: {reason}"
    if gpu_required():
        pytest.fail(message + " (ONYXIA_REQUIRE_GPU/CI is set, so this fails instead of "
                    "skipping; `python3 dev.py setup` installs lavapipe)", pytrace=False)
    pytest.skip(message)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a real wgpu adapter (lavapipe in CI)")
    config.addinivalue_line("markers", "slow: takes seconds (builds, installs, big models)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if GPU_TEST_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.gpu)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is None:
        return
    adapter, reason = _probe_adapter()
    if adapter is None:
        _no_adapter(reason)


@pytest.fixture(scope="session")
def wgpu_adapter():
    """The adapter GPU tests run on; asserts it is real (not None, not OpenGL by default)."""
    adapter, reason = _probe_adapter()
    if adapter is None:
        _no_adapter(reason)
    assert adapter is not None
    if not _env_flag("ONYXIA_ALLOW_GL"):
        assert adapter.info["backend_type"] != "OpenGL", adapter.summary
    return adapter


@pytest.fixture
def heuristic(monkeypatch):
    """Kernel variants as the deterministic heuristic picks them, whatever the run asks for
    (for tests of that choice: with ONYXIA_TUNE=1 the tuner would pick by timing)."""
    monkeypatch.setenv("ONYXIA_TUNE", "0")


@pytest.fixture(scope="session")
def runtime(wgpu_adapter):
    """One onyxia Runtime (wgpu device) for the whole session, on a real adapter."""
    from onyxia.runtime import Runtime

    rt = Runtime()
    assert rt.info.backend != "OpenGL" or _env_flag("ONYXIA_ALLOW_GL"), rt.describe()
    return rt
