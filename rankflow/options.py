"""What a run of the listener flow is told: its options, their defaults and checks.

One place for every knob of ``rankflow run`` and ``rankflow rebuild``, so the
command line, the tests and the benchmarks build runs the same way. The errors
here are the two kinds the command line turns into exit statuses: bad usage (2)
and a service the run needs that is unreachable or refused it (1).
"""

from __future__ import annotations

import os
import stat
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis

from rankflow import products
from rankflow.cluster_watch import DEFAULT_PEER_TIMEOUT_S
from rankflow.connectors.activity_staging import STAGE_BUDGET
from rankflow.connectors.jsonl import CHUNK_BYTES, MAX_LINE_BYTES
from rankflow.connectors.kafka import BATCH_MESSAGES
from rankflow.connectors.redis_keys import DEFAULT_NAMESPACE, DEFAULT_REDIS_URL, Keys
from rankflow.errors import ServiceError, UsageError
from rankflow.kafka_settings import NO_SETTINGS, KafkaSettings
from rankflow.products.boards import BOARDS_K_MAX, SIGNING_KEY_ENV

DEFAULT_DEAD_LETTER = "jsonl:dead-letters.jsonl"
DEFAULT_REBUILD_DEAD_LETTER = "jsonl:rebuild-dead-letters.jsonl"
"""A rebuild writes its own file: it starts its dead letters over, and must not
truncate the ones a live run is appending to."""
DEFAULT_USER_SHARDS = 16
FLOWS = tuple(products.PRODUCTS)
DEFAULT_K_MAX = 100
DEFAULT_BARRIER_MS = 250
"""The barrier interval of a run in one process (``--barrier-ms`` unset): four snapshots a second."""
SEVERAL_PROCESSES_BARRIER_MS = 1000
"""The barrier interval of a run over several processes (``--processes``, ``--addresses``) when
``--barrier-ms`` is unset. At every barrier each process but the slowest waits for the others, and
Bytewax 0.21's worker steps without sleeping while it waits (docs/operations.md, "Keying the
per-entity stage"): fewer barriers, fewer waits. Measured on the boards flow with two processes
on their own cores: x2.1-2.6 one process's CPU per event at 250 ms, x1.2-1.3 at 1000 ms
(docs/benchmarks.md)."""
DEFAULT_RECENT_MINUTES = 5  # docs/semantics/windows.md 7
__all__ = ["BOARDS_K_MAX", "SIGNING_KEY_ENV", "ServiceError", "UsageError"]  # where they were before the products


def default_redis_url() -> str:
    return os.environ.get("RANKFLOW_REDIS_URL", DEFAULT_REDIS_URL)


def redacted(url: str) -> str:
    """``url`` without its password, for messages and logs.

    >>> redacted("redis://user:secret@cache:6379/0")
    'redis://user:***@cache:6379/0'
    >>> redacted("redis://127.0.0.1:6379/0")
    'redis://127.0.0.1:6379/0'
    """
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def check_redis_url(url: str, option: str = "--redis") -> None:
    """A URL redis-py can connect with (scheme, port, query options such as ``socket_timeout``):
    checked before anything connects, where redis-py would raise a bare ValueError."""
    try:
        redis.ConnectionPool.from_url(url)
    except ValueError as exc:
        raise UsageError(f"{option} {redacted(url)}: {exc}") from None


def check_port(port: int, option: str) -> None:
    if not 1 <= port <= 65535:
        raise UsageError(f"{option} must be 1 to 65535, got {port}")


def check_input_file(path: str, option: str) -> None:
    """``path`` is a regular file this process can read: checked before a command claims
    anything or opens its outputs, so a mistake is one line, not a stopped flow."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise UsageError(f"input file not found: {path}") from None
    except OSError as exc:
        raise UsageError(f"{option}: cannot read {path}: {exc.strerror}") from None
    _refuse_directory(mode, path, option)
    if not stat.S_ISREG(mode):
        raise UsageError(f"{option}: {path} is not a regular file")
    _try_open(path, "rb", option, "read")


def check_output_file(path: str, option: str) -> None:
    """``path`` can be written: an existing file this process may write (nothing is changed
    here), or a new one under a directory it may create files in (the writers make the
    missing directories)."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        _check_creatable(path, option)
        return
    except OSError as exc:
        raise UsageError(f"{option}: cannot write {path}: {exc.strerror}") from None
    _refuse_directory(mode, path, option)
    if stat.S_ISREG(mode):
        _try_open(path, "ab", option, "write")  # appending nothing changes nothing
    elif not os.access(path, os.W_OK):  # /dev/null, say: opening a FIFO here would wait for a reader
        raise UsageError(f"{option}: cannot write {path}: Permission denied")


