"""A real browser on the running dashboard: headless Chromium (Debian's ``chromium``, driven by Playwright)
opens the Misplacements page of ``streamlit run dashboard/app.py`` (started the way ``phasefit dashboard``
starts it, on a free loopback port, against the seeded store), waits for the table, checks that the seeded
misplaced workers are on screen, and saves a screenshot to ``artifacts/dashboard-misplacements.png``.

Skipped, with the reason, where Chromium is not installed; under ``CI=true`` that is a failure instead.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from phasefit.cli.dashboard import child_environment, streamlit_command
from tests.availability import unavailable
from tests.dashboard.seed import Seeded
from tests.dashboard.test_hostile_names import hostile_copy

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = pytest.mark.e2e


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _require_chromium() -> None:
    if CHROMIUM.exists():
        return
    unavailable(f"{CHROMIUM} is not installed (Debian package 'chromium')", "the browser test")


@pytest.fixture
def dashboard_url(seeded: Seeded, tmp_path: Path) -> Iterator[str]:
    yield from _serve(seeded.url, tmp_path)


@pytest.fixture
def hostile_dashboard(seeded: Seeded, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """The dashboard on a copy of the store whose misplaced workers have hostile ids (Markdown and HTML that
    would fetch an image from, or link to, evil.example); its URL and seeded id -> hostile id."""
    _require_chromium()
    url, names = hostile_copy(seeded, tmp_path)
    for served in _serve(url, tmp_path):
        yield served, names


def _serve(database_url: str, tmp_path: Path) -> Iterator[str]:
    _require_chromium()
    port = _free_port()
    env = child_environment(os.environ, database_url=database_url, source="store", api_url=None)
    env["HOME"] = str(tmp_path)  # Streamlit keeps its machine id and credentials under ~/.streamlit
    log = (tmp_path / "streamlit.log").open("wb")
    process = subprocess.Popen(
        streamlit_command("127.0.0.1", port), env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"streamlit did not start: {(tmp_path / 'streamlit.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def test_misplacements_page_in_chromium(dashboard_url: str, seeded: Seeded) -> None:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1400})
            page.goto(f"{dashboard_url}/misplacements", timeout=30_000)
            table = page.locator('[data-testid="stTable"]').first
            table.wait_for(state="visible", timeout=30_000)
            for worker in seeded.misplaced:
                cell = table.get_by_text(worker, exact=True)
                cell.wait_for(state="visible", timeout=15_000)
                assert cell.is_visible()
            assert page.get_by_role("heading", name="Misplacements").is_visible()
            page.screenshot(path=str(ARTIFACTS / "dashboard-misplacements.png"), full_page=True)
        finally:
            browser.close()
    assert (ARTIFACTS / "dashboard-misplacements.png").stat().st_size > 10_000


def test_hostile_worker_ids_fetch_nothing_in_chromium(hostile_dashboard: tuple[str, dict[str, str]]) -> None:
    """Issue 29: a worker id holding ``![x](https://evil.example/a.png)`` or ``<img src=...>`` made the
    Misplacements page fetch the image and render links. Every request the page makes is recorded: none goes
    to the evil host, no link or image points there, and each id shows as its text."""
    from playwright.sync_api import sync_playwright

    url, names = hostile_dashboard
    requests: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1400})
            page.on("request", lambda request: requests.append(request.url))
            page.goto(f"{url}/misplacements", timeout=30_000)
            table = page.locator('[data-testid="stTable"]').first
            table.wait_for(state="visible", timeout=30_000)
            page.wait_for_timeout(2_000)  # let any image load start
            # What a reader sees in each cell: the zero-width spaces that break autolinks are invisible.
            cells = page.eval_on_selector_all(
                '[data-testid="stTable"] td, [data-testid="stTable"] th',
                "nodes => nodes.map(n => n.innerText.replaceAll('\\u200b', '').trim())",
            )
            links = page.eval_on_selector_all("a[href*='evil.example']", "nodes => nodes.length")
            images = page.eval_on_selector_all("img[src*='evil.example']", "nodes => nodes.length")
        finally:
            browser.close()
    assert links == 0 and images == 0
    assert not [r for r in requests if "evil.example" in r], requests
    assert set(names.values()) <= set(cells), cells
