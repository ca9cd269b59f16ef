"""The dashboard in a real headless browser (Debian's chromium driven by Playwright).

The page is served by ``rankflow serve``, the flow follows a JSON Lines log, and the
test appends playback events to the log and waits for the chart to show them. A
screenshot is kept in ``test-artifacts/dashboard.png``.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import sync_playwright

from rankflow.services import free_port
from tests.events import ev

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        raise RuntimeError("chromium is not installed: run scripts/ensure-browser.sh (Debian's chromium)")
    return path


@pytest.fixture
def served(tmp_path, redis_url, namespace):
    log = tmp_path / "live.jsonl"
    log.write_bytes(b"".join(ev(f"u{i}", f"p{i}", f"song_{i % 4}", "START", 1) + b"\n" for i in range(10)))
    port = free_port()
    flow = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "run", "--input", f"jsonl:{log}",
                             "--redis", redis_url, "--namespace", namespace, "--barrier-ms", "100",
                             "--dead-letter", f"jsonl:{tmp_path / 'dl.jsonl'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "serve", "--port", str(port),
                            "--redis", redis_url, "--namespace", namespace],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "rankings").status_code == 200:
                break
        except httpx.ConnectError:
            pass
        assert time.monotonic() < deadline, "the service or the flow did not start"
        time.sleep(0.1)
    try:
        yield url, log
    finally:
        for proc in (api, flow):
            proc.send_signal(signal.SIGINT)
        for proc in (api, flow):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_the_chart_follows_playback_events(served):
    url, log = served
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 640})
        page.goto(url)
        page.wait_for_selector("#bars .bar")
        assert page.locator("#bars .bar").count() == 4
        assert page.locator('#bars .bar[data-rank="1"]').get_attribute("data-song") in {"song_0", "song_1"}
        first_id = page.locator("#snapshot-id").text_content()

        with open(log, "ab") as f:  # a new hit: 6 listeners move to song_new
            f.write(b"".join(ev(f"u{i}", f"p{i}b", "song_new", "START", 2) + b"\n" for i in range(6)))
        page.wait_for_selector('#bars .bar[data-rank="1"][data-song="song_new"]', timeout=15_000)
        top = page.locator('#bars .bar[data-rank="1"]')
        assert top.get_attribute("data-listeners") == "6"
        assert page.locator("#snapshot-id").text_content() != first_id
        assert page.locator("#total").text_content() == "10"

        page.select_option("#k", "5")
        page.wait_for_function("document.querySelectorAll('#bars .bar').length === 5", timeout=15_000)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
        browser.close()
