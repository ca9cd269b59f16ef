"""What the long commands say while they work (docs/operations.md, Logs and progress): a live
run's position line every ``--log-every`` seconds and its "caught up" line, JSON lines with
``--log-format json``, one summary line where standard error is not a terminal, and a
progress bar where it is one. Every wait is for a line to appear, never for a time."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import orjson

from rankflow.generate import generate
from rankflow.services import free_port

from tests.cli.test_cli_mistakes import RANKFLOW, cli, one_line

WAIT_S = 120  # a bound on a wait for a line: it fails the test when a line never comes, it times nothing


class Lines:
    """A command running in the background and the lines of its standard error so far."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([*RANKFLOW, *args], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     text=True)
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_for(self, found: Callable[[str], bool]) -> str:
        with self._changed:
            deadline = time.monotonic() + WAIT_S
            while True:
                hit = next((line for line in self.lines if found(line)), None)
                if hit is not None:
                    return hit
                assert self.proc.poll() is None, "\n".join(self.lines)
                assert time.monotonic() < deadline, "\n".join(self.lines)
                self._changed.wait(1)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        status = self.proc.wait(timeout=WAIT_S)
        self._reader.join(timeout=WAIT_S)  # every line read to the end of the pipe
        return status


def _log(tmp_path: Path, events: int = 3000) -> Path:
    path = tmp_path / "events.jsonl"
    generate(200, 50, events, seed=3, out=path)
    return path


def test_a_live_run_logs_its_position_every_interval_and_when_it_caught_up(tmp_path, redis_url, namespace):
    log = _log(tmp_path)
    lines = sum(1 for _ in log.open("rb"))
    run = Lines("run", "--input", f"jsonl:{log}", "--redis", redis_url, "--namespace", namespace,
                "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}", "--log-every", "0.2")
    try:
        caught_up = run.wait_for(lambda line: "caught up in" in line)
        assert f"input through {lines:,} ({log}: {lines})" in caught_up, caught_up
        at_end = run.wait_for(lambda line: f"INFO rankflow.run: input through {lines:,} " in line)
        assert re.search(r", lag 0 bytes(, [\d,]+ events/s)?$", at_end), at_end
        with log.open("ab") as more:  # the run follows the file: the next lines show the new position
            more.write(log.read_bytes().splitlines(keepends=True)[0] * 5)
        run.wait_for(lambda line: f"input through {lines + 5:,} ({log}: {lines + 5})" in line)
    finally:
        status = run.stop()
    assert status == 128 + signal.SIGTERM, "\n".join(run.lines)


def test_log_format_json_makes_every_line_an_object_with_its_fields(tmp_path, redis_url, namespace, kafka_brokers,
                                                                    topic):
    log = _log(tmp_path)
    messages = sum(1 for _ in log.open("rb"))
    produced = cli("produce", "--input", str(log), "--kafka", f"kafka:{kafka_brokers}/{topic}", "--partitions", "2",
                   "--log-format", "json")
    summary, unkeyed = map(orjson.loads, produced.stderr.splitlines())  # the log's chaos has lines without user_id
    assert summary["messages"] == messages and summary["level"] == "INFO", summary
    assert unkeyed["level"] == "WARNING" and unkeyed["unkeyed"] > 0, unkeyed
    run = Lines("run", "--input", f"kafka:{kafka_brokers}/{topic}", "--redis", redis_url, "--namespace", namespace,
                "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}", "--log-every", "0.2", "--log-format", "json")
    try:
        caught_up = orjson.loads(run.wait_for(lambda line: '"event":"caught_up"' in line))
        at_end = run.wait_for(lambda line: f'"position":{messages},' in line and '"lag":0,' in line)
    finally:
        status = run.stop()
    assert status == 128 + signal.SIGTERM, "\n".join(run.lines)
    objects = [orjson.loads(line) for line in run.lines]  # every line, the summary and the refusal too
    assert all({"time", "level", "logger", "message"} <= obj.keys() for obj in objects), objects
    line = orjson.loads(at_end)
    assert line["logger"] == "rankflow.run" and line["lag_unit"] == "records", line
    assert sorted(line["positions"]) == [f"{topic}/0", f"{topic}/1"] and sum(line["positions"].values()) == messages
    assert caught_up["position"] == messages and caught_up["level"] == "INFO", caught_up
    assert objects[-1]["level"] == "WARNING" and objects[-1]["message"].startswith("interrupted"), objects[-1]
    assert objects[-2]["position"] == messages and objects[-2]["message"].startswith("stopped in"), objects[-2]


