"""The ``rankflow`` command line.

Exit status: 0 success, 1 a runtime failure (a service is unreachable, no usable
ranking, a newer run or a rebuild took over), 2 bad usage.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, UTC
from typing import Any, NoReturn

import redis

from rankflow import kafka_settings, products
from rankflow.arg_types import (KAFKA_FORM, interval as _interval, kafka as _kafka, not_negative as _not_negative,
                                port as _port, positive as _positive, rate as _rate, seconds as _seconds)
from rankflow.connectors.jsonl import MAX_LINE_BYTES
from rankflow.connectors.kafka import KafkaUnavailable
from rankflow.connectors.board_layout import RedisBoardsLayout
from rankflow.connectors.redis_contact import NotRedis, address, first_contact
from rankflow.connectors.redis_generations import FencedError, GenerationSwitched, RunAlreadyPublished
from rankflow.connectors.redis_keys import DEFAULT_NAMESPACE
from rankflow.connectors.redis_replicas import READ_URL_ENV, read_urls
from rankflow.cluster_watch import DEFAULT_PEER_TIMEOUT_S
from rankflow.execution import stop_signal, tune_gc
from rankflow.options import (DEFAULT_BARRIER_MS, DEFAULT_DEAD_LETTER, DEFAULT_REBUILD_DEAD_LETTER,
                              SEVERAL_PROCESSES_BARRIER_MS, SIGNING_KEY_ENV, RunOptions,
                              ServiceError, UsageError, check_input_file, check_output_file, check_redis_url,
                              default_redis_url, redacted)
from rankflow.api.http_cache import DEFAULT_MAX_AGE_S
from rankflow.api.server import DEFAULT_BODY_TIMEOUT_MS, DEFAULT_HEADER_TIMEOUT_MS, DEFAULT_MAX_CONNECTIONS
from rankflow import cli_bench, cli_errors, cli_status
from rankflow.cli_format import positions, quantity
from rankflow.cli_help import KAFKA, REDIS, HelpFormatter, example, produce_examples, run_examples
from rankflow.products.boards import signing_key
from rankflow.rebuild import RebuildFailed, rebuild
from rankflow.runner import run
from rankflow.generate import T0_MS, Chaos, generate
from rankflow.generate_scores import DEFAULT_DAYS, DEFAULT_START_MS, ScoreChaos, generate_scores
from rankflow import generate_messages as gm
from rankflow.produce import produce_file
from rankflow.services import cannot_listen
from rankflow import log_setup
from rankflow.log_setup import say
from rankflow.progress import counting

log = logging.getLogger("rankflow")

INGEST_TOKEN_ENV = "RANKFLOW_INGEST_TOKEN"


class _Parser(argparse.ArgumentParser):
    """Bad usage is one line, as every other refusal of the command line: the usage
    summary argparse prints first would push the cause out of sight. No abbreviations
    (``allow_abbrev=False``): ``activity top --n 5`` is refused, not taken for ``--namespace 5``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # every parser and subparser is one of these
        kwargs.setdefault("formatter_class", HelpFormatter)  # the examples as written
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        if cli_errors.is_json():  # main saw --json among the arguments
            where = self.prog.removeprefix("rankflow").strip()  # the JSON error's message has no "rankflow:"
            cli_errors.refuse(f"{where + ': ' if where else ''}{message} (see {self.prog} --help)", 2)
            self.exit(2)
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _products(text: str) -> tuple[str, ...]:
    """``--products``: names of products, each once, in the registry's order."""
    names = {name for name in text.split(",") if name}
    unknown = sorted(names - set(products.PRODUCTS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected products among {', '.join(products.PRODUCTS)}, got {text!r}")
    return tuple(name for name in products.PRODUCTS if name in names)


def _version() -> str:
    """The installed package's version (``pyproject.toml``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rankflow")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown (not installed)"


def _add_redis(p: argparse.ArgumentParser) -> None:
    p.add_argument("--redis", default=default_redis_url(), metavar="URL",
                   help="Redis URL (default: $RANKFLOW_REDIS_URL or %(default)s)")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, metavar="NS",
                   help="key namespace in Redis (default: %(default)s)")


def _add_redis_read(p: argparse.ArgumentParser) -> None:
    """``--redis-read``: where a reader reads (``connectors.redis_replicas``), apart from ``--redis``."""
    p.add_argument("--redis-read", action="append", metavar="URL",
                   help=f"read snapshots from this Redis replica, repeatable: the first one that answers, the "
                        f"--redis URL last (default: ${READ_URL_ENV}, URLs separated by commas; without either, "
                        f"reads go to --redis)")


def _add_reader_redis(p: argparse.ArgumentParser) -> None:
    """The Redis options of a command that only reads: ``--redis``, ``--namespace``, ``--redis-read``."""
    _add_redis(p)
    _add_redis_read(p)


def _add_flow_options(p: argparse.ArgumentParser, dead_letter: str, command: str) -> None:
    """The options of ``run`` or ``rebuild`` (``command``): those of every flow, then each
    product's own in a group titled by the product (``rankflow.products``)."""
    p.add_argument("--input", required=True, metavar="URI", help=f"jsonl:PATH or {KAFKA_FORM}")
    _add_redis(p)
    p.add_argument("--dead-letter", default=dead_letter, metavar="URI",
                   help=f"where invalid events go: jsonl:PATH or {KAFKA_FORM} (default: %(default)s)")
    p.add_argument("--flow", choices=tuple(products.PRODUCTS), default=products.DEFAULT,
                   help="; ".join(f"{p.name}: {p.title}" for p in products.PRODUCTS.values())
                        + " (default: %(default)s)")
    p.add_argument("--song-partitions", "--partitions", type=_positive, default=16, metavar="P",
                   help="counter partitions: of songs, or of board entries with --flow boards (default: %(default)s)")
    p.add_argument("--k-max", type=_positive, metavar="K",
                   help="songs ranked per snapshot (default 100), or entries listed per changed board with "
                        "--flow boards (default 10; the whole boards are in Redis)")
    p.add_argument("--workers", type=_positive, default=1, metavar="N")
    p.add_argument("--barrier-ms", type=_positive, metavar="MS",
                   help="how often the run publishes a snapshot, in milliseconds (default: "
                        f"{DEFAULT_BARRIER_MS} with one process, {SEVERAL_PROCESSES_BARRIER_MS} with several "
                        "(--processes, --addresses): every barrier makes the processes wait for one another)")
    p.add_argument("--read-batch", type=_positive, metavar="N",
                   help="Kafka input: the most messages a partition reads at once (default: "
                        + ", ".join(f"{RunOptions(input='', flow=name).kafka_batch} for --flow {name}"
                                    for name in products.PRODUCTS) + ")")
    p.add_argument("--max-line-bytes", type=_positive, default=MAX_LINE_BYTES, metavar="N",
                   help="JSON Lines input: a longer line is not read but dead-lettered as invalid_json "
                        "(default: %(default)s, 1 MiB)")
    p.add_argument("--recovery-dir", metavar="DIR",
                   help="keep state and input positions here at every barrier and resume from them")
    p.add_argument("--redis-retry-s", type=_seconds, default=300.0, metavar="SECONDS",
                   help="how long a snapshot waits for an unreachable or stalled Redis before the run stops "
                        "(exit 1; resume it with the same --recovery-dir) (default: %(default)g)")
    kafka_settings.add_options(p)
    p.add_argument("--idle-timeout", type=float, default=5.0, metavar="SECONDS",
                   help="live runs of the activity flow, and the listener flow's recent plays: an input partition "
                        "with nothing to read this long stops holding the watermark back until its next event "
                        "(default: %(default)s)")
    p.add_argument("--log-every", type=_interval, default=30.0, metavar="SECONDS",
                   help="log the input position, lag and events/s every SECONDS (default: %(default)g; 0: never)")
    _add_log_format(p)
    _add_product_options(p, command)


def _add_log_format(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-format", choices=log_setup.FORMATS, default="text",
                   help="text lines, or one JSON object a line (time, level, logger, message and the line's "
                        "fields) for log collectors; json draws no progress bar (default: %(default)s)")


def _add_product_options(p: argparse.ArgumentParser, command: str) -> None:
    """One argument group per product, of its options of ``command``; an option several products
    have is in the first one's group and says which others have it."""
    defaults = RunOptions.__dataclass_fields__
    owners = products.owners()
    added: set[str] = set()
    for product in products.PRODUCTS.values():
        mine = [o for o in product.options if command in o.commands and o.dest not in added]
        if not mine:
            continue
        group = p.add_argument_group(f"--flow {product.name}", f"{product.title}; refused with another --flow")
        for option in mine:
            others = [q.name for q in owners[option.dest] if q is not product]
            option.add_to(group, defaults[option.dest].default if option.dest in defaults else option.default,
                          also=" or ".join(f"--flow {name}" for name in others))
            added.add(option.dest)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rankflow", description="Real-time rankings from event streams: songs by "
                                     "current listeners, game score boards, most active channels.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="write a realistic playback, score or message log (JSON Lines) with chaos",
                       epilog=example("rankflow generate --users 10000 --songs 2000 --events 100000 --seed 1 "
                                      "--out events.jsonl",
                                      "rankflow generate --kind scores --players 5000 --games 4 --events 50000 "
                                      "--out scores.jsonl",
                                      "rankflow generate --kind messages --events 100000 --workspaces 100 --seed 1 "
                                      "--out messages.jsonl", after=None))
    g.add_argument("--kind", choices=("playback", "scores", "messages"), default="playback",
                   help="playback events (needs --users, --songs), game score results or activity (message) "
                        "events (default: %(default)s)")
    g.add_argument("--users", type=_positive,
                   help=f"playback: listeners; messages: users of the biggest workspace (default: {gm.DEFAULT_USERS})")
    g.add_argument("--songs", type=_positive, help="playback: songs")
    g.add_argument("--events", type=_positive, required=True)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--out", required=True, metavar="PATH")
    g.add_argument("--players", type=_positive, default=10_000, help="scores: players (default: %(default)s)")
    g.add_argument("--games", type=_positive, default=4, help="scores: games (default: %(default)s)")
    g.add_argument("--start", type=_start_ms, metavar="ISO|now",
                   help="when the log's event time starts (playback, messages: the first event's ts; scores: when the "
                        "first match ends), ISO 8601, UTC unless it says otherwise, or now (default: fixed, so a seed "
                        "gives the same log: playback and messages 2026-01-01T00:00Z, scores 2026-12-30T20:00Z, "
                        "crossing into 2027-W01)")
    g.add_argument("--days", type=float, default=DEFAULT_DAYS,
                   help="scores: about how many days the log spans (default: %(default)s)")
    g.add_argument("--clean", action="store_true",
                   help="scores: only valid, unique results, no chaos (signed with --signing-key); "
                        "messages: only valid events, in order of ts (none late, none expired)")
    g.add_argument("--chaos", type=float, default=1.0, metavar="SCALE",
                   help="scores, messages: every chaos rate times SCALE (default: %(default)s)")
    g.add_argument("--workspaces", type=_positive, default=gm.DEFAULT_WORKSPACES,
                   help="messages: workspaces (default: %(default)s)")
    g.add_argument("--channels", type=_positive, default=gm.DEFAULT_CHANNELS,
                   help="messages: channels of the biggest workspace; smaller ones have fewer (default: %(default)s)")
    g.add_argument("--bots", type=_not_negative, default=gm.DEFAULT_BOTS,
                   help="messages: users posting thousands of messages in one channel each (default: %(default)s)")
    g.add_argument("--rate", type=float, default=gm.DEFAULT_RATE, metavar="PER_SECOND",
                   help="messages: events per second of event time (default: %(default)s)")
    g.add_argument("--start-ms", type=_not_negative, metavar="MS",
                   help=f"messages: ts of the first event, ms since the Unix epoch (default: {gm.DEFAULT_START_MS}, "
                        "2026-01-01T00:00Z; --start says the same as a time)")
    g.add_argument("--signing-key", metavar="HEX", help="scores: sign every result with this key (sig field; "
                   f"default: ${SIGNING_KEY_ENV}; without either, unsigned)")
    g.add_argument("--timeouts", type=_rate, default=0.0, metavar="RATE",
                   help="playback: also write, at this rate per event, what the idle-playback sweeper writes "
                        "(docs/semantics/listeners.md 6): TIMEOUT events for playbacks idle for --idle-ms, and stale, early and "
                        "malformed ones (default: 0, none)")
    _add_log_format(g)
    g.add_argument("--idle-ms", type=_positive, default=Chaos.idle_ms, metavar="MS",
                   help="playback, with --timeouts: the sweeper's idle timeout, the idle_ms of its TIMEOUT events "
                        "(default: %(default)s)")

    r = sub.add_parser("run", help="run a flow (--flow listeners, boards or activity) and publish its snapshots to Redis",
                       epilog=run_examples())
    _add_flow_options(r, DEFAULT_DEAD_LETTER, "run")
    r.add_argument("--until-eof", action="store_true",
                   help="stop at the end of the input seen at start-up (default: keep following it)")
    r.add_argument("--processes", type=_positive, default=1, metavar="N",
                   help="start N local processes of this run, each with --workers threads (default: 1)")
    r.add_argument("--addresses", metavar="HOST:PORT,...",
                   help="a run over several machines: every process's address, in the same order everywhere")
    r.add_argument("--process-id", type=int, metavar="I", help="with --addresses: this process's index")
    r.add_argument("--run-id", metavar="ID", help="with --addresses: one value shared by every process of the run")
    r.add_argument("--peer-timeout", type=_seconds, default=DEFAULT_PEER_TIMEOUT_S, metavar="SECONDS",
                   help="with --addresses or --processes: how long the processes wait for one another at start, and "
                        "how long one that answers nothing is waited for before the run stops, with one line "
                        "(default: %(default)g)")
    r.add_argument("--metrics-port", type=_port, metavar="PORT",
                   help="serve Prometheus metrics on PORT (process i of --processes on PORT + i)")
    r.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                   help="the address the metrics listen on (default: %(default)s; 0.0.0.0 for every interface)")

    b = sub.add_parser("rebuild", help="replay the input into a new ranking beside the current one, check it, switch readers to it",
                       epilog=example(f"rankflow rebuild --input {KAFKA}/playback-events --redis {REDIS}",
                                      after="the examples of `rankflow run --help`"))
    _add_flow_options(b, DEFAULT_REBUILD_DEAD_LETTER, "rebuild")

    pr = sub.add_parser("produce", help="load a JSON Lines log into a Kafka topic, keyed by one field",
                        epilog=produce_examples())
    pr.add_argument("--key-field", default="user_id", metavar="NAME",
                    help="the message key is this string field of each line (default: %(default)s; "
                         "score logs are keyed with --key-field player_id, messages with --key-field workspace_id)")
    pr.add_argument("--input", required=True, metavar="PATH")
    pr.add_argument("--kafka", required=True, type=_kafka, metavar=KAFKA_FORM,
                    help="the topic to load (created if missing)")
    pr.add_argument("--partitions", type=_positive, default=4, metavar="N",
                    help="partitions when the topic is created (default: %(default)s)")
    pr.add_argument("--no-progress", action="store_true",
                    help="no progress bar (there is one only where standard error is a terminal)")
    kafka_settings.add_options(pr)
    _add_log_format(pr)

    sv = sub.add_parser("serve", help="the HTTP service: rankings and score boards for readers, POST /events and "
                                      "POST /matches/{id}/result ingest, the dashboard",
                        epilog=example(f"rankflow serve --port 8000 --kafka {KAFKA}/playback-events --redis {REDIS}",
                                       "curl -s 'localhost:8000/rankings?k=3'",
                                       after="the examples of `rankflow run --help`",
                                       note="The dashboard is at http://localhost:8000/."))
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=_port, default=8000)
    sv.add_argument("--kafka", type=_kafka, metavar=KAFKA_FORM,
                    help="where POST /events produces (ingest off without it)")
    sv.add_argument("--score-kafka", type=_kafka, metavar=KAFKA_FORM,
                    help="where POST /matches/{id}/result produces match results, keyed by player_id "
                         "(off without it: 503)")
    sv.add_argument("--signing-key", metavar="HEX",
                    help=f"the match servers' HMAC-SHA256 key: POST /matches/{{id}}/result refuses a result "
                         f"without a valid sig (default: ${SIGNING_KEY_ENV}; without either, sig is not checked)")
    sv.add_argument("--board-index", choices=("redis", "memory"), default="redis",
                    help="where board queries are answered: redis (one script per query; default) or memory (a copy "
                         "of every board in this process, following Redis: no request waits for a publish, but "
                         "every process holds all boards, about 300 bytes per entry)")
    sv.add_argument("--poll-ms", type=_positive, default=1000, metavar="MS",
                    help="the readers look for a newer snapshot when a flow announces one (Redis pub/sub) and at "
                         "least every MS (default: %(default)s)")
    sv.add_argument("--cache-max-age", type=_not_negative, default=DEFAULT_MAX_AGE_S, metavar="S",
                    help="the reads' Cache-Control: public, max-age=S, for a CDN or a caching reverse proxy "
                         "(0: no-cache, the validators still sent; default: %(default)s)")
    sv.add_argument("--stale-after-ms", type=_positive, default=10_000, metavar="MS",
                    help="an answer from a snapshot older than MS is marked stale (the flow stopped publishing, or "
                         "lags); the dashboard says so too (default: %(default)s)")
    sv.add_argument("--access-log", action="store_true", help="log every request (off: it costs latency)")
    sv.add_argument("--delivery-timeout-ms", type=_positive, default=5000,
                    help="how long to wait for the broker's acknowledgement before answering 503")
    sv.add_argument("--max-body-bytes", type=_positive, metavar="N",
                    help="a longer POST /events or /matches body is refused with 413 (default: 1048576, 1 MiB)")
    sv.add_argument("--ingest-token", metavar="TOKEN",
                    help=f"POST /events and /matches need 'Authorization: Bearer TOKEN' (default: "
                         f"${INGEST_TOKEN_ENV}; without either, ingest is open)")
    sv.add_argument("--header-timeout-ms", type=_positive, default=DEFAULT_HEADER_TIMEOUT_MS, metavar="MS",
                    help="a request head (request line and headers) must arrive within MS of the connection's "
                         "start or the previous answer, else 408 and the connection closes (default: %(default)s)")
    sv.add_argument("--body-timeout-ms", type=_positive, default=DEFAULT_BODY_TIMEOUT_MS, metavar="MS",
                    help="a request body must arrive within MS of its head, else 408 and the connection closes "
                         "(default: %(default)s)")
    sv.add_argument("--max-connections", type=_positive, default=DEFAULT_MAX_CONNECTIONS, metavar="N",
                    help="connections served at once (event streams too); a request on one more is answered 503 "
                         "(default: %(default)s)")
    sv.add_argument("--products", type=_products, default=tuple(products.PRODUCTS), metavar="NAME,...",
                    help=f"the products whose routes are served: {', '.join(products.PRODUCTS)} "
                         "(default: all of them)")
    _add_log_format(sv)
    _add_reader_redis(sv)
    kafka_settings.add_options(sv)

    cli_status.add_parser(sub, _add_redis)
    cli_bench.add_parsers(sub, _positive, _not_negative)  # bench, bench-sweep, bench-boards, bench-activity

    for product in products.PRODUCTS.values():  # the readers: `top`, `boards ...`, `activity ...`
        READERS.update(product.add_readers(sub, _add_reader_redis))
    _list_by_family(parser, sub)
    return parser


