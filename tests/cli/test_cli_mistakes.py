"""What a user sees when a command goes wrong: one clear line and the right exit status,
never a traceback or a Rust panic; and a mistaken command never disturbs a healthy run."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Callable

import orjson
import pytest
import redis

from rankflow.connectors.redis_generations import current_generation
from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_read import read_latest
from rankflow.options import RunOptions
from rankflow.services import LocalRedis, free_port

from tests.boards_example import ms, result
from tests.events import ev

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]
T0 = ms("2027-01-02 10:00:00.000")
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (DEBUG|INFO|WARNING) ")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def cli(*args: str, prefix: tuple[str, ...] = (), env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, *RANKFLOW, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RUST_BACKTRACE": "1", **(env or {})})


def one_line(r: subprocess.CompletedProcess) -> str:
    """The command's stderr, which must be one line: no traceback, no panic, no library's log."""
    assert "Traceback" not in r.stderr and "panicked" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def last_line(stderr: str) -> str:
    """The stop message of a run that ran: the last line, after only the run's own log records."""
    assert "Traceback" not in stderr and "panicked" not in stderr and "stack backtrace" not in stderr, stderr
    *logged, last = stderr.splitlines()
    assert all(LOG_RECORD.match(line) for line in logged), stderr
    return last


def unprivileged() -> tuple[str, ...]:
    """A prefix that runs a command without the power to ignore permission bits.

    Tests run as root, which reads and writes whatever the bits say. In a user namespace
    that maps the caller to an ordinary user (util-linux ``unshare``), the command owns
    the caller's files, so their owner bits apply, and has no capabilities over them.
    """
    if os.geteuid() != 0:
        return ()
    return ("unshare", "--user", "--map-user=1000", "--map-group=1000")


