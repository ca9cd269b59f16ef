"""What every command's ``--help`` shares: the formatter, and examples that work as printed.

Each command's help ends with an example (``epilog``), written for the services that
``make services-start`` leaves running (the Makefile's ``REDIS_PORT`` and ``KAFKA_PORT``:
``tests/test_cli_help.py`` checks they agree), run from the checkout in the order of README:
``generate`` writes the logs the ``produce`` examples read, and so on.
"""

from __future__ import annotations

import argparse

REDIS = "redis://127.0.0.1:6399/0"
"""The Redis of ``make services-start``."""
KAFKA = "kafka:127.0.0.1:19092"
"""Its broker, as a Kafka address without the topic (``kafka:HOST:PORT``; the topic follows a ``/``)."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The examples are printed as written, one command a line (argparse would rewrap them)."""


def example(*commands: str, after: str | None = "", note: str = "") -> str:
    """An ``epilog`` of ``commands``, one a line, run from the checkout after ``make services-start``
    and ``after`` (what they read), then ``note``; ``after=None``: they need no service."""
    when = "" if after is None else f" (after `make services-start`{f' and {after}' if after else ''})"
    head = f"{'Example' if len(commands) == 1 else 'Examples'}{when}:"
    return "\n".join([head, *(f"  {c}" for c in commands), *([note] if note else [])])


LOGS = (("listeners", "events.jsonl", "playback-events", ""), ("boards", "scores.jsonl", "score-events", "player_id"),
        ("activity", "messages.jsonl", "messages", "workspace_id"))
"""Each product's example log, as ``generate`` writes it: (flow, file, topic, the field ``produce`` keys it by)."""


def produce_examples() -> str:
    return example(*(f"rankflow produce --input {path} --kafka {KAFKA}/{topic} --partitions 4"
                     + (f" --key-field {key}" if key else "") for _, path, topic, key in LOGS),
                   after="the examples of `rankflow generate --help`")


def run_examples() -> str:
    return example(*(f"rankflow run --flow {flow} --input {KAFKA}/{topic} "
                     f"--until-eof --redis {REDIS} --dead-letter jsonl:{flow}-dead-letters.jsonl"
                     for flow, _, topic, _ in LOGS),
                   after="the examples of `rankflow produce --help`",
                   note="Without --until-eof a run follows its input live until Ctrl-C; --input jsonl:events.jsonl "
                        "reads the file instead of the topic.")
