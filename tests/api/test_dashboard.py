"""The dashboard in a real headless browser (Debian's chromium driven by Playwright).

The page is served by ``rankflow serve``; the listener flow and the boards flow (or the
activity flow) each follow a JSON Lines log, and the tests append playback events, match
results or messages and wait for the chart, the picked board's table or the activity
view to show them. Screenshots are kept
in ``test-artifacts/``.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, UTC
from pathlib import Path

import httpx
import orjson
import pytest
from playwright.sync_api import sync_playwright

from rankflow.services import free_port
from tests import boards_example as example
from tests.events import ev

pytestmark = pytest.mark.browser
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
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
    scores = tmp_path / "scores.jsonl"
    scores.write_bytes(b"".join(line + b"\n" for line in example.LINES))
    port = free_port()
    flow = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "run", "--input", f"jsonl:{log}",
                             "--redis", redis_url, "--namespace", namespace, "--barrier-ms", "100",
                             "--dead-letter", f"jsonl:{tmp_path / 'dl.jsonl'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    boards = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "run", "--flow", "boards", "--input",
                               f"jsonl:{scores}", "--signing-key", example.KEY.hex(), "--redis", redis_url,
                               "--namespace", namespace, "--barrier-ms", "100",
                               "--dead-letter", f"jsonl:{tmp_path / 'dl-scores.jsonl'}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "serve", "--port", str(port),
                            "--redis", redis_url, "--namespace", namespace],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "rankings").status_code == 200 and httpx.get(url + "boards").json()["games"]:
                break
        except httpx.ConnectError:
            pass
        assert time.monotonic() < deadline, "the service or the flows did not start"
        time.sleep(0.1)
    try:
        yield url, log, scores
    finally:
        for proc in (api, flow, boards):
            proc.send_signal(signal.SIGINT)
        for proc in (api, flow, boards):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_the_chart_follows_playback_events(served):
    url, log, _ = served
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


def board_rows(page) -> list[tuple[str, int, int, int]]:
    return [(row.get_attribute("data-player"), int(row.get_attribute("data-score")), int(row.get_attribute("data-rank")),
             int(row.get_attribute("data-competition"))) for row in page.locator("#board-rows tr.entry").all()]


def test_the_board_picker_shows_a_board_live(served):
    url, _, scores = served
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(url)
        page.wait_for_selector('#game option[value="g1"]', state="attached")
        page.select_option("#game", "g1")
        page.select_option("#board", "all")
        page.wait_for_function("document.querySelectorAll('#board-rows tr.entry').length === 5", timeout=15_000)
        assert board_rows(page) == example.BOARDS["all"]
        assert page.locator("#board-name").text_content() == "all"

        page.select_option("#board", "daily")  # the alias: the page names the board it resolves to
        page.wait_for_function("document.getElementById('board-name').textContent === 'daily:2027-01-04'",
                               timeout=15_000)
        page.wait_for_function("document.querySelectorAll('#board-rows tr.entry').length === 3", timeout=15_000)
        assert board_rows(page) == example.BOARDS["daily:2027-01-04"]
        first_snapshot = page.locator("#board-snapshot").text_content()

        played = example.ms("2027-01-04 15:00:00.000")
        with open(scores, "ab") as f:  # fay tops the day
            f.write(example.result("fay", "m7", 80, played, played + 1000) + b"\n")
        page.wait_for_selector('#board-rows tr.entry[data-rank="1"][data-player="fay"]', timeout=15_000)
        assert board_rows(page) == [("fay", 80, 1, 1), ("cy", 50, 2, 2), ("dee", 50, 3, 2), ("eve", 0, 4, 4)]
        assert page.locator("#board-snapshot").text_content() != first_snapshot
        assert page.locator("#board-players").text_content() == "4"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-boards.png"), full_page=True)
        browser.close()


# -- the activity view -------------------------------------------------------------------------

def message(ws: str, ch: str, user: str, ts: int) -> bytes:
    return orjson.dumps({"workspace_id": ws, "channel_id": ch, "user_id": user, "ts": ts}) + b"\n"


@pytest.fixture
def served_activity(tmp_path, redis_url, namespace):
    """The activity flow following a messages log (event times a minute ago), and the service."""
    now = int(time.time() * 1000)
    log = tmp_path / "messages.jsonl"
    log.write_bytes(b"".join([message("A", "x", f"u{i}", now - 60_000 + i) for i in range(3)] +
                             [message("team/eu", "ch/1", f"u{i}", now - 60_000 + i) for i in range(2)] +
                             [message("team/eu", "general", "u1", now - 60_000)]))
    port = free_port()
    flow = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "run", "--flow", "activity", "--input",
                             f"jsonl:{log}", "--redis", redis_url, "--namespace", namespace, "--barrier-ms", "100",
                             "--dead-letter", f"jsonl:{tmp_path / 'dl-messages.jsonl'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "serve", "--port", str(port),
                            "--redis", redis_url, "--namespace", namespace],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "activity/global/top").json().get("items"):
                break
        except (httpx.ConnectError, ValueError):
            pass
        assert time.monotonic() < deadline, "the service or the activity flow did not start"
        time.sleep(0.1)
    try:
        yield url, log, now
    finally:
        for proc in (api, flow):
            proc.send_signal(signal.SIGINT)
        for proc in (api, flow):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def activity_rows(page) -> list[tuple[int, str, str, int]]:
    return [(int(row.get_attribute("data-rank")), row.get_attribute("data-workspace"),
             row.get_attribute("data-channel"), int(row.get_attribute("data-count")))
            for row in page.locator("#activity-rows tr.entry").all()]


def utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def test_the_activity_view_shows_a_workspace_live_with_its_window_and_lag(served_activity):
    url, log, now = served_activity
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 1400})
        page.goto(url)
        # all workspaces first (the input is empty): the global top
        page.wait_for_function("document.querySelectorAll('#activity-rows tr.entry').length === 3", timeout=15_000)
        assert activity_rows(page) == [(1, "A", "x", 3), (2, "team/eu", "ch/1", 2), (3, "team/eu", "general", 1)]
        assert page.locator("#activity-scope").text_content() == "all workspaces"
        assert page.locator("#activity-rows th.ws").is_visible()

        # the window, the watermark and its lag: those of GET /activity (the idle flow still publishes a
        # snapshot per barrier: only its id, publication time and the lags move)
        current = httpx.get(url + "activity").json()
        page.wait_for_function(f"Number(document.getElementById('activity-snapshot').textContent) > "
                               f"{current['snapshot_id']}", timeout=15_000)  # read after ``current``
        assert page.locator("#window-start").text_content() == utc(current["window_start"])
        assert page.locator("#window-end").text_content() == utc(current["window_end"])
        assert page.locator("#watermark").text_content() == utc(current["watermark"])
        assert current["watermark"] == now - 60_000 + 2
        lag_published = int(page.locator("#lag-published").get_attribute("data-ms"))
        assert current["published_lag_ms"] <= lag_published <= int(time.time() * 1000) - current["watermark"]
        lag_now = int(page.locator("#lag-now").get_attribute("data-ms"))
        assert current["watermark_lag_ms"] <= lag_now <= int(time.time() * 1000) - current["watermark"]
        assert page.locator("#lag-now").text_content().endswith((" s", " min"))
        assert [o.get_attribute("value") for o in page.locator("#workspace-list option").all()] == ["A", "team/eu"]

        # one workspace (its id holds "/"): its stream
        page.fill("#workspace", "team/eu")
        page.press("#workspace", "Enter")
        page.wait_for_function("document.getElementById('activity-scope').textContent === 'team/eu' && "
                               "document.querySelectorAll('#activity-rows tr.entry').length === 2", timeout=15_000)
        assert activity_rows(page) == [(1, "team/eu", "ch/1", 2), (2, "team/eu", "general", 1)]
        assert not page.locator("#activity-rows th.ws").is_visible()
        first_snapshot = page.locator("#activity-top-snapshot").text_content()

        with open(log, "ab") as f:  # "general" takes the lead, a minute later
            f.write(b"".join(message("team/eu", "general", f"u{i}", now + i) for i in range(2, 5)))
        page.wait_for_selector('#activity-rows tr.entry[data-rank="1"][data-channel="general"]', timeout=15_000)
        assert activity_rows(page) == [(1, "team/eu", "general", 4), (2, "team/eu", "ch/1", 2)]
        assert page.locator("#activity-top-snapshot").text_content() != first_snapshot
        page.wait_for_function(f"document.getElementById('watermark').textContent === '{utc(now + 4)}'",
                               timeout=15_000)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-activity.png"), full_page=True)
        browser.close()
