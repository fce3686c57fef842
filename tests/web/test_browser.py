"""`onyxia web` end to end: the folder it writes, served over HTTP and opened in headless
Chromium (WebGPU on its SwiftShader), runs the model on DIR/sample_inputs.npz; the page's
window.onyxiaResult matches onnxruntime on the same inputs, the page reports success in its DOM,
and a screenshot of it is taken. Chromium comes from apt (`chromium`), driven by pip's
playwright with executable_path — no browser download; each launch and wait is time-bounded.
"""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest

from onyxia.cli import main as onyxia_main
from tests.helpers import run_ort
from tests.web.cases import ATOL, EXAMPLE, TOLERANCE, WEB_MODELS, web_case
from tests.web.harness import CHROMIUM, SETUP_HINT, as_array

pytestmark = pytest.mark.web
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--enable-unsafe-webgpu"]
PAGE_TIMEOUT_MS = 120_000


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def _serve(folder: Path) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _open_page(url: str, screenshot: Path) -> tuple[dict, str]:
    """(window.onyxiaResult, the #status element's class) after the page finishes."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(f"pip package playwright is missing: {SETUP_HINT}")
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing (apt package chromium): {SETUP_HINT}")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=60_000)
        try:
            page = browser.new_page()
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            page.goto(url)
            page.wait_for_function("window.onyxiaResult !== undefined", timeout=PAGE_TIMEOUT_MS)
            result = page.evaluate("window.onyxiaResult")
            status = page.get_attribute("#status", "class") or ""
            page.screenshot(path=str(screenshot))
        finally:
            browser.close()
    return result, status


def open_folder(folder: Path, screenshot: Path) -> dict:
    """window.onyxiaResult of `folder`'s index.html served over HTTP, after checking that the page
    succeeded (its DOM says so), left a screenshot and ran on a real CPU-type adapter (SwiftShader)."""
    server = _serve(folder)
    try:
        result, status = _open_page(f"http://127.0.0.1:{server.server_address[1]}/index.html", screenshot)
    finally:
        server.shutdown()
    assert result["ok"], result.get("error")
    assert status == "ok" and screenshot.stat().st_size > 1000
    assert "(cpu)" in result["adapter"], result["adapter"]
    return result


@pytest.mark.parametrize("name", WEB_MODELS)
def test_web_folder_runs_in_headless_chromium(name: str, tmp_path: Path) -> None:
    case, model, _ = web_case(name)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    dims = [f"{k}={v}" for k, v in case.compile_dims.items()]
    out = tmp_path / "site"
    assert onyxia_main(["web", str(path), "-o", str(out), *[a for d in dims for a in ("--dim", d)]]) == 0
    assert {"model.json", "onyxia.js", "index.html", "sample_inputs.npz"} <= {p.name for p in out.iterdir()}
    # The page runs what the folder's sample_inputs.npz holds: the case's own inputs (a BERT mask
    # of zeros and ones, not the random integers `onyxia web` samples).
    np.savez(out / "sample_inputs.npz", **case.feeds(case.compile_dims, 0))
    result = open_folder(out, tmp_path / "page.png")
    with np.load(out / "sample_inputs.npz") as npz:
        feeds = {k: npz[k] for k in npz.files}
    for output, ref in zip(model.graph.output, run_ort(model, feeds)):
        got = as_array(result["outputs"][output.name])
        assert got.shape == ref.shape
        tol = TOLERANCE.get(name, ATOL)
        np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=tol, atol=tol,
                                   err_msg=output.name)


def test_web_page_reports_a_failure_in_the_contract(tmp_path: Path) -> None:
    """A folder whose weights are missing: the page sets {ok: false, error} naming the chunk."""
    out = tmp_path / "site"
    assert onyxia_main(["web", str(EXAMPLE), "-o", str(out), "--dim", "batch=2"]) == 0
    (out / "weights_0.bin").unlink()
    server = _serve(out)
    try:
        result, status = _open_page(f"http://127.0.0.1:{server.server_address[1]}/index.html", tmp_path / "page.png")
    finally:
        server.shutdown()
    assert result["ok"] is False and status == "error"
    assert "PlanError" in result["error"] and "weights_0.bin" in result["error"], result["error"]
