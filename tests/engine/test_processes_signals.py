"""``rankflow run --processes N`` stops its processes with it: SIGTERM or Ctrl-C to the command is
passed on to each of them (they left them running), and if the command is killed outright the
kernel stops them (``PR_SET_PDEATHSIG``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rankflow.connectors.redis_read import read_latest
from rankflow.generate import generate
from tests.waiting import wait_for

BOUND = 90.0  # a hang fails the test, a slow machine does not


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def gone(pid: int) -> bool:
    """Exited (a zombie waiting for a parent that never reaps it counts as exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def start(tmp_path: Path, redis_url: str, namespace: str) -> tuple[subprocess.Popen, list[int]]:
    """The command and its processes (once both started)."""
    log = tmp_path / "events.jsonl"
    generate(users=100, songs=20, events=1_000, seed=3, out=log)
    proc = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "run", "--processes", "2", "--input", f"jsonl:{log}",
                             "--redis", redis_url, "--namespace", namespace, "--barrier-ms", "100",
                             "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return proc, wait_for(lambda: children(proc.pid), lambda kids: len(kids) == 2, timeout=BOUND)


@pytest.mark.parametrize("sig,status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_command_stops_every_process(tmp_path, redis_url, redis_client, namespace, sig, status):
    proc, kids = start(tmp_path, redis_url, namespace)
    try:
        wait_for(lambda: read_latest(redis_client, namespace), lambda snap: snap is not None, timeout=BOUND)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=BOUND)
        assert proc.returncode == status, err
        assert all(gone(pid) for pid in kids), "a process of the run outlived the command"
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_processes_stop_when_the_command_is_killed(tmp_path, redis_url, redis_client, namespace):
    proc, kids = start(tmp_path, redis_url, namespace)
    try:
        wait_for(lambda: read_latest(redis_client, namespace), lambda snap: snap is not None, timeout=BOUND)
        proc.kill()
        proc.wait()
        wait_for(lambda: [pid for pid in kids if not gone(pid)], lambda left: not left, timeout=BOUND)
    finally:
        for pid in kids:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