def wait_until(condition: Callable[[], bool], what: str, proc: subprocess.Popen | None = None,
               timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the run exited with {proc.returncode}: {proc.communicate()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def event(flow: str, n: int) -> bytes:
    """The ``n``-th valid input line of ``flow``."""
    if flow == "boards":
        return result(f"p{n}", f"m{n}", 10 + n, T0 + n, T0 + n + 1000)
    if flow == "activity":
        return orjson.dumps({"workspace_id": "w", "channel_id": f"c{n % 3}", "user_id": f"u{n}", "ts": T0 + n})
    return ev(f"u{n}", f"p{n}", f"song{n % 3}", "START", 1, n)


class LiveRun:
    """``rankflow run`` following a JSON Lines file that the test appends to."""

    def __init__(self, tmp: Path, redis_url: str, namespace: str, flow: str) -> None:
        self.flow, self.redis_url, self.namespace = flow, redis_url, namespace
        self.ns = RunOptions(input="", flow=flow, namespace=namespace).redis_namespace
        self.log = tmp / f"live-{flow}.jsonl"
        self.log.write_bytes(b"")
        self.lines = 0
        self.client = redis.Redis.from_url(redis_url)
        self.proc = subprocess.Popen(
            [*RANKFLOW, "run", "--flow", flow, "--input", f"jsonl:{self.log}", "--redis", redis_url,
             "--namespace", namespace, "--dead-letter", f"jsonl:{tmp / f'live-{flow}-dead.jsonl'}",
             "--barrier-ms", "50", "--idle-timeout", "0.2"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "RUST_BACKTRACE": "1"})

    def append(self) -> None:
        self.lines += 1
        with open(self.log, "ab") as out:
            out.write(event(self.flow, self.lines) + b"\n")

    def position(self) -> int:
        snap = read_latest(self.client, self.ns)
        return 0 if snap is None else snap["positions"].get(str(self.log), 0)

    def feed(self) -> None:
        """One more line, published by the run."""
        self.append()
        wait_until(lambda: self.position() >= self.lines, f"line {self.lines} published", self.proc)

    def owner(self) -> bytes | None:
        return self.client.get(Keys(self.ns, current_generation(self.client, self.ns)).owner)

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=60)
        self.client.close()
        return self.proc.returncode, err


@pytest.mark.parametrize("flow", ["listeners", "boards", "activity"])
def test_a_mistaken_run_or_rebuild_leaves_a_healthy_run_alone(tmp_path, redis_url, namespace, flow):
    """Issue 19.4: a second command on the namespace with an input it cannot read or a
    dead-letter output it cannot write says so in one line and exits 2 before claiming
    anything: the healthy run keeps its ownership and goes on publishing."""
    live = LiveRun(tmp_path, redis_url, namespace, flow)
    try:
        live.feed()
        owner = live.owner()
        assert owner is not None
        a_dir = tmp_path / "a-dir"
        a_dir.mkdir()
        a_file = tmp_path / "a-file.jsonl"
        a_file.write_bytes(event(flow, 1) + b"\n")
        unreadable = tmp_path / "unreadable.jsonl"
        unreadable.write_bytes(event(flow, 1) + b"\n")
        unreadable.chmod(0)
        closed = tmp_path / "closed"
        closed.mkdir(mode=0o500)
        good_dead = f"jsonl:{tmp_path / 'mistake-dead.jsonl'}"
        mistakes = [
            ((), ["--input", f"jsonl:{a_dir}", "--dead-letter", good_dead], f"{a_dir} is a directory"),
            ((), ["--input", f"jsonl:{a_file}", "--dead-letter", f"jsonl:{a_dir}"], f"{a_dir} is a directory"),
            ((), ["--input", f"jsonl:{a_file}", "--dead-letter", f"jsonl:{a_file}/dead.jsonl"], "not a directory"),
            ((), ["--input", f"jsonl:{a_file}", "--dead-letter", f"jsonl:{a_file}"], "is the input"),
            (unprivileged(), ["--input", f"jsonl:{unreadable}", "--dead-letter", good_dead], "Permission denied"),
            (unprivileged(), ["--input", f"jsonl:{a_file}", "--dead-letter", f"jsonl:{closed}/dead.jsonl"],
             "Permission denied"),
        ]
        for command in (["run", "--until-eof"], ["rebuild"]):
            for prefix, args, cause in mistakes:
                r = cli(*command, "--flow", flow, "--redis", redis_url, "--namespace", namespace, *args,
                        prefix=prefix)
                assert r.returncode == 2 and cause in one_line(r), (command, args, r.stderr)
                assert live.owner() == owner, f"{command} {args} took the namespace"
                assert live.proc.poll() is None, live.stop()
        assert a_file.read_bytes() == event(flow, 1) + b"\n", "the input was not overwritten"
        live.feed()  # still running, still publishing
    finally:
        code, err = live.stop()
    assert code == 130, err


@pytest.mark.redis  # a Redis of its own
@pytest.mark.parametrize("flow", ["boards", "activity"])
def test_a_run_whose_redis_loses_its_data_stops_with_one_line(tmp_path, namespace, flow):
    """Issue 19.7: Redis loses its data during a live run (FLUSHALL, a restart without
    persistence): the boards and activity flows cannot send their whole state again, so the
    run stops (exit 1) saying what happened and what to do, without a traceback or a panic."""
    service = LocalRedis(free_port(), tmp_path / "redis").start()
    try:
        live = LiveRun(tmp_path, service.url, namespace, flow)
        try:
            live.feed()
            live.client.flushall()
            live.append()
            live.proc.wait(timeout=120)
        finally:
            code, err = live.stop()
    finally:
        service.stop()
    assert code == 1, err
    message = last_line(err)
    assert message.startswith("rankflow: ") and "lost its data" in message and "--recovery-dir" in message, err


def test_a_fenced_run_stops_with_one_line(tmp_path, redis_url, namespace):
    """A run replaced by a newer run on its namespace stops (exit 1) with one line, no panic."""
    live = LiveRun(tmp_path, redis_url, namespace, "listeners")
    try:
        live.feed()
        other = tmp_path / "other.jsonl"
        other.write_bytes(event("listeners", 1) + b"\n")
        r = cli("run", "--until-eof", "--input", f"jsonl:{other}", "--redis", redis_url, "--namespace", namespace,
                "--dead-letter", f"jsonl:{tmp_path / 'other-dead.jsonl'}")
        assert r.returncode == 0, r.stderr
        live.append()
        live.proc.wait(timeout=120)
    finally:
        code, err = live.stop()
    assert code == 1 and "a newer run took the namespace" in last_line(err), err


def _busy_port() -> tuple[int, object]:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s.getsockname()[1], s


def test_ordinary_mistakes_are_one_line_and_exit_2(tmp_path, redis_url):
    """Issue 19.9: each of these was a Python traceback (or, for serve, a lie about its port)."""
    log = tmp_path / "e.jsonl"
    log.write_bytes(event("listeners", 1) + b"\n")
    run = ["run", "--input", f"jsonl:{log}", "--until-eof", "--dead-letter", f"jsonl:{tmp_path / 'dl.jsonl'}"]
    port, held = _busy_port()
    try:
        cases = [
            ([*run, "--redis", redis_url, "--metrics-port", "99999"], "--metrics-port"),
            ([*run, "--redis", redis_url, "--metrics-port", str(free_port()), "--metrics-host", "999.1.1.1"],
             "999.1.1.1"),
            ([*run, "--redis", redis_url, "--metrics-port", str(port)], f"127.0.0.1:{port}"),
            ([*run, "--redis", "notaurl"], "--redis"),
            ([*run, "--redis", redis_url, "--read-batch", "0"], "--read-batch"),
            ([*run, "--redis", redis_url, "--redis-retry-s", "0"], "--redis-retry-s"),
            ([*run, "--redis", redis_url, "--redis-retry-s", "inf"], "--redis-retry-s"),
            ([*run, "--redis", redis_url, "--redis-retry-s", "soon"], "--redis-retry-s"),
            ([*run, "--redis", f"{redis_url}?socket_timeout=abc"], "socket_timeout"),
            (["rebuild", "--input", f"jsonl:{log}", "--redis", "notaurl"], "--redis"),
            (["top", "--redis", "notaurl"], "--redis"),
            (["top", "--redis", f"{redis_url}?socket_timeout=abc"], "socket_timeout"),
            (["boards", "top", "--game", "g", "--board", "all", "--redis", "notaurl"], "--redis"),
            (["activity", "top", "--global", "--redis", "notaurl"], "--redis"),
            (["serve", "--redis", "notaurl"], "--redis"),
            (["serve", "--port", "99999"], "--port"),
            (["serve", "--port", str(port)], f"127.0.0.1:{port}"),
            (["generate", "--users", "5", "--songs", "5", "--events", "5", "--out", str(tmp_path)], "directory"),
            (["generate", "--kind", "scores", "--events", "5", "--out", str(tmp_path)], "directory"),
            (["generate", "--kind", "messages", "--events", "5", "--out", str(tmp_path)], "directory"),
            (["produce", "--input", str(tmp_path), "--kafka", "127.0.0.1:1/t"], "directory"),
            (["run", "--input", f"jsonl:{log}", "--redis", redis_url, "--recovery-dir", str(log)], "--recovery-dir"),
        ]
        for args, cause in cases:
            r = cli(*args)
            assert r.returncode == 2 and cause in one_line(r), (args, r.returncode, r.stderr)
    finally:
        held.close()


def test_kafka_mistakes_are_one_line(tmp_path, redis_url, kafka_brokers, topic):
    """An unreachable broker is one line (exit 1), not a hundred of librdkafka's; a line
    longer than a Kafka message may be is refused before anything is produced (exit 2)."""
    log = tmp_path / "e.jsonl"
    log.write_bytes(event("listeners", 1) + b"\n")
    dead = f"jsonl:{tmp_path / 'dl.jsonl'}"
    for args in (["run", "--input", "kafka:127.0.0.1:1/t", "--until-eof", "--redis", redis_url, "--dead-letter", dead],
                 ["run", "--input", f"jsonl:{log}", "--until-eof", "--redis", redis_url,
                  "--dead-letter", "kafka:127.0.0.1:1/dead"],
                 ["produce", "--input", str(log), "--kafka", "127.0.0.1:1/t", "--no-progress"]):
        r = cli(*args)
        assert r.returncode == 1 and "cannot reach Kafka" in one_line(r), (args, r.stderr)

    big = tmp_path / "big.jsonl"
    big.write_bytes(event("listeners", 1) + b"\n" + b'{"user_id": "u", "pad": "' + b"x" * 2_000_000 + b'"}\n')
    r = cli("produce", "--input", str(big), "--kafka", f"{kafka_brokers}/{topic}", "--no-progress")
    assert r.returncode == 2 and "line 2" in one_line(r), r.stderr
    from rankflow.connectors.kafka import topic_partitions

    with pytest.raises(Exception):  # noqa: B017 - nothing was produced, the topic was not even created
        topic_partitions(kafka_brokers, topic)


def _foreign_options() -> list[tuple[str, str, str, str]]:
    """Every product option of ``run`` with every flow that does not have it: (command, flow,
    option, a value its type takes, '' for a switch)."""
    from rankflow import products

    cases = []
    for option in products.options_of("run").values():
        holders = {p.name for p in products.owners()[option.dest]}
        value = option.choices[0] if option.choices else "" if option.action == "store_true" else "3"  # a switch: none
        for flow in products.PRODUCTS:
            if flow not in holders:
                for command in ("run", "rebuild"):
                    if command in option.commands:
                        cases.append((command, flow, option.flags[-1], value))
    return cases


@pytest.mark.parametrize("command, flow, option, value", _foreign_options())
def test_an_option_of_another_flow_is_refused(tmp_path, capsys, command, flow, option, value):
    """Issue 20.1: ``run --flow activity --signing-key X`` or ``--flow boards --bucket-seconds 60`` used
    to run, ignoring the option; now one line naming the option and the flows it belongs to,
    exit 2, before anything touches Redis (none listens on the URL given)."""
    from rankflow import products
    from rankflow.cli import main

    log = tmp_path / "events.jsonl"
    log.write_bytes(b"")
    code = main([command, "--flow", flow, "--input", f"jsonl:{log}", "--redis", f"redis://127.0.0.1:{free_port()}/0",
                 "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}", option, *([value] if value else [])])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    dest = next(o.dest for o in products.options_of(command).values() if option in o.flags)
    owners = [p.name for p in products.owners()[dest]]
    assert err.startswith(f"rankflow: {option} is an option of ") and f"not of --flow {flow}" in err, err
    assert all(f"--flow {name}" in err for name in owners), err


def test_the_refusals_of_the_issue(tmp_path):
    """The two cases issue 20 names, through the installed command."""
    log = tmp_path / "events.jsonl"
    log.write_bytes(b"")
    base = ["run", "--until-eof", "--input", f"jsonl:{log}", "--redis", f"redis://127.0.0.1:{free_port()}/0"]
    r = cli(*base, "--flow", "activity", "--signing-key", "ab" * 32)
    assert r.returncode == 2 and one_line(r) == ("rankflow: --signing-key is an option of --flow boards, not of "
                                                 "--flow activity"), r.stderr
    r = cli(*base, "--flow", "boards", "--bucket-seconds", "60")
    assert r.returncode == 2 and one_line(r) == ("rankflow: --bucket-seconds is an option of --flow activity, not "
                                                 "of --flow boards"), r.stderr


def test_run_options_of_another_flow_are_refused_without_the_command_line():
    """``RunOptions`` built by a program: a field of another product set is refused too."""
    from rankflow.options import UsageError

    with pytest.raises(UsageError, match="--signing-key is an option of --flow boards, not of --flow activity"):
        RunOptions(input="jsonl:x", flow="activity", signing_key=b"k" * 32).check()
    with pytest.raises(UsageError, match="--bucket-seconds is an option of --flow activity"):
        RunOptions(input="jsonl:x", flow="listeners", bucket_seconds=10).check()
    RunOptions(input="jsonl:x", flow="activity", bucket_seconds=10).check()  # its own


def test_the_signing_key_variable_is_no_option_of_other_flows(tmp_path, capsys, monkeypatch):
    """``$RANKFLOW_SIGNING_KEY`` (set for ``serve`` or the boards flow) does not make an activity or
    listener run refuse to start: only the option is the boards flow's."""
    from rankflow.cli import _run_options, build_parser

    monkeypatch.setenv("RANKFLOW_SIGNING_KEY", "ab" * 32)
    for flow in ("listeners", "activity"):
        opts = _run_options(build_parser().parse_args(["run", "--flow", flow, "--input", "jsonl:x"]))
        assert opts.signing_key is None
        opts.check()
    opts = _run_options(build_parser().parse_args(["run", "--flow", "boards", "--input", "jsonl:x"]))
    assert opts.signing_key == bytes.fromhex("ab" * 32)


@pytest.mark.parametrize("args, unrecognized", [
    (["activity", "top", "--n", "5", "--workspace", "w"], "--n"),  # was --namespace 5
    (["top", "--name", "x"], "--name"),
    (["run", "--input", "jsonl:x", "--until"], "--until"),
    (["boards", "top", "--game", "g", "--board", "all", "--nam", "x"], "--nam"),
])
def test_abbreviated_options_are_refused(args, unrecognized):
    """Issue 20.7: argparse took any unambiguous prefix of an option (``activity top --n 5`` meant
    ``--namespace 5``); now every parser has ``allow_abbrev=False``."""
    r = cli(*args, "--redis", f"redis://127.0.0.1:{free_port()}/0")
    assert r.returncode == 2 and f"unrecognized arguments: {unrecognized}" in one_line(r), r.stderr


def test_version():
    from importlib.metadata import version

    r = cli("--version")
    assert r.returncode == 0 and r.stdout == f"rankflow {version('rankflow')}\n", (r.stdout, r.stderr)


@pytest.mark.parametrize("command", ["run", "rebuild"])
def test_help_groups_the_options_per_product(command):
    """``run --help`` and ``rebuild --help``: each product's options in a group titled by it,
    generated from the registry; an option two products have is in the first one's group."""
    from rankflow import products
    from rankflow.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    groups = {g.title: {a.dest for a in g._group_actions} for g in sub._action_groups}
    placed: set[str] = set()
    for name, product in products.PRODUCTS.items():
        own = {o.dest for o in product.options if command in o.commands}
        assert own - placed <= groups.get(f"--flow {name}", set()), (name, groups)
        placed |= own
    common = groups["options"]
    assert not common & placed and {"input", "flow", "song_partitions", "k_max", "recovery_dir"} <= common
    text = sub.format_help()
    assert "--flow listeners:" in text and "--flow boards:" in text and "--flow activity:" in text
    assert "(also --flow boards)" in text  # --user-shards


def test_the_services_command_takes_no_abbreviations(tmp_path):
    r = subprocess.run([sys.executable, "-m", "rankflow.services", "start", "redis", "--dir", str(tmp_path), "--po", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unrecognized arguments: --po" in r.stderr, r.stderr
    assert not (tmp_path / "redis.pid").exists()


@pytest.mark.parametrize("command", [("boards", "top", "--game", "g", "--board", "all"),
                                     ("activity", "top", "--workspace", "w")])
def test_a_reader_refuses_a_namespace_it_cannot_name_keys_in(redis_url, command):
    """Braces would break the namespace's hash tag: one line and status 2 from every product's reader."""
    r = cli(*command, "--redis", redis_url, "--namespace", "a{b")
    assert r.returncode == 2 and "invalid namespace" in one_line(r)
