"""Every command's ``--help`` (issue 20.7): an example that works as printed after ``make
services-start``, one spelling of each option shown, and the spellings scripts used before
still taken; one form of Kafka address, taken by every option that names a topic."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rankflow.arg_types import kafka
from rankflow.cli import build_parser
from rankflow.cli_help import KAFKA, REDIS

ROOT = Path(__file__).resolve().parents[2]
RANKFLOW = [sys.executable, "-m", "rankflow.cli"]


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                                                           argparse.ArgumentParser]]:
    """Every command and subcommand (``boards top``) under ``parser``, with its parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from commands(sub, (*path, name))


COMMANDS = dict(commands(build_parser()))


def test_the_command_tree_is_all_there():
    assert {("run",), ("produce",), ("serve",), ("top",), ("boards", "around"), ("activity", "channel"),
            ("bench-activity",)} <= set(COMMANDS)


def test_the_top_help_lists_every_command_once_under_its_family():
    from rankflow.cli import FAMILIES
    text = build_parser().format_help()
    listed = re.findall(r"^  ([a-z][a-z-]*)  +\S", text.split("options:")[1], flags=re.MULTILINE)
    top = sorted(name for (name, *rest) in COMMANDS if not rest)
    assert sorted(listed) == top and len(listed) == len(set(listed))
    for family, _ in FAMILIES:
        assert f"\n{family}:\n" in text
    assert text.index("run a flow:") < text.index("  rebuild ") < text.index("read the rankings:") < text.index("  boards ")


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_help_has_an_example_that_parses(command):
    """The examples are the command's own and parse as given (a renamed option would break them)."""
    text = COMMANDS[command].format_help()
    assert "Example" in text, text
    examples = [line.strip() for line in text.splitlines() if line.startswith("  rankflow ")]
    assert examples and all(shlex.split(e)[1:1 + len(command)] == list(command) for e in examples), examples
    for line in examples:
        build_parser().parse_args(shlex.split(line)[1:])  # exits 2 on a mistake


def test_help_is_printed_as_written_with_its_example():
    r = subprocess.run([*RANKFLOW, "boards", "top", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and f"\n  rankflow boards top --game arena --board all -n 10 --redis {REDIS}\n" in r.stdout


def test_the_examples_use_the_services_of_make_services_start():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    ports = dict(re.findall(r"^(REDIS_PORT|KAFKA_PORT) \?= (\d+)$", makefile, re.M))
    assert REDIS == f"redis://127.0.0.1:{ports['REDIS_PORT']}/0" and KAFKA == f"kafka:127.0.0.1:{ports['KAFKA_PORT']}"


@pytest.mark.parametrize("command, flags, old, dest", [
    (["top"], ("-k", "--limit"), "--k", "limit"),
    (["activity", "top", "--global"], ("-k", "--limit"), "--k", "limit"),
    (["boards", "top", "--game", "g", "--board", "all"], ("-n", "--limit"), "--n", "limit"),
    (["boards", "around", "--game", "g", "--board", "all", "--player", "p"], ("-r", "--radius"), "--r", "radius"),
])
def test_short_long_and_old_spellings_are_one_option(command, flags, old, dest):
    """``-k 3``, ``--limit 3`` and the old ``--k 3`` set the same value; help shows only the first two."""
    for flag in (*flags, old):
        assert getattr(build_parser().parse_args([*command, flag, "3"]), dest) == 3, flag
    default = getattr(build_parser().parse_args(command), dest)
    assert default in (5, 10)
    parser = COMMANDS[tuple(c for c in command if not c.startswith("-"))[:2]]
    text = parser.format_help()
    assert all(f in text for f in flags) and not re.search(rf"{old}\b", text), text


def test_kafka_addresses_have_one_form_and_take_the_bare_one_too():
    assert kafka("kafka:h1:9092,h2:9092/t") == kafka("h1:9092,h2:9092/t")
    assert (kafka("kafka:h:9092/t").brokers, kafka("kafka:h:9092/t").topic) == ("h:9092", "t")
    for bad in ("", "kafka:", "h:9092", "h:9092/", "/t", "kafka:h:0/t", "h:99999/t", "h:x/t", "h:9092,/t"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected kafka:HOST:PORT/TOPIC"):
            kafka(bad)
    for form in ("kafka:127.0.0.1:19092/events", "127.0.0.1:19092/events"):
        assert build_parser().parse_args(["produce", "--input", "x", "--kafka", form]).kafka == kafka(form)
        args = build_parser().parse_args(["serve", "--kafka", form, "--score-kafka", form])
        assert args.kafka == args.score_kafka == kafka(form)


@pytest.mark.parametrize("args", [["produce", "--input", "x.jsonl", "--kafka", "127.0.0.1:19092"],
                                  ["serve", "--kafka", "kafka:127.0.0.1/"],
                                  ["serve", "--score-kafka", "kafka:h:port/t"],
                                  ["run", "--input", "kafka:h:port/t"],
                                  ["run", "--input", "jsonl:x.jsonl", "--dead-letter", "kafka:nowhere"]])
def test_a_bad_kafka_address_is_one_line_and_status_2(args, tmp_path):
    (tmp_path / "x.jsonl").write_text("{}\n")
    r = subprocess.run([*RANKFLOW, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1 and "expected kafka:HOST:PORT/TOPIC" in r.stderr, r.stderr


HELP_ORDER = (("generate",), ("produce",), ("run",), ("rebuild",), ("top",), ("boards",), ("activity",), ("status",))
"""The commands whose examples read what the ones before wrote (``serve`` and the benchmarks aside:
one keeps running, the others start services of their own)."""


@pytest.mark.redis  # `make services-start`
@pytest.mark.broker
def test_the_examples_work_as_printed_after_make_services_start(tmp_path):
    """Every example of these commands' help, in order, against the services of ``make
    services-start`` (on free ports here: only the ports are changed)."""
    from rankflow.services import free_port

    redis_port, kafka_port, local = free_port(), free_port(), tmp_path / "local"
    lines = [line.strip() for command in HELP_ORDER for line in COMMANDS[command].format_help().splitlines()
             if line.startswith("  rankflow ")]
    script = "\n".join(lines).replace("127.0.0.1:6399/", f"127.0.0.1:{redis_port}/").replace(
        "127.0.0.1:19092/", f"127.0.0.1:{kafka_port}/").replace("rankflow ", f"{sys.executable} -m rankflow.cli ")
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "RANKFLOW_REDIS_URL", "RANKFLOW_SIGNING_KEY")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    make = ["make", "--no-print-directory", "-C", str(ROOT)]
    try:
        subprocess.run([*make, "services-start", f"REDIS_PORT={redis_port}", f"KAFKA_PORT={kafka_port}",
                        f"LOCAL={local}"], env=env, check=True, capture_output=True, timeout=300)
        r = subprocess.run(["bash", "-c", "set -euo pipefail -x\n" + script], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"an example failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    finally:
        subprocess.run([*make, "services-stop", f"LOCAL={local}"], env=env, capture_output=True, timeout=120)
    assert len(lines) >= 14 and "song_0" in r.stdout and "p000042" in r.stdout and "general" in r.stdout, r.stdout
