"""The barrier interval when ``--barrier-ms`` is unset depends on the number of processes (issue 40):
250 ms with one, 1000 ms with several, where each barrier makes the processes wait for one another
(docs/operations.md, "Keying the per-entity stage"). A given ``--barrier-ms`` is kept as given."""

from __future__ import annotations

import argparse

import pytest

from rankflow.cli import _run_options, build_parser
from rankflow.options import DEFAULT_BARRIER_MS, SEVERAL_PROCESSES_BARRIER_MS, RunOptions

RUN = ["run", "--input", "jsonl:events.jsonl"]
CLUSTER = ["--addresses", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003", "--process-id", "1", "--run-id", "r"]


def barrier(*argv: str) -> int:
    return _run_options(build_parser().parse_args([*RUN, *argv])).barrier


def test_the_defaults_are_what_the_help_says():
    assert (DEFAULT_BARRIER_MS, SEVERAL_PROCESSES_BARRIER_MS) == (250, 1000)
    run = next(action.choices["run"] for action in build_parser()._actions
               if isinstance(action, argparse._SubParsersAction))
    text = " ".join(run.format_help().split())
    assert "(default: 250 with one process, 1000 with several (--processes, --addresses)" in text


@pytest.mark.parametrize(("argv", "expected"), [
    ((), 250),
    (("--workers", "2"), 250),  # threads of one process
    (("--processes", "2"), 1000),
    (("--processes", "4"), 1000),
    (CLUSTER, 1000),
    (("--addresses", "127.0.0.1:7001", "--process-id", "0", "--run-id", "r"), 250),  # a cluster of one
    (("--barrier-ms", "250", "--processes", "2"), 250),
    (("--barrier-ms", "40"), 40),
    (("--barrier-ms", "2000", *CLUSTER), 2000),
])
def test_an_unset_barrier_follows_the_processes(argv, expected):
    assert barrier(*argv) == expected


def test_the_processes_of_a_local_run_keep_the_several_processes_barrier():
    """``--processes N`` starts N processes each with ``--addresses`` of N (``runner``): they resolve alike."""
    from dataclasses import replace

    parent = RunOptions(input="jsonl:x", processes=3)
    child = replace(parent, processes=1, addresses=["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"], process_id=2,
                    run_id="r")
    assert parent.barrier == child.barrier == SEVERAL_PROCESSES_BARRIER_MS
    assert RunOptions(input="jsonl:x").barrier == DEFAULT_BARRIER_MS
