"""``rankflow activity top|channel``: reading the activity rankings from the command line.

Each answer is one JSON object with ``--json`` (docs/semantics/windows.md 6), or a table. Exit
status: 0 an answer, 1 nothing published yet or the channel has no count in the
window (the message says which), 2 bad usage (``-k/--limit`` outside 1..K_max: never clamped).
"""

from __future__ import annotations

import argparse
from typing import Any
from collections.abc import Callable

import redis
from rankflow.connectors.activity_read import ActivityQueryError, ActivityReader
from rankflow.cli_format import print_line, print_rows, quantity, utc
from rankflow.cli_help import REDIS, example
from rankflow.cli_query import add_option, answer_query
from rankflow.connectors.redis_publish import dumps_document


def add_parser(sub: Any, add_redis: Callable[[argparse.ArgumentParser], None]) -> None:
    after = "the activity run of `rankflow run --help`"
    tops = (f"rankflow activity top --global -k 5 --redis {REDIS}",
            f"rankflow activity top --workspace acme -k 5 --json --redis {REDIS}")
    one = f"rankflow activity channel --workspace acme --channel general --redis {REDIS}"
    activity = sub.add_parser("activity", help="read the activity rankings (a workspace's top, the global top, "
                                               "one channel)", epilog=example(*tops, one, after=after))
    queries = activity.add_subparsers(dest="query", required=True)
    top = queries.add_parser("top", help="a workspace's (or, with --global, every workspace's) most active channels",
                             epilog=example(*tops, after=after))
    where = top.add_mutually_exclusive_group(required=True)
    where.add_argument("--workspace", metavar="WS")
    where.add_argument("--global", dest="everywhere", action="store_true", help="across workspaces")
    add_option(top, ("-k", "--limit"), "--k", type=int, default=10, metavar="K",
               help="the first K channels, 1..K_max (default %(default)s)")
    channel = queries.add_parser("channel", help="one channel's count and rank in its workspace",
                                 epilog=example(one, after=after))
    channel.add_argument("--workspace", required=True, metavar="WS")
    channel.add_argument("--channel", required=True, metavar="CH")
    for p in (top, channel):
        p.add_argument("--json", action="store_true", help="print one JSON object")
        add_redis(p)


def cmd_activity(args: argparse.Namespace) -> int:
    def ask(client: redis.Redis) -> dict[str, Any]:
        reader = ActivityReader(client, args.namespace)
        if args.query == "channel":
            return reader.channel(args.workspace, args.channel)
        if args.everywhere:
            return reader.global_top(args.limit)
        return reader.top(args.workspace, args.limit)

    # dumps_document: a watermark may be beyond 64 bits
    return answer_query(args.redis, args.redis_read, ask, ActivityQueryError, args.json, dumps_document, print_answer)


def print_answer(answer: dict[str, Any]) -> None:
    snapshot = f"snapshot {answer['snapshot_id']}"
    if "items" not in answer:
        print_line(f"{answer['channel_id']} in {answer['workspace_id']}: count {quantity(answer['count'])}, rank "
                   f"{quantity(answer['rank'])}")
        print_line(snapshot)
        return
    where = answer.get("workspace_id")
    columns = ("rank", *(() if where is not None else ("workspace_id",)), "channel_id", "count")
    rows = [item if "count" in item else {**item, "count": (item["count_low"], item["count_high"])}
            for item in answer["items"]]  # --global-summary: bounds
    print_rows(f"Top {len(rows)} channels of {where if where is not None else 'all workspaces'}", columns, rows,
                [f"window {utc(answer['window_start'])} to {utc(answer['window_end'])} (end excluded, event time), "
                 f"watermark {utc(answer['watermark'])}", snapshot])