FAMILIES = (("run a flow", ("run", "rebuild", "status")), ("make and load logs", ("generate", "produce")),
            ("read the rankings", ()), ("serve readers over HTTP", ("serve",)),
            ("measure", ("bench", "bench-sweep", "bench-boards", "bench-activity")))
"""The commands in ``rankflow --help``, by family; the readers' family holds the products' reader
commands (``Product.add_readers``), whatever they are."""


def _list_by_family(parser: argparse.ArgumentParser, sub: Any) -> None:
    """``rankflow --help`` lists the commands by family, each with its one-line help, instead of
    argparse's one flat list (its entries are taken out of the subcommand action)."""
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    sub._choices_actions.clear()  # argparse has no public way to group subcommands
    sub.metavar, sub.help = "COMMAND", "one of the commands below; `rankflow COMMAND --help` for its options"
    placed = {name for _, names in FAMILIES for name in names}
    width = max(map(len, helps)) + 2
    lines = []
    for family, names in FAMILIES:
        names = names or tuple(n for n in helps if n not in placed)
        lines += [f"{family}:"] + [f"  {n:<{width}}{helps[n]}" for n in names] + [""]
    parser.epilog = "\n".join(lines).rstrip()


def _utc_ms(text: str) -> int:
    """An ISO 8601 time as ms since the epoch; one without an offset is UTC."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 time such as 2026-12-30T20:00Z, got {text!r}") from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return int(at.timestamp() * 1000)


def _start_ms(text: str) -> int:
    """``generate --start``: an ISO 8601 time (:func:`_utc_ms`) or ``now``."""
    if text == "now":
        return int(time.time() * 1000)
    try:
        return _utc_ms(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected now or an ISO 8601 time such as 2026-12-30T20:00Z, "
                                         f"got {text!r}") from None


def cmd_generate(args: argparse.Namespace) -> int:
    check_output_file(args.out, "--out")
    started = time.perf_counter()
    if args.kind == "scores":
        return _generate_scores(args, started)
    if args.kind == "messages":
        return _generate_messages(args, started)
    if args.users is None or args.songs is None:
        raise UsageError("generate --kind playback needs --users and --songs")
    chaos = Chaos(timeout=args.timeouts, idle_ms=args.idle_ms)
    with counting("generating", args.events) as progress:
        stats = generate(args.users, args.songs, args.events, args.seed, args.out, chaos=chaos, progress=progress,
                         start_ms=T0_MS if args.start is None else args.start)
    took = time.perf_counter() - started
    say(f"wrote {stats.lines} events to {args.out} in {took:.1f}s", events=stats.lines, seconds=round(took, 3))
    return 0


def _generate_scores(args: argparse.Namespace, started: float) -> int:
    if args.days <= 0 or args.chaos < 0:
        raise UsageError("--days must be positive and --chaos not negative")
    key = signing_key(args.signing_key, os.environ)  # as run and serve: the variable is the default
    with counting("generating", args.events, "results") as progress:
        start_ms = DEFAULT_START_MS if args.start is None else args.start
        stats = generate_scores(args.players, args.games, args.events, args.seed, args.out, start_ms=start_ms,
                                days=args.days, key=key, chaos=ScoreChaos().scaled(args.chaos), clean=args.clean,
                                progress=progress)
    took = time.perf_counter() - started
    summary = (f"wrote {stats.lines} score results to {args.out} in {took:.1f}s"
               + (" (clean)" if args.clean else "") + (", signed" if key else ", unsigned"))
    _by_kind(summary, stats.lines, took, stats.by_kind, [])
    return 0


def _by_kind(summary: str, lines: int, took: float, by_kind: Mapping[str, int], notes: list[str]) -> None:
    """``generate``'s summary line and its table of lines by kind; with ``--log-format json``
    one object holding the table (``by_kind``)."""
    if log_setup.is_json():
        say(summary, events=lines, seconds=round(took, 3), by_kind=dict(by_kind), notes=notes)
        return
    say(summary)
    for kind, n in sorted(by_kind.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {kind:<28} {n:>10,}", file=sys.stderr)
    for note in notes:
        print(f"  {note}", file=sys.stderr)


def _generate_messages(args: argparse.Namespace, started: float) -> int:
    if not args.rate > 0 or args.chaos < 0:
        raise UsageError("--rate must be positive and --chaos not negative")
    if args.start is not None and args.start_ms is not None:
        raise UsageError("--start and --start-ms say the same thing: give one")
    start_ms = args.start if args.start is not None else args.start_ms
    if start_ms is None:
        start_ms = gm.DEFAULT_START_MS
    with counting("generating", args.events) as progress:
        stats = gm.generate_messages(args.events, args.seed, args.out, workspaces=args.workspaces,
                                     channels=args.channels, users=args.users or gm.DEFAULT_USERS, bots=args.bots,
                                     start_ms=start_ms, rate=args.rate,
                                     chaos=gm.MessageChaos().scaled(args.chaos), clean=args.clean, progress=progress)
    took = time.perf_counter() - started
    notes = [f"{'(valid, out of order)':<28} {stats.out_of_order:>10,}"]
    notes += [f"bot {bot!r} posts in {ws!r} / {ch!r}" for ws, ch, bot in stats.bot_channels]
    _by_kind(f"wrote {stats.lines} message events to {args.out} in {took:.1f}s" + (" (clean)" if args.clean else ""),
             stats.lines, took, stats.by_kind, notes)
    return 0


def _run_options(args: argparse.Namespace) -> RunOptions:
    """The options of ``run`` or ``rebuild``: an option of another flow than ``--flow``'s is refused
    (ignored, it would silently not do what its user meant)."""
    given = vars(args)
    products.refuse_foreign(args.flow, [dest for dest in products.owners() if dest in given])
    own = products.product_values(args.flow, given)
    addresses = getattr(args, "addresses", None)
    return RunOptions(
        processes=getattr(args, "processes", 1), process_id=getattr(args, "process_id", None),
        addresses=addresses.split(",") if addresses else None, run_id=getattr(args, "run_id", None),
        peer_timeout_s=getattr(args, "peer_timeout", DEFAULT_PEER_TIMEOUT_S),
        metrics_port=getattr(args, "metrics_port", None), metrics_host=getattr(args, "metrics_host", "127.0.0.1"),
        input=args.input, until_eof=getattr(args, "until_eof", True), redis_url=args.redis,
        namespace=args.namespace, dead_letter=args.dead_letter, song_partitions=args.song_partitions,
        k_max=args.k_max, workers=args.workers, barrier_ms=args.barrier_ms, recovery_dir=args.recovery_dir,
        max_line_bytes=args.max_line_bytes, read_batch=args.read_batch, flow=args.flow, idle_timeout_s=args.idle_timeout,
        redis_retry_s=args.redis_retry_s, kafka_settings=kafka_settings.from_args(args, os.environ),
        log_every_s=args.log_every, log_format=args.log_format,
        **{k: v for k, v in own.items() if k in RunOptions.__dataclass_fields__},
        extra={k: v for k, v in own.items() if k not in RunOptions.__dataclass_fields__},
    )


def _summary(opts: RunOptions, final: dict[str, Any], took: float) -> str:
    """The last line of ``run`` and ``rebuild``, in the readers' format (docs/cli.md)."""
    return (f"{took:.2f}s, snapshot {final['snapshot_id']}: {opts.product.counts(final)}"
            f"{quantity(final['dead_letters'])} dead letters (invalid events, each with its reason) in "
            f"{opts.dead_letter}; input through "
            f"{positions(final['positions'])}")


