"""The dashboard in a real headless browser (Debian's chromium driven by Playwright).

The page is served by ``rankflow serve``; the listener flow and the boards flow (or the
activity flow) each follow a JSON Lines log, and the tests append playback events, match
results or messages and wait for the chart, the picked board's table or the activity
view to show them. With the three flows on small generated logs, every panel is checked
against the API's answer of the same snapshot (its id, its items, live or stale as the
API says), live and after the runs ended; and ``scripts/demo.py`` (``make demo``) is run
at small rates until the page shows every product live, then stopped with Ctrl-C.
Screenshots are kept in ``test-artifacts/`` (``dashboard-panel-*.png``: one a panel).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, UTC
from pathlib import Path
from urllib.parse import quote

import httpx
import orjson
import pytest
from playwright.sync_api import sync_playwright

from rankflow.generate import generate
from rankflow.generate_messages import generate_messages
from rankflow.generate_scores import generate_scores
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
        page.wait_for_selector('#bars .bar[data-rank="1"][data-song="song_new"]', timeout=60_000)
        top = page.locator('#bars .bar[data-rank="1"]')
        assert top.get_attribute("data-listeners") == "6"
        assert page.locator("#snapshot-id").text_content() != first_id
        assert page.locator("#total").text_content() == "10"

        page.select_option("#k", "5")
        page.wait_for_function("document.querySelectorAll('#bars .bar').length === 5", timeout=60_000)
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
        page.wait_for_function("document.querySelectorAll('#board-rows tr.entry').length === 5", timeout=60_000)
        assert board_rows(page) == example.BOARDS["all"]
        assert page.locator("#board-name").text_content() == "all"

        page.select_option("#board", "daily")  # the alias: the page names the board it resolves to
        page.wait_for_function("document.getElementById('board-name').textContent === 'daily:2027-01-04'",
                               timeout=60_000)
        page.wait_for_function("document.querySelectorAll('#board-rows tr.entry').length === 3", timeout=60_000)
        assert board_rows(page) == example.BOARDS["daily:2027-01-04"]
        first_snapshot = page.locator("#board-snapshot").text_content()

        played = example.ms("2027-01-04 15:00:00.000")
        with open(scores, "ab") as f:  # fay tops the day
            f.write(example.result("fay", "m7", 80, played, played + 1000) + b"\n")
        page.wait_for_selector('#board-rows tr.entry[data-rank="1"][data-player="fay"]', timeout=60_000)
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
        page.wait_for_function("document.querySelectorAll('#activity-rows tr.entry').length === 3", timeout=60_000)
        assert activity_rows(page) == [(1, "A", "x", 3), (2, "team/eu", "ch/1", 2), (3, "team/eu", "general", 1)]
        assert page.locator("#activity-scope").text_content() == "all workspaces"
        assert page.locator("#activity-rows th.ws").is_visible()

        # the window, the watermark and its lag: those of GET /activity (the idle flow still publishes a
        # snapshot per barrier: only its id, publication time and the lags move)
        current = httpx.get(url + "activity").json()
        page.wait_for_function(f"Number(document.getElementById('activity-snapshot').textContent) > "
                               f"{current['snapshot_id']}", timeout=60_000)  # read after ``current``
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
                               "document.querySelectorAll('#activity-rows tr.entry').length === 2", timeout=60_000)
        assert activity_rows(page) == [(1, "team/eu", "ch/1", 2), (2, "team/eu", "general", 1)]
        assert not page.locator("#activity-rows th.ws").is_visible()
        first_snapshot = page.locator("#activity-top-snapshot").text_content()

        with open(log, "ab") as f:  # "general" takes the lead, a minute later
            f.write(b"".join(message("team/eu", "general", f"u{i}", now + i) for i in range(2, 5)))
        page.wait_for_selector('#activity-rows tr.entry[data-rank="1"][data-channel="general"]', timeout=60_000)
        assert activity_rows(page) == [(1, "team/eu", "general", 4), (2, "team/eu", "ch/1", 2)]
        assert page.locator("#activity-top-snapshot").text_content() != first_snapshot
        page.wait_for_function(f"document.getElementById('watermark').textContent === '{utc(now + 4)}'",
                               timeout=60_000)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-activity.png"), full_page=True)
        browser.close()


# -- every product on one page, as the API answers ----------------------------------------------

PANELS = ("listeners", "freshness", "recent", "boards", "activity")
KEY = bytes(range(32))


def write_logs(folder: Path, now: int, messages_start: int) -> dict[str, Path]:
    """Small logs of the three products: playback and scores stamped near ``now``, messages from
    ``messages_start`` on (chaos on: the dead letters are the flows' business)."""
    logs = {"playback": folder / "events.jsonl", "scores": folder / "scores.jsonl",
            "messages": folder / "messages.jsonl"}
    generate(60, 12, 400, 1, logs["playback"], start_ms=now - 20_000)
    generate_scores(40, 2, 200, 1, logs["scores"], start_ms=now - 3_600_000, days=0.04, key=KEY)
    generate_messages(300, 1, logs["messages"], workspaces=6, channels=12, users=30, start_ms=messages_start,
                      rate=5.0)
    return logs


def start_all(tmp_path: Path, logs: dict[str, Path], redis_url: str, namespace: str, until_eof: bool,
              serve_args: tuple[str, ...] = ()) -> tuple[str, list[subprocess.Popen]]:
    """The three flows on ``logs`` (following them, or to their end) and one service for all three."""
    common = ["--redis", redis_url, "--namespace", namespace, "--barrier-ms", "100"] + (["--until-eof"] if until_eof else [])
    procs = []
    for flow, log, extra in (("listeners", logs["playback"], []),
                             ("boards", logs["scores"], ["--signing-key", KEY.hex()]),
                             ("activity", logs["messages"], [])):
        procs.append(subprocess.Popen([sys.executable, "-m", "rankflow.cli", "run", "--flow", flow, "--input",
                                       f"jsonl:{log}", *common, *extra,
                                       "--dead-letter", f"jsonl:{tmp_path / f'dl-{flow}.jsonl'}"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    port = free_port()
    procs.append(subprocess.Popen([sys.executable, "-m", "rankflow.cli", "serve", "--port", str(port),
                                   "--redis", redis_url, "--namespace", namespace, *serve_args],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return f"http://127.0.0.1:{port}/", procs


def answering(url: str, procs: list[subprocess.Popen], timeout: float = 60) -> None:
    """Until the service answers for all three products (``/readyz``): every one has published."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url + "readyz").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert all(p.poll() in (None, 0) for p in procs), "a flow or the service failed"
        assert time.monotonic() < deadline, "the service or the flows did not start"
        time.sleep(0.1)


def stop_all(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def all_products(tmp_path, redis_url, namespace):
    """The three flows following small logs stamped near now (each publishes at every barrier: live)."""
    now = int(time.time() * 1000)
    url, procs = start_all(tmp_path, write_logs(tmp_path, now, now - 60_000), redis_url, namespace, until_eof=False)
    try:
        answering(url, procs)
        yield url
    finally:
        stop_all(procs)


def text(page, selector: str) -> str:
    return page.locator(selector).text_content()


def bars(page, svg: str, value: str) -> list[tuple[int, str, int]]:
    return [(int(g.get_attribute("data-rank")), g.get_attribute("data-song"), int(g.get_attribute(value)))
            for g in page.locator(f"{svg} .bar").all()]


def same_snapshot(page, selector: str, ask) -> dict:
    """The page's snapshot id at ``selector`` is one of the API's: at least the one the API named
    before it was read, at most the one it named after; returns the later answer."""
    before = ask()
    page.wait_for_function(f"Number(document.querySelector({selector!r}).textContent) >= {before['snapshot_id']}",
                           timeout=60_000)
    shown_id = int(text(page, selector))
    after = ask()
    assert before["snapshot_id"] <= shown_id <= after["snapshot_id"]
    return after


def has_axes(page, svg: str) -> None:
    """Both axes, the x axis with its unit in parentheses and at least two labelled ticks."""
    unit = page.locator(f"{svg} .x-axis").get_attribute("data-unit")
    assert unit and "(" in unit and unit.endswith(")"), unit
    assert page.locator(f"{svg} .x-axis .tick text").count() >= 2
    assert page.locator(f"{svg} .y-axis").count() == 1


def panel_shots(page, suffix: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    for panel in PANELS:
        page.locator(f"#{panel}-panel").screenshot(path=str(ARTIFACTS / f"dashboard-panel-{panel}{suffix}.png"))


def test_every_panel_shows_what_the_api_answers(all_products):
    url = all_products
    api = httpx.Client(base_url=url)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1300, "height": 1000})
        asked: list[str] = []
        page.on("request", lambda request: asked.append(request.url))
        page.goto(url)
        assert text(page, "#products") == "listeners, boards, activity"

        # listeners: the top K of GET /rankings, its snapshot, live as the API's "stale" says
        page.wait_for_selector("#bars .bar")
        ranking = same_snapshot(page, "#snapshot-id", lambda: api.get("rankings?k=10").json())
        assert ranking["stale"] is False
        assert page.locator("#state").get_attribute("data-state") == "live"
        assert bars(page, "#bars", "data-listeners") == [(it["rank"], it["song_id"], it["listeners"])
                                                         for it in ranking["items"]]
        assert text(page, "#total") == f"{ranking['total_listeners']:,}"
        assert int(page.locator("#age").get_attribute("data-ms")) >= 0
        has_axes(page, "#bars")
        page.wait_for_selector("#fresh .point")
        has_axes(page, "#fresh")
        assert page.locator("#fresh .y-axis").get_attribute("data-unit") == "age when first seen (ms)"

        # recent plays: GET /rankings/recent, its window in event time
        page.wait_for_selector("#recent-bars .bar")
        recent = same_snapshot(page, "#recent-snapshot", lambda: api.get("rankings/recent?k=10").json())
        assert bars(page, "#recent-bars", "data-plays") == [(it["rank"], it["song_id"], it["plays"])
                                                            for it in recent["items"]]
        assert text(page, "#recent-window-end") == utc(recent["window_end"])
        assert page.locator("#recent-state").get_attribute("data-state") == "live"
        has_axes(page, "#recent-bars")

        # boards: a game and its board "all", the top and a player's rank and neighbours
        games = api.get("boards").json()["games"]
        game = sorted(games)[0]
        page.wait_for_selector(f'#game option[value="{game}"]', state="attached")
        page.select_option("#game", game)
        page.select_option("#board", "all")
        page.wait_for_function("document.getElementById('board-name').textContent === 'all'", timeout=60_000)
        top = same_snapshot(page, "#board-snapshot", lambda: api.get(f"boards/{game}/all/top?n=10").json())
        assert board_rows(page) == [(it["player_id"], it["score"], it["rank"], it["competition_rank"])
                                    for it in top["items"]]
        assert text(page, "#board-players") == f"{top['total_players']:,}"
        assert top["stale"] is False and page.locator("#board-state").get_attribute("data-state") == "live"
        player = top["items"][3]["player_id"]
        page.fill("#player", player)
        page.press("#player", "Enter")
        page.wait_for_selector("#around-rows tr.me")
        one = api.get(f"boards/{game}/all/players/{quote(player, safe='')}").json()
        around = api.get(f"boards/{game}/all/players/{quote(player, safe='')}/around?r=3").json()
        assert int(page.locator("#player-rank").get_attribute("data-rank")) == one["rank"]
        assert one["stale"] is False and page.locator("#player-rank").get_attribute("data-state") == "live"
        assert [(r.get_attribute("data-player"), int(r.get_attribute("data-rank")))
                for r in page.locator("#around-rows tr.entry").all()] == [(it["player_id"], it["rank"])
                                                                          for it in around["items"]]
        assert page.locator("#around-rows tr.me").get_attribute("data-player") == player

        # activity: the global top, then one workspace's, and the window of GET /activity
        page.wait_for_selector("#activity-rows tr.entry")
        glob = same_snapshot(page, "#activity-top-snapshot", lambda: api.get("activity/global/top?k=10").json())
        assert activity_rows(page) == [(it["rank"], it["workspace_id"], it["channel_id"], it["count"])
                                       for it in glob["items"]]
        assert glob["stale"] is False and page.locator("#activity-state").get_attribute("data-state") == "live"
        workspace = glob["items"][0]["workspace_id"]
        page.fill("#workspace", workspace)
        page.press("#workspace", "Enter")
        page.wait_for_function(f"document.getElementById('activity-scope').textContent === {workspace!r} && "
                               "document.querySelector('#activity-rows tr.entry') !== null", timeout=60_000)
        mine = same_snapshot(page, "#activity-top-snapshot",
                             lambda: api.get("activity/top", params={"workspace": workspace, "k": 10}).json())
        assert activity_rows(page) == [(it["rank"], workspace, it["channel_id"], it["count"]) for it in mine["items"]]
        current = same_snapshot(page, "#activity-snapshot", lambda: api.get("activity").json())
        assert text(page, "#watermark") == utc(current["watermark"])
        panel_shots(page, "")
        browser.close()
    assert asked and all(u.startswith(url) or u.startswith("data:") for u in asked), "the page works offline"


def test_a_finished_runs_snapshots_are_stale_on_the_page_as_in_the_api(tmp_path, redis_url, namespace):
    """Runs to the end of their logs, then nothing: past --stale-after-ms every answer is old, every
    product's answers say ``"stale": true`` and the page says stale on every panel, the player's rank
    too; the messages are ten days old, and the page shows the watermark's lag as that. The page
    takes the API's word: told a bound of an hour by ``/dashboard/settings`` (which it only shows),
    it still says stale where the API does."""
    now = int(time.time() * 1000)
    logs = write_logs(tmp_path, now, now - 10 * 86_400_000)
    url, procs = start_all(tmp_path, logs, redis_url, namespace, until_eof=True, serve_args=("--stale-after-ms", "1500"))
    try:
        answering(url, procs)
        api = httpx.Client(base_url=url)
        deadline = time.monotonic() + 60
        while not api.get("rankings").json()["stale"]:  # the runs have ended and 1.5 s passed
            assert time.monotonic() < deadline, "the ranking never went stale"
            time.sleep(0.1)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            settings = api.get("dashboard/settings").json()
            assert settings["stale_after_ms"] == 1500
            page.route("**/dashboard/settings", lambda route: route.fulfill(
                json={**settings, "stale_after_ms": 3_600_000}))  # a page with its own rule would say live
            page.goto(url)
            page.select_option("#board", "all")
            for state in ("state", "recent-state", "board-state", "activity-state"):
                page.wait_for_selector(f'#{state}[data-state="stale"]', timeout=60_000)
            ranking = api.get("rankings").json()
            assert ranking["stale"] is True and text(page, "#snapshot-id") == str(ranking["snapshot_id"])
            assert api.get("rankings/recent").json()["stale"] is True
            game = page.locator("#game").input_value()
            board = api.get(f"boards/{game}/all/top").json()
            assert board["stale"] is True and board["age_ms"] > 1500
            assert text(page, "#board-snapshot") == str(board["snapshot_id"])
            player = board["items"][0]["player_id"]
            page.fill("#player", player)
            page.press("#player", "Enter")
            page.wait_for_selector('#player-rank[data-state="stale"]', timeout=60_000)
            assert api.get(f"boards/{game}/all/players/{quote(player, safe='')}").json()["stale"] is True
            assert api.get(f"boards/{game}/all/players/{quote(player, safe='')}/around?r=3").json()["stale"] is True
            lag_shown = int(page.locator("#lag-now").get_attribute("data-ms"))  # read before the API's, so below it
            activity = api.get("activity").json()
            assert activity["stale"] is True and activity["age_ms"] > 1500
            assert text(page, "#activity-snapshot") == str(activity["snapshot_id"])
            assert api.get("activity/global/top").json()["stale"] is True
            assert text(page, "#lag-now").endswith(" days")
            assert 10 * 86_400_000 - 60_000 < lag_shown <= activity["watermark_lag_ms"]
            assert text(page, "#stale-after") == "1.0 h"
            panel_shots(page, "-stale")
            browser.close()
    finally:
        stop_all(procs)


# -- make demo ------------------------------------------------------------------------------------

@pytest.mark.redis
@pytest.mark.broker
def test_the_demo_publishes_every_product_live_and_the_page_shows_them(tmp_path):
    """``scripts/demo.py`` at small rates: its own Redis and broker, three flows, one service; once
    the API answers for all three, the page shows each live, with traffic stamped now; Ctrl-C ends it."""
    port = free_port()
    root = Path(__file__).resolve().parents[2]
    demo = subprocess.Popen([sys.executable, str(root / "scripts" / "demo.py"), "--port", str(port), "--rate", "50",
                             "--score-rate", "4", "--message-rate", "10", "--users", "200", "--songs", "50",
                             "--players", "100", "--workspaces", "5"],
                            stdout=open(tmp_path / "demo.out", "wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        answering(url, [demo], timeout=180)
        api = httpx.Client(base_url=url)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.goto(url)
            for state in ("state", "recent-state", "board-state", "activity-state"):
                page.wait_for_selector(f'#{state}[data-state="live"]', timeout=30_000)
            same_snapshot(page, "#snapshot-id", lambda: api.get("rankings").json())
            game, board = page.locator("#game").input_value(), page.locator("#board").input_value()
            same_snapshot(page, "#board-snapshot", lambda: api.get(f"boards/{game}/{board}/top").json())
            activity = same_snapshot(page, "#activity-snapshot", lambda: api.get("activity").json())
            # stamped now: the watermark a few seconds behind, today's daily board
            assert activity["watermark_lag_ms"] < 60_000
            today = datetime.now(UTC).strftime("%Y-%m-%d")
            assert any(entry["aliases"]["daily"] == f"daily:{today}" for entry in api.get("boards").json()["games"].values())
            assert abs(api.get("rankings/recent").json()["watermark"] - time.time() * 1000) < 60_000
            panel_shots(page, "-demo")
            browser.close()
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=60) == 0
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    out = (tmp_path / "demo.out").read_text()
    assert "rankflow demo: open" in out
    folder = Path(out.split("logs and dead letters: ", 1)[1].split("\n", 1)[0].strip())
    assert (folder / "listeners.log").exists()
    shutil.rmtree(folder)  # kept by the demo for its user; this test's run is done with it