def _refuse_directory(mode: int, path: str, option: str) -> None:
    if stat.S_ISDIR(mode):
        raise UsageError(f"{option}: {path} is a directory, not a file")


def _try_open(path: str, how: str, option: str, verb: str) -> None:
    try:
        with open(path, how):
            pass
    except OSError as exc:
        raise UsageError(f"{option}: cannot {verb} {path}: {exc.strerror}") from None


def _check_creatable(path: str, option: str) -> None:
    """The nearest existing ancestor of ``path`` is a directory this process may create files in."""
    parent = Path(os.path.abspath(path)).parent
    try:
        while not parent.exists():
            parent = parent.parent
    except OSError as exc:
        raise UsageError(f"{option}: cannot create {path}: {exc.strerror}") from None
    if not parent.is_dir():
        raise UsageError(f"{option}: cannot create {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{option}: cannot create {path} in {parent}: Permission denied")


@dataclass
class RunOptions:
    input: str
    flow: str = products.DEFAULT  # a product's name (``rankflow.products``): listeners, boards or activity
    signing_key: bytes | None = None  # boards: results must carry a valid HMAC-SHA256 ``sig``
    until_eof: bool = False
    redis_url: str = DEFAULT_REDIS_URL
    namespace: str = DEFAULT_NAMESPACE
    dead_letter: str = DEFAULT_DEAD_LETTER
    song_partitions: int = 16
    k_max: int | None = None  # None: the flow's default (``top_k``)
    workers: int = 1
    barrier_ms: int | None = None  # None: by the number of processes (``barrier``)
    read_chunk_bytes: int = CHUNK_BYTES  # how much a JSONL partition reads per batch
    read_batch: int | None = None  # the most messages a Kafka partition reads at once; None: the product's
    max_line_bytes: int = MAX_LINE_BYTES  # a longer JSONL line is dead-lettered (invalid_json), not read
    recovery_dir: str | None = None
    redis_retry_s: float = 300.0  # how long a snapshot waits for Redis before the run stops (RedisUnavailable)
    user_shards: int = DEFAULT_USER_SHARDS  # 0: one Bytewax key per user
    shard_by: str = "partition"  # listeners: the user shards' key, by input partition or by user (crc32)
    hot_threshold: float = 20_000.0  # changes/s of one song (per process) that split it; 0 never splits
    hot_salts: int = 4  # partial counters of a split song
    hot_window_s: float = 1.0  # how often the hot-song set is updated
    split_songs: list[str] = field(default_factory=list)  # songs split at their first change, whatever their rate
    processes: int = 1  # local processes to start (each with `workers` threads)
    addresses: list[str] | None = None  # host:port of every process of a multi-machine run
    process_id: int | None = None  # this process's index in `addresses`
    run_id: str | None = None  # shared by the processes of one run (see join_run)
    peer_timeout_s: float = DEFAULT_PEER_TIMEOUT_S  # the processes of a run wait this long for one another
    metrics_port: int | None = None  # serve Prometheus metrics here (+ process index)
    metrics_host: str = "127.0.0.1"  # the address the metrics listen on
    bucket_seconds: int = 60  # activity: the width of a bucket (docs/semantics/windows.md 2)
    window_buckets: int = 60  # activity: buckets in the window
    count: str = "messages"  # activity: messages, or distinct users per channel
    global_summary: int = 0  # activity: N > 0 ranks globally from Misra-Gries summaries of N counters
    publish_stage: int | None = None  # activity: a snapshot changing more channels is staged in calls this big;
    # None: STAGE_BUDGET in a live run, 0 with --until-eof (see stage_at)
    idle_timeout_s: float = 5.0  # live runs: a partition quiet this long stops holding the watermark (activity,
    # and the listener flow's recent plays)
    recent_minutes: int = DEFAULT_RECENT_MINUTES  # listeners: songs by accepted starts in the last N minutes; 0: off
    idle_timeout_ms: int = 0  # listeners, live Kafka runs: the sweeper's T (docs/semantics/listeners.md 6); 0: no sweeper
    kafka_settings: KafkaSettings = NO_SETTINGS  # --kafka-config and -X: every Kafka client of the run gets them
    log_every_s: float = 30.0  # a live run's position line every this many seconds (rankflow.run_log); 0: none
    log_format: str = "text"  # text, or one JSON object a line (rankflow.log_setup)
    extra: dict[str, Any] = field(default_factory=dict)  # options of a product that have no field here, by dest

    @property
    def top_k(self) -> int:
        """K_max: the songs a listener snapshot ranks and the activity flow's largest K (100 unless
        ``--k-max``, docs/semantics/windows.md 4), or the entries
        of each changed board a boards snapshot lists (10: the live top 10; the whole boards
        are in Redis, and a longer list costs every partition and the merger at every barrier)."""
        if self.k_max is not None:
            return self.k_max
        return self.product.k_max

    @property
    def kafka_batch(self) -> int:
        """``--read-batch``, else the product's default, else the Kafka connector's."""
        if self.read_batch is not None:
            return self.read_batch
        return self.product.read_batch or BATCH_MESSAGES

    @property
    def stage_at(self) -> int:
        """``--publish-stage``, or its default: staging keeps a live run's readers from waiting
        for a large snapshot, at several times Redis's work, so a bounded replay
        (``--until-eof``), which only catches up, stores every snapshot in one script."""
        if self.publish_stage is not None:
            return self.publish_stage
        return 0 if self.until_eof else STAGE_BUDGET

    @property
    def redis_namespace(self) -> str:
        """Where this flow publishes: the boards and activity flows beside the listener flow, never in its keys."""
        return self.product.namespace(self.namespace)

    @property
    def product(self) -> products.Product:
        """The product ``flow`` names (``rankflow.products``)."""
        return products.get(self.flow)

    def option(self, dest: str) -> Any:
        """The value of the product option ``dest``: its field, or what ``extra`` holds (else its default)."""
        if dest in RunOptions.__dataclass_fields__:
            return getattr(self, dest)
        return self.extra.get(dest, next(o.default for o in self.product.options if o.dest == dest))

    @property
    def barrier(self) -> int:
        """The barrier interval in milliseconds: ``--barrier-ms``, else :data:`DEFAULT_BARRIER_MS` with
        one process and :data:`SEVERAL_PROCESSES_BARRIER_MS` with several."""
        if self.barrier_ms is not None:
            return self.barrier_ms
        several = len(self.addresses) > 1 if self.addresses else self.processes > 1
        return SEVERAL_PROCESSES_BARRIER_MS if several else DEFAULT_BARRIER_MS

    @property
    def worker_count(self) -> int:
        """Bytewax workers in all processes of the run (a key's worker is its hash modulo this)."""
        return self.workers * (len(self.addresses) if self.addresses else self.processes)

    def check(self) -> None:
        """Refuse options a run cannot start with: the shared ones here, the flow's own by its
        product, and any option of another flow set (it would be silently ignored)."""
        product = products.get(self.flow)
        products.refuse_foreign(self.flow, changed_fields(self))
        if self.user_shards < 0:
            raise UsageError("--user-shards must be >= 0")
        for name, flag in (("song_partitions", "song-partitions"), ("top_k", "k-max"), ("workers", "workers"),
                           ("barrier", "barrier-ms"), ("read_chunk_bytes", "read-chunk-bytes"), ("kafka_batch", "read-batch"),
                           ("max_line_bytes", "max-line-bytes")):
            if getattr(self, name) < 1:
                raise UsageError(f"--{flag} must be >= 1")
        if self.idle_timeout_s <= 0:
            raise UsageError("--idle-timeout must be > 0 seconds")
        if not 0 < self.peer_timeout_s < float("inf"):
            raise UsageError("--peer-timeout must be more than 0 seconds")
        if not 0 < self.redis_retry_s < float("inf"):
            raise UsageError("--redis-retry-s must be more than 0 seconds")
        product.check(self)
        if self.processes < 1:
            raise UsageError("--processes must be >= 1")
        if self.metrics_port is not None:
            check_port(self.metrics_port, "--metrics-port")
            check_port(self.metrics_port + self.processes - 1, "--metrics-port + --processes - 1")
        if self.addresses is not None:
            if self.processes > 1:
                raise UsageError("--processes starts local processes; with --addresses start each one yourself")
            if self.process_id is None or not 0 <= self.process_id < len(self.addresses):
                raise UsageError("--addresses needs --process-id between 0 and the number of addresses - 1")
            if self.run_id is None:
                raise UsageError("--addresses needs --run-id: the same value for every process of the run")
            for address in self.addresses:
                host, _, port = address.rpartition(":")
                if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                    raise UsageError(f"--addresses: {address!r} is not HOST:PORT with a port in 1..65535")
        try:
            Keys(self.namespace)
        except ValueError as exc:
            raise UsageError(str(exc)) from None


def changed_fields(opts: RunOptions) -> list[str]:
    """The fields of ``opts`` that differ from their defaults: what a caller set."""
    changed = []
    for f in fields(opts):
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        if default is not MISSING and getattr(opts, f.name) != default and f.name != "extra":
            changed.append(f.name)
    return changed + list(opts.extra)