def _summary_fields(final: dict[str, Any], took: float) -> dict[str, Any]:
    """The summary line's fields in JSON logs."""
    return {"seconds": round(took, 3), "snapshot_id": final["snapshot_id"], "dead_letters": final["dead_letters"],
            "positions": final["positions"], "position": sum(final["positions"].values())}


def cmd_run(args: argparse.Namespace) -> int:
    opts = _run_options(args)
    started = time.perf_counter()
    final = run(opts)
    stopped = stop_signal()
    if final is not None:
        say(f"{'stopped' if stopped else 'done'} in {_summary(opts, final, time.perf_counter() - started)}",
            **_summary_fields(final, time.perf_counter() - started))
    if stopped is not None:
        say("rankflow: interrupted; everything read so far is published", "WARNING")
        return 128 + stopped
    return 0


def cmd_rebuild(args: argparse.Namespace) -> int:
    opts = _run_options(args)
    started = time.perf_counter()
    final = rebuild(opts)
    say(f"rebuilt and switched in {_summary(opts, final, time.perf_counter() - started)}",
        **_summary_fields(final, time.perf_counter() - started))
    return 0


def cmd_produce(args: argparse.Namespace) -> int:
    endpoint = replace(args.kafka, settings=kafka_settings.from_args(args, os.environ))
    check_input_file(args.input, "--input")
    started = time.perf_counter()
    if not args.key_field:
        raise UsageError("--key-field must name a field")
    result = produce_file(args.input, endpoint, args.partitions, progress=not args.no_progress,
                          key_field=args.key_field)
    took = time.perf_counter() - started
    say(f"produced {result.messages} messages to {endpoint} ({result.partitions} partitions) in {took:.1f}s, "
        f"{result.messages / max(took, 1e-9):,.0f}/s, all acknowledged", messages=result.messages,
        partitions=result.partitions, seconds=round(took, 3))
    if result.unkeyed:
        say(f"rankflow: {result.unkeyed:,} of {result.messages:,} lines have no \"{args.key_field}\" field (a string): they "
            "were sent without a key, so Kafka spreads them over the partitions and keeps no order among them "
            "(expected for invalid events: the flow dead-letters them); if your events are keyed by another "
            "field, name it with --key-field FIELD", "WARNING", unkeyed=result.unkeyed)
    return 0


