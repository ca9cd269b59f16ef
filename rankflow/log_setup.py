"""How the commands log: text lines, or one JSON object a line (``--log-format json``).

Text is for people reading a terminal (``TIME LEVEL LOGGER: MESSAGE``, as always); JSON is
for log collectors, which otherwise have to parse free text to find a run's position or
a warning's level. A JSON line holds ``time`` (UTC, ISO 8601), ``level``, ``logger`` and
``message``, plus the record's structured fields where it has them (the run's position
lines: ``rankflow.run_log``) and ``process`` in a process of ``--processes N``.

Both formats pass every message through :func:`scrub`: a URL's password (``redis://u:pw@``)
is replaced by ``***`` even where a library logged the URL itself. The commands' own last
lines (the summary of ``run``, ``generate``, ``produce``, the one-line refusal) go through
:func:`say`, so that with JSON every line on standard error parses.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from datetime import datetime, UTC
from typing import Any

import orjson

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)[^@\s/]+@")
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "color_message"}  # uvicorn's copy of its message with terminal colours
_format = "text"  # this process's choice (configure)


def scrub(text: str) -> str:
    """``text`` without URL passwords.

    >>> scrub("cannot reach redis://app:s3cret@cache:6379/0")
    'cannot reach redis://app:***@cache:6379/0'
    """
    return _URL_PASSWORD.sub(r"\1***@", text)


def _now_iso(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def json_line(level: str, logger: str, message: str, created: float, fields: dict[str, Any]) -> str:
    """One log line as a JSON object (no newline)."""
    obj: dict[str, Any] = {"time": _now_iso(created), "level": level, "logger": logger, "message": scrub(message)}
    obj.update(fields)
    return orjson.dumps(obj, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


class JsonFormatter(logging.Formatter):
    """A record as one JSON object; fields given with ``extra=`` become its keys."""

    def __init__(self, process_id: int | None = None) -> None:
        super().__init__()
        self._process = process_id

    def format(self, record: logging.LogRecord) -> str:
        fields = {k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS and not k.startswith("_")}
        if self._process is not None:
            fields["process"] = self._process
        if record.exc_info:
            fields["exception"] = scrub(self.formatException(record.exc_info))
        return json_line(record.levelname, record.name, record.getMessage(), record.created, fields)


class TextFormatter(logging.Formatter):
    """The text lines, scrubbed."""

    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record))


def configure(log_format: str = "text", process_id: int | None = None) -> None:
    """Make every log record of this process a line on standard error in ``log_format``.

    ``force``: a forked process of ``--processes N`` inherits its parent's handler, which would
    keep its format; uvicorn's and Bytewax's Python loggers propagate to this one."""
    global _format
    _format = log_format
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter(process_id))
    else:
        name = "%(name)s" if process_id is None else f"%(name)s[{process_id}]"
        handler.setFormatter(TextFormatter(TEXT_FORMAT.replace("%(name)s", name)))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    logging.captureWarnings(True)  # a library's warning is a record too, not a bare line among the objects


def is_json() -> bool:
    return _format == "json"


def say(message: str, level: str = "INFO", logger: str = "rankflow", **fields: Any) -> None:
    """A command's own line on standard error: the text as it is, or with ``--log-format json``
    a JSON object like every log record's (``fields`` are its structured keys; the text's
    ``rankflow:`` prefix, which tells the line from other programs' in a terminal, is left out)."""
    if _format == "json":
        message = message.removeprefix("rankflow: ")
        print(json_line(level, logger, message, time.time(), fields), file=sys.stderr, flush=True)
    else:
        print(message, file=sys.stderr, flush=True)
