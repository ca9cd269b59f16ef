"""``rankflow status``: is a run caught up? Per product of a namespace, the run that owns it,
its last snapshot, and the lag of that snapshot behind the input's end, partition by partition.

For people a table in the readers' format (docs/cli.md), for programs ``--json`` (a list of
one object per product). Exit status: 0 every product shown is caught up, 1 one is behind,
has no snapshot or reads none of the inputs given (or a service cannot be reached),
2 bad usage. docs/operations.md, "Reading status", says how to read it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from rankflow import products
from rankflow.cli_errors import refuse
from rankflow.cli_format import print_line, print_rows, quantity, utc
from rankflow.cli_help import KAFKA, REDIS, example
from rankflow.connectors.redis_contact import first_contact
from rankflow.connectors.redis_keys import Keys, connect
from rankflow.connectors.redis_publish import dumps_document
from rankflow.input_ends import Input
from rankflow.options import UsageError
from rankflow.status import ProductStatus, statuses
from rankflow.arg_types import KAFKA_FORM

if TYPE_CHECKING:
    from rankflow.kafka_settings import KafkaSettings


def add_parser(sub: Any, add_redis: Callable[[argparse.ArgumentParser], None]) -> None:
    s = sub.add_parser("status", help="is a run caught up: per product its owner, last snapshot and lag behind the input",
                       epilog=example(f"rankflow status --input {KAFKA}/playback-events --input {KAFKA}/score-events "
                                      f"--input {KAFKA}/messages --redis {REDIS}",
                                      f"rankflow status --flow boards --input {KAFKA}/score-events --json "
                                      f"--redis {REDIS}",
                                      after="the examples of `rankflow run --help`",
                                      note="Exit status: 0 caught up, 1 behind or no snapshot, 2 bad usage."))
    s.add_argument("--input", action="append", required=True, metavar="URI",
                   help=f"the input the runs read: jsonl:PATH or {KAFKA_FORM}; repeat it for products that read "
                        "different inputs (each product's snapshot names its own)")
    s.add_argument("--flow", choices=tuple(products.PRODUCTS),
                   help="only this product (default: every product with a snapshot in the namespace)")
    s.add_argument("--json", action="store_true", help="print a JSON list, one object per product")
    add_kafka_settings(s)
    add_redis(s)


def add_kafka_settings(parser: argparse.ArgumentParser) -> None:
    """``--kafka-config FILE`` and ``-X KEY=VALUE``, as every command that talks to Kafka has them."""
    from rankflow import kafka_settings as settings

    settings.add_options(parser)


def kafka_settings(args: argparse.Namespace) -> KafkaSettings:
    """The librdkafka settings of ``--kafka-config``, ``-X`` and ``$RANKFLOW_KAFKA_CONFIG``, checked by
    librdkafka (a ``UsageError``, one line, before anything is asked)."""
    from rankflow import kafka_settings as settings

    return settings.from_args(args, os.environ)


def cmd_status(args: argparse.Namespace) -> int:
    try:
        Keys(args.namespace)
    except ValueError as exc:
        raise UsageError(f"--namespace: {exc}") from None
    inputs = _inputs(args.input)
    settings = kafka_settings(args)
    ends = {given: given.ends(settings) for given in inputs}  # first: see rankflow.status
    first_contact(args.redis)  # an address that is not Redis: one line within about 2 s
    client = connect(args.redis)
    try:
        found = statuses(client, args.namespace, args.flow, inputs, ends)
    finally:
        client.close()
    if args.json:
        sys.stdout.buffer.write(dumps_document([s.to_json() for s in found]) + b"\n")
    else:
        for status in found:
            print_status(status)
    if not found:
        names = ", ".join(f"{p.name}: {p.namespace(args.namespace)}" for p in products.PRODUCTS.values())
        return refuse(f"no snapshot in namespace {args.namespace!r} ({names})", 1)
    for status in found:
        if status.problem is not None:
            refuse(f"{status.product}: {status.problem}", 1)
    return 0 if all(s.caught_up for s in found) else 1


def _inputs(uris: Sequence[str]) -> list[Input]:
    """Each ``--input`` once, checked before any service is asked."""
    inputs: list[Input] = []
    for uri in uris:
        given = Input.parse(uri)
        if given not in inputs:
            inputs.append(given)
    return inputs


def print_status(status: ProductStatus) -> None:
    """One product's status for people: a title saying whether it is caught up, its partitions
    (position, end, lag), then the lines naming its input, owner, snapshot and dead letters."""
    view = status.to_json()
    # names the user chose (namespace, file, topic) are printed as they are, never read as rich markup
    where = f"{view['product']} in namespace {escape(repr(view['namespace']))} (generation {view['generation']})"
    snap = view["snapshot"]
    if view["caught_up"]:
        state = "caught up"
    elif snap is None:
        state = "no snapshot"
    elif status.positions is None:
        state = "input not given"
    else:
        state = f"behind by {quantity(view['lag'])} events"
    footer = []
    if view["input"] is not None:
        footer.append(f"input {escape(view['input'])}: lag {quantity(view['lag'])} in all, ends read when status started")
    footer.append(_owner_line(view["owner"]))
    if snap is not None:
        footer.append(_dead_letters_line(view["dead_letters"], view["dead_letters_by_reason"], view["owner"]))
        footer.append(f"snapshot {snap['snapshot_id']} published {utc(snap['published_at'])}, "
                      f"{snap['age_ms'] / 1000:.1f}s ago")
    title = f"{where}: {state}"
    if not view["partitions"]:
        print_line(f"[bold]{title}[/bold]")
        for line in footer:
            print_line(line)
        return
    rows = [{**p, "partition": escape(p["partition"])} for p in view["partitions"]]
    print_rows(title, ("partition", "position", "end", "lag"), rows, footer)


def _owner_line(owner: dict[str, Any] | None) -> str:
    if owner is None:
        return "no run owns the generation"
    if owner["since"] is None:
        return f"owned by run {owner['token']} (who and since when: not recorded)"
    who = ", ".join(f"{k.replace('_', ' ')} {escape(str(owner[k]))}" for k in ("run_id", "host", "pid")
                    if owner[k] is not None)
    return f"owned by {owner['command']} {owner['token']} ({who}) since {utc(owner['since'])}"


def _dead_letters_line(total: int | None, by_reason: dict[str, int] | None, owner: dict[str, Any] | None) -> str:
    """The snapshot's dead letters, and where they are: the owner's ``--dead-letter`` output (a file on
    the owner's host), as it recorded it; a run of an earlier rankflow did not record it."""
    where = owner and owner.get("dead_letter")
    if where:
        on_host = f" on host {escape(owner['host'])}" if where.startswith("jsonl:") and owner and owner["host"] else ""
        text = f"{quantity(total or 0)} dead letters in {escape(where)}{on_host}"
    else:
        text = f"{quantity(total or 0)} dead letters (in the owner's --dead-letter output)"
    if by_reason:
        text += ": " + ", ".join(f"{reason} {quantity(n)}" for reason, n in by_reason.items())
    return text