def ingest_token(option: str | None, environ: Mapping[str, str]) -> str | None:
    """``--ingest-token``, else ``$RANKFLOW_INGEST_TOKEN`` (which keeps the secret out of
    the process list): the option is the more specific choice, so it wins. An empty
    token is refused rather than taken to mean an open ingest."""
    token = option if option is not None else environ.get(INGEST_TOKEN_ENV)
    if token is not None and not token.strip():
        raise UsageError(f"the ingest token (--ingest-token or ${INGEST_TOKEN_ENV}) is empty")
    return token


def cmd_serve(args: argparse.Namespace) -> int:
    # the user's mistakes first, then Redis, then the service's (heavier) imports
    client_settings = kafka_settings.from_args(args, os.environ)  # the producers of POST /events and /matches
    key, token = signing_key(args.signing_key, os.environ), ingest_token(args.ingest_token, os.environ)
    problem = cannot_listen(args.host, args.port)
    if problem is not None:  # else uvicorn logs a traceback-sized error, or listens on another port
        raise UsageError(f"--host/--port: {problem}")
    try:  # an address that is not Redis: one line within about 2 s, as a run says it, not a service of 503s
        first_contact(args.redis)
    except NotRedis:
        raise
    except redis.RedisError as exc:  # not up yet: the service starts and answers 503 until it is
        say(f"cannot reach Redis at {address(args.redis)} now ({exc}): the routes answer 503 until it answers",
            "WARNING")

    import uvicorn

    from rankflow.api.app import Settings, create_app
    from rankflow.api.ingest import DEFAULT_MAX_BODY_BYTES
    from rankflow.api.server import server_config

    settings = Settings(redis_url=args.redis, read_urls=tuple(args.redis_read), namespace=args.namespace,
                        kafka=replace(args.kafka, settings=client_settings) if args.kafka else None,
                        score_kafka=replace(args.score_kafka, settings=client_settings) if args.score_kafka else None,
                        signing_key=key, delivery_timeout_ms=args.delivery_timeout_ms,
                        max_body_bytes=args.max_body_bytes or DEFAULT_MAX_BODY_BYTES,
                        ingest_token=token, board_index=args.board_index,
                        body_timeout_ms=args.body_timeout_ms, products=args.products, poll_ms=args.poll_ms,
                        cache_max_age_s=args.cache_max_age,
                        stale_after_ms=args.stale_after_ms)
    tune_gc()  # long-lived caches, many small short-lived objects per request: as in the flow
    app = create_app(settings)

    class Server(uvicorn.Server):
        """Tells the app at Ctrl-C, so open event streams (the dashboard) end at once
        instead of keeping the shutdown waiting for every browser to go away."""

        stopped_by: int | None = None

        def handle_exit(self, sig: int, frame: Any) -> None:
            self.stopped_by = self.stopped_by or sig
            app.state.stopping.set()
            super().handle_exit(sig, frame)

    server = Server(server_config(app, args.host, args.port, args.header_timeout_ms, args.max_connections,
                                  log_level="info", access_log=args.access_log, timeout_graceful_shutdown=5,
                                  **({"log_config": None} if log_setup.is_json() else {})))
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # what uvicorn raises again at the end
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn raises the signal it stopped for again, once it has shut down ...
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    if server.stopped_by is None:
        return 0
    # ... but whether that reaches us depends on the handler it restores (asyncio's, or an ignored
    # SIGINT inherited from the parent): the status comes from the signal itself, 130 for Ctrl-C.
    say("rankflow: interrupted", "WARNING")
    return 128 + server.stopped_by


