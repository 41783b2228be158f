"""The explorer in a real browser: start `streamlit run app.py` on a free localhost port and drive headless
Chromium (Playwright) through Study (findings, figures, tables) -> Runs -> Attention -> Heads (head scores, the
patching heatmap, the training-step slider) -> a finding's runs opened from Study, on a small study folder
(tests/test_app.py's write_study: the session's tiny runs, a report folder and a figures folder).

Needs the `playwright` Python package (dev extra) and a Chromium: Debian's `chromium` (/usr/bin/chromium,
which .ci/run installs when it can), another on PATH, or MIXIT_CHROMIUM=/path/to/chrome. Without them the
test is skipped, saying which is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'
TIMEOUT_MS = 90_000


def find_chromium() -> str | None:
    """MIXIT_CHROMIUM, /usr/bin/chromium, or a Chromium/Chrome on PATH."""
    given = os.environ.get("MIXIT_CHROMIUM")
    if given:
        return given if Path(given).is_file() else None
    if Path("/usr/bin/chromium").is_file():
        return "/usr/bin/chromium"
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(explorer_runs, tmp_path):
    """`streamlit run app.py -- --runs runs/tiny` in a study folder, on a free port; yields its URL, stops it after."""
    from test_app import write_study

    runs = write_study(tmp_path, explorer_runs["root"])
    port = free_port()
    log = open(tmp_path / "streamlit.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(REPO / "app.py"), "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
         "--", "--runs", str(runs)],
        cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"streamlit did not start: {(tmp_path / 'streamlit.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


IDLE = "() => document.querySelector('[data-testid=stApp]')?.getAttribute('data-test-script-state') === 'notRunning'"


def wait_until_idle(page) -> None:
    """Wait until the script run that the last action started has finished."""
    page.wait_for_timeout(300)  # let the rerun begin
    page.wait_for_function(IDLE, timeout=TIMEOUT_MS)


def open_view(page, name: str) -> None:
    """Click a page in the sidebar's navigation and wait until it has drawn."""
    page.locator('[data-testid="stSidebarNav"]').get_by_text(name, exact=True).click()
    page.get_by_role("heading", name=name, exact=True).wait_for(timeout=TIMEOUT_MS)
    wait_until_idle(page)


def check_study(page) -> None:
    """The Study page: both findings with their verdicts, the figures, and the report's tables."""
    page.get_by_role("heading", name="Study", exact=True).wait_for(timeout=TIMEOUT_MS)
    wait_until_idle(page)
    page.get_by_text("1. Attention retrieves").wait_for(timeout=TIMEOUT_MS)
    page.get_by_text("2. MLP memorizes").wait_for(timeout=TIMEOUT_MS)
    page.get_by_text("a reproduction failure").first.wait_for(timeout=TIMEOUT_MS)
    for heading in ("Findings", "Figures", "Who does the work", "Where the findings emerge"):
        page.get_by_role("heading", name=heading, exact=True).wait_for(timeout=TIMEOUT_MS)
    figures = page.locator('[data-testid="stMain"] img')  # the browser fetches each figure after the script ran
    figures.nth(1).wait_for(timeout=TIMEOUT_MS)
    assert figures.count() == 2
    assert page.locator(ERRORS).count() == 0, page.locator(ERRORS).all_inner_texts()


def test_study_runs_attention_heads_in_a_browser(server, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed "
                                   "(pip install playwright; it is in the dev extra)")
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no Chromium to drive: install Debian's chromium (apt-get install chromium) or set MIXIT_CHROMIUM")
    with sync_api.sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=chromium, headless=True)
        except sync_api.Error as e:
            pytest.skip(f"Chromium at {chromium} does not start: {str(e).splitlines()[0]}")
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            page.goto(server, timeout=TIMEOUT_MS)
            check_study(page)
            page.screenshot(path=str(tmp_path / "study.png"), full_page=True)

            open_view(page, "Runs")
            page.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=TIMEOUT_MS)
            assert "8" in page.locator('[data-testid="stMetricValue"]').first.inner_text()
            assert page.locator(ERRORS).count() == 0

            open_view(page, "Attention")
            # The run that kept checkpoints; the Heads view then opens on it and its study's other variants.
            page.locator('[data-testid="stMain"]').get_by_role("combobox").first.click()  # the page's Run, not the sidebar
            page.keyboard.type("retrieval-frozen_qk")
            page.keyboard.press("Enter")
            wait_until_idle(page)
            page.locator(".js-plotly-plot").nth(1).wait_for(timeout=TIMEOUT_MS)  # the grid and one enlarged head
            page.locator('[data-testid="stMain"]').get_by_text("L0 H1", exact=True).click()  # a pill: "click a head to enlarge"
            wait_until_idle(page)
            page.get_by_text("layer 0, head 1").first.wait_for(timeout=TIMEOUT_MS)
            assert page.locator(ERRORS).count() == 0

            open_view(page, "Heads")
            page.get_by_text("induction score").first.wait_for(timeout=TIMEOUT_MS)
            assert page.locator(".js-plotly-plot").count() >= 5  # four scores, patching, and one head's pattern
            page.get_by_role("heading", name="Activation patching: which heads carry the answer").wait_for(
                timeout=TIMEOUT_MS)
            page.get_by_text("fraction of the logit difference restored").first.wait_for(timeout=TIMEOUT_MS)
            page.get_by_role("heading", name="Who does the work: attention and MLP").wait_for(timeout=TIMEOUT_MS)
            page.get_by_text("accuracy lost by mean ablation").first.wait_for(timeout=TIMEOUT_MS)
            # The step slider: from "final" to the first kept checkpoint (step 0), with the keyboard.
            slider = page.get_by_role("slider").first
            assert slider.get_attribute("aria-valuetext") == "final"
            slider.focus()
            page.keyboard.press("Home")
            wait_until_idle(page)
            assert page.get_by_role("slider").first.get_attribute("aria-valuetext") == "0"
            page.get_by_text("the checkpoint kept at step 0").first.wait_for(timeout=TIMEOUT_MS)
            shot = tmp_path / "heads.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            assert page.locator(ERRORS).count() == 0, page.locator(ERRORS).all_inner_texts()

            # A finding's runs, opened from Study: they become the selection and the Runs page opens.
            open_view(page, "Study")
            page.get_by_role("button", name="Open in Runs").first.click()
            page.get_by_role("heading", name="Runs", exact=True).wait_for(timeout=TIMEOUT_MS)
            wait_until_idle(page)
            sidebar = page.locator('[data-testid="stSidebar"]')
            assert "retrieval/retrieval-mixit" in sidebar.inner_text()
            assert page.locator(ERRORS).count() == 0, page.locator(ERRORS).all_inner_texts()
        finally:
            browser.close()
