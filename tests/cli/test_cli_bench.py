"""The bench commands' options (``rankflow/cli_bench.py``) against the benchmarks' own configurations."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields

import pytest

from rankflow import cli_bench
from rankflow.bench.activity import PARTS as ACTIVITY_PARTS, ActivityBenchConfig
from rankflow.bench.boards import PARTS as BOARDS_PARTS, BoardsBenchConfig
from rankflow.bench.listeners import PARTS as LISTENERS_PARTS, BenchConfig, SweepConfig
from rankflow.cli import build_parser

COMMANDS = {"bench": BenchConfig, "bench-sweep": SweepConfig, "bench-boards": BoardsBenchConfig,
            "bench-activity": ActivityBenchConfig}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_defaults_to_the_configuration_it_fills(command):
    """The CLI declares the options without importing the benchmarks: each default must be
    the configuration's, and each option a field of it (nothing silently dropped)."""
    args = vars(build_parser().parse_args([command]))
    config = COMMANDS[command]
    defaults = config()
    names = {f.name for f in fields(config)}
    options = {k: v for k, v in args.items() if k != "command"}
    assert set(options) <= names, f"options that fill nothing: {set(options) - names}"
    for name, value in options.items():
        assert value == getattr(defaults, name), f"{command} --{name.replace('_', '-')}"
    assert cli_bench._config(config, build_parser().parse_args([command])) == defaults


def test_the_parts_are_the_benchmarks_parts():
    assert cli_bench.ACTIVITY_PARTS == ACTIVITY_PARTS
    assert cli_bench.BOARDS_PARTS == BOARDS_PARTS
    assert cli_bench.LISTENERS_PARTS == LISTENERS_PARTS
    assert cli_bench.LISTENERS_PARTS == BenchConfig().parts


@pytest.mark.parametrize("command", ["bench", "bench-boards", "bench-activity"])
def test_an_unknown_part_is_one_line_and_exit_2(command):
    done = subprocess.run([sys.executable, "-m", "rankflow.cli", command, "--parts", "throughput,nope"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "unknown nope" in done.stderr, done.stderr