READERS: dict[str, products.Command] = {}
"""The products' reader commands (``Product.add_readers``), filled when the parser is built."""
COMMANDS = {"generate": cmd_generate, "run": cmd_run, "rebuild": cmd_rebuild, "produce": cmd_produce,
            "serve": cmd_serve, "status": cli_status.cmd_status, **cli_bench.COMMANDS}


def main(argv: list[str] | None = None) -> int:
    cli_errors.set_json(cli_errors.wants_json(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    log_setup.configure(getattr(args, "log_format", "text"))
    cli_errors.set_json(bool(getattr(args, "json", False)))
    try:
        if getattr(args, "redis", None) is not None:
            check_redis_url(args.redis)
        if hasattr(args, "redis_read"):  # a reader: its read URLs, from the option or the environment
            args.redis_read = read_urls(args.redis_read)
            for url in args.redis_read:
                check_redis_url(url, "--redis-read")
        return {**COMMANDS, **READERS}[args.command](args)
    except UsageError as exc:
        return cli_errors.refuse(str(exc), 2)
    except RebuildFailed as exc:
        return cli_errors.refuse(f"{exc}; readers stay on the old ranking", 1 if exc.signal is None else 128 + exc.signal)
    except (ServiceError, FencedError, GenerationSwitched, RunAlreadyPublished, KafkaUnavailable,
            RedisBoardsLayout) as exc:
        return cli_errors.refuse(str(exc), 1)
    except NotRedis as exc:  # says where and what, without the URL's password
        return cli_errors.refuse(str(exc), 1)
    except redis.RedisError as exc:
        return cli_errors.refuse(f"cannot reach Redis at {redacted(getattr(args, 'redis', '?'))}: {exc}", 1)
    except KeyboardInterrupt:
        say("rankflow: interrupted", "WARNING")
        return 130


if __name__ == "__main__":
    sys.exit(main())
