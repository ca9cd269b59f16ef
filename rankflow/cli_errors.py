"""How a command says it failed: one line on standard error, for people or, under ``--json``, for programs.

Without ``--json`` the line is ``rankflow: MESSAGE`` (through ``log_setup.say``, so
``--log-format json`` makes it a log object like the others). A command given ``--json``
is read by a program, which must not have to parse English to learn that it failed: every
line it writes on standard error is then one JSON object, ``{"error": MESSAGE, "exit":
STATUS}``, the status the command exits with (2 bad usage, 1 a runtime failure). A
usage error of the parser too, which is why the choice is made from the raw arguments
(``--json`` among them) before they are parsed. Standard output keeps only answers, so
``rankflow top --json | jq`` never reads an error as a ranking.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import orjson

from rankflow.log_setup import say

_json = False


def wants_json(argv: Sequence[str]) -> bool:
    """Whether the command line asks for JSON (``--json`` before any ``--``)."""
    args = list(argv)
    return "--json" in (args[:args.index("--")] if "--" in args else args)


def set_json(on: bool) -> None:
    global _json
    _json = on


def is_json() -> bool:
    """Whether errors are JSON now (``main`` decides, from the raw arguments, then from the parsed ones)."""
    return _json


def refuse(message: str, status: int) -> int:
    """Say that the command failed with ``message`` (no ``rankflow:`` prefix) and return ``status``."""
    if _json:
        sys.stderr.buffer.write(orjson.dumps({"error": message, "exit": status}) + b"\n")
        sys.stderr.flush()
    else:
        say(f"rankflow: {message}", "ERROR")
    return status
