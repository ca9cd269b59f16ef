"""Under ``--json`` a command's errors are JSON too: one object ``{"error", "exit"}`` a line on
stderr, nothing on stdout, the exit status unchanged (2 bad usage, 1 a runtime failure).

Every command that takes ``--json`` is tried with a usage error of its own (refused by the
parser, or by the command before Redis), with Redis unreachable (a port nothing listens on),
and with a namespace where nothing is published (a real Redis, the reader's own "nothing to
answer"). Without ``--json`` the same mistakes stay the plain ``rankflow...`` line.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import pytest

from rankflow.services import free_port

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]

# each command with --json, the arguments of a query, and a usage error of its own
COMMANDS = {
    "top": (["top"], ["-k", "ten"]),
    "boards list": (["boards", "list"], ["--game"]),
    "boards top": (["boards", "top", "--game", "g1", "--board", "all"], ["-n", "1001"]),
    "boards player": (["boards", "player", "--game", "g1", "--board", "all", "--player", "ana"], ["--board", "weekley"]),
    "boards around": (["boards", "around", "--game", "g1", "--board", "all", "--player", "ana"], ["-r", "51"]),
    "activity top": (["activity", "top", "--global"], ["--workspace", "acme"]),  # --global and --workspace: one of
    "activity channel": (["activity", "channel", "--workspace", "acme", "--channel", "general"], ["--bogus"]),
    "status": (["status", "--input", "jsonl:{log}"], ["--flow", "charts"]),
}


def cli(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    log = tmp_path / "events.jsonl"
    log.write_bytes(b'{"not": "an event"}\n')
    return subprocess.run([*RANKFLOW, *(a.replace("{log}", str(log)) for a in args)], capture_output=True, text=True,
                          timeout=60)


def json_error(r: subprocess.CompletedProcess, status: int) -> str:
    """The one JSON error line of a command that exited ``status``: its message."""
    assert r.returncode == status, (r.returncode, r.stderr)
    assert r.stdout == "", "errors never go to standard output"
    lines = r.stderr.splitlines()
    assert len(lines) >= 1 and "Traceback" not in r.stderr, r.stderr
    objects = [orjson.loads(line) for line in lines]  # every line is JSON
    assert all(set(obj) == {"error", "exit"} and obj["exit"] == status for obj in objects), objects
    return objects[-1]["error"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_usage_error_under_json_is_json_and_exit_2(command, tmp_path):
    query, mistake = COMMANDS[command]
    assert json_error(cli([*query, "--json", *mistake, "--redis", "redis://127.0.0.1:1/0"], tmp_path), 2)
    plain = cli([*query, *mistake, "--redis", "redis://127.0.0.1:1/0"], tmp_path)
    assert plain.returncode == 2 and plain.stderr.startswith("rankflow") and not plain.stderr.startswith("{"), \
        plain.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_redis_unreachable_under_json_is_json_and_exit_1(command, tmp_path):
    query, _ = COMMANDS[command]
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"  # nothing listens there
    r = cli([*query, "--json", "--redis", url], tmp_path)
    message = json_error(r, 1)
    assert "127.0.0.1" in message and "hunter2" not in r.stderr, message


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "status"])  # status: a namespace without snapshot
def test_nothing_published_under_json_is_json_and_exit_1(command, tmp_path, redis_url):
    query, _ = COMMANDS[command]
    r = cli([*query, "--json", "--redis", redis_url, "--namespace", f"empty-{uuid.uuid4().hex[:8]}"], tmp_path)
    assert "in namespace 'empty-" in json_error(r, 1)


def test_status_of_an_empty_namespace_under_json(tmp_path, redis_url):
    query, _ = COMMANDS["status"]
    r = subprocess.run([*RANKFLOW, *(a.replace("{log}", "/etc/hostname") for a in query), "--json", "--redis",
                        redis_url, "--namespace", f"empty-{uuid.uuid4().hex[:8]}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and orjson.loads(r.stdout) == [], "the answer: no product"
    [line] = r.stderr.splitlines()
    assert orjson.loads(line)["error"].startswith("no snapshot in namespace"), line
