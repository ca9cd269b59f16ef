"""What the commands reading a product's Redis state share (``rankflow boards``, ``rankflow activity``).

One query on a client of its own, closed after; the reader's "nothing to answer" errors
are one line on stderr and status 1, a bound the reader checks (``--k`` beyond K_max, a
namespace that cannot name keys) is bad usage, status 2; the answer goes to stdout as one
JSON object with ``--json``, else as the product's table.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

import redis

from rankflow.cli_errors import refuse
from rankflow.connectors.redis_contact import first_contact
from rankflow.connectors.redis_keys import connect
from rankflow.connectors.redis_replicas import sync_reader
from rankflow.options import UsageError

Answer = dict[str, Any]


def add_option(parser: argparse.ArgumentParser, flags: tuple[str, ...], old: str, **kwargs: Any) -> None:
    """An option spelled ``flags`` in ``--help`` (``-k``, ``--limit``) that also takes its ``old``
    long spelling (``--k``), unlisted: scripts written before the short forms keep working,
    and ``--help`` shows one spelling of each."""
    action = parser.add_argument(*flags, **kwargs)
    same = {key: kwargs[key] for key in ("type", "metavar") if key in kwargs}
    parser.add_argument(old, dest=action.dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **same)


def answer_query(redis_url: str, read_urls: Sequence[str], ask: Callable[[redis.Redis], Answer],
                 nothing: type[Exception], json: bool, dumps: Callable[[Answer], bytes],
                 show: Callable[[Answer], None]) -> int:
    """The exit status of one reader command that ``ask``\\ s its query of a client of ``redis_url``
    (or of its replicas ``read_urls``, ``--redis-read``: ``connectors.redis_replicas``):
    ``nothing`` is the reader's error for a query with no answer; ``dumps`` writes the
    answer for ``--json`` (``json``), ``show`` prints it for people."""
    if not read_urls:  # replicas: a failing one is skipped (connectors.redis_replicas), not refused here
        first_contact(redis_url)
    client = sync_reader(redis_url, read_urls, connect)
    try:
        answer = ask(client)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except nothing as exc:
        return refuse(str(exc), 1)
    finally:
        client.close()
    if json:
        sys.stdout.buffer.write(dumps(answer) + b"\n")
    else:
        show(answer)
    return 0