def test_the_processes_of_a_run_log_json_too(tmp_path, redis_url, namespace):
    log = _log(tmp_path)
    done = cli("run", "--input", f"jsonl:{log}", "--until-eof", "--processes", "2", "--redis", redis_url,
               "--namespace", namespace, "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}", "--log-format", "json")
    assert done.returncode == 0, done.stderr
    plain = [line for line in done.stderr.splitlines() if not line.startswith("{")]
    assert not plain, done.stderr  # every line of every process is a JSON object
    objects = [orjson.loads(line) for line in done.stderr.splitlines()]
    owns = [obj for obj in objects if obj.get("event") == "publishing"]
    assert all(f"now publishes to namespace {namespace!r}" in obj["message"] for obj in owns), owns
    assert {obj["process"] for obj in owns} == {0, 1}, objects
    assert objects[-1]["message"].startswith("done in"), objects[-1]


def test_serve_logs_json_too(redis_url, namespace):
    port = free_port()
    serve = Lines("serve", "--port", str(port), "--redis", redis_url, "--namespace", namespace, "--access-log",
                  "--log-format", "json")
    try:
        serve.wait_for(lambda line: "Uvicorn running on" in line)  # listening from then on
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=WAIT_S).close()
        except urllib.error.HTTPError:  # 503 before any snapshot: answered, and logged all the same
            pass
        serve.wait_for(lambda line: "GET /health" in line)
    finally:
        serve.stop()
    objects = [orjson.loads(line) for line in serve.lines]
    assert all({"time", "level", "logger", "message"} <= obj.keys() for obj in objects), objects
    assert {"uvicorn.error", "uvicorn.access"} <= {obj["logger"] for obj in objects}, objects
    assert not any("\x1b" in line for line in serve.lines), serve.lines  # no terminal colours


def test_generate_and_produce_without_a_terminal_print_one_summary_line(tmp_path, kafka_brokers, topic):
    out = tmp_path / "events.jsonl"
    generated = cli("generate", "--users", "100", "--songs", "20", "--events", "25000", "--out", str(out))
    assert generated.returncode == 0
    assert re.fullmatch(rf"wrote 25000 events to {out} in [\d.]+s", one_line(generated))
    keyed = tmp_path / "keyed.jsonl"  # every line with a user_id: no note of unkeyed lines after the summary
    keyed.write_bytes(b"".join(orjson.dumps({"user_id": f"u{i}", "n": i}) + b"\n" for i in range(25000)))
    produced = cli("produce", "--input", str(keyed), "--kafka", f"kafka:{kafka_brokers}/{topic}")
    assert produced.returncode == 0
    assert re.fullmatch(rf"produced 25000 messages to kafka:{kafka_brokers}/{topic} \(4 partitions\) in .*, "
                        "all acknowledged", one_line(produced)), produced.stderr


def on_terminal(*args: str, until: str | None = None) -> tuple[int, str]:
    """Run the command with standard error on a terminal (a pty): its exit status and what it wrote
    there. ``until``: stop it (SIGTERM) once this text has appeared."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([*RANKFLOW, *args], stderr=terminal, stdout=subprocess.DEVNULL,
                            env={**os.environ, "TERM": "xterm", "COLUMNS": "150"})
    os.close(terminal)
    seen = b""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([controller], [], [], 1)
        if not ready:
            continue
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the command ended: the terminal is gone
            break
        if not chunk:
            break
        seen += chunk
        if until is not None and until.encode() in seen and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            until = None
    os.close(controller)
    return proc.wait(timeout=WAIT_S), seen.decode(errors="replace")


def test_generate_and_a_catch_up_draw_progress_on_a_terminal(tmp_path, redis_url, namespace):
    out = tmp_path / "events.jsonl"
    status, seen = on_terminal("generate", "--users", "100", "--songs", "20", "--events", "30000", "--out", str(out))
    assert status == 0, seen
    assert "generating" in seen and "/30000" in seen, seen  # the bar, drawn at its start and end at least
    assert seen.rstrip().endswith("s") and "wrote 30000 events" in seen, seen
    status, seen = on_terminal("run", "--input", f"jsonl:{out}", "--redis", redis_url, "--namespace", namespace,
                               "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}", until="caught up in")
    assert status == 128 + signal.SIGTERM, seen
    assert seen.index("catching up") < seen.index("caught up in"), seen


def test_mistaken_logging_options_are_one_line_before_anything_starts():
    for args, words in ((("--log-every", "-1"), "must be 0 (off) or more"), (("--log-every", "soon"), "expected a"),
                        (("--log-every", "inf"), "finite"), (("--log-format", "xml"), "invalid choice")):
        # Redis at a port nothing listens on: the refusal comes before anything is reached
        r = cli("run", "--input", "jsonl:/nonexistent", "--redis", "redis://127.0.0.1:9/0", *args)
        assert r.returncode == 2 and words in one_line(r), r.stderr
    r = cli("serve", "--log-format", "yaml")
    assert r.returncode == 2 and "--log-format" in one_line(r), r.stderr
