"""Running the listener flow: options, endpoints, recovery, and rebuilds.

``--input`` and ``--dead-letter`` take endpoint URIs, ``kind:rest``:

* ``jsonl:PATH`` a JSON Lines file (input: one source partition per file);
* ``kafka:HOST:PORT/TOPIC`` a Kafka topic (input: one source partition per Kafka
  partition).

Every run first takes a run token from Redis (``INCR {ns}:runs``) and claims the
current generation with it. Snapshot ids are built from the token, and the publish
script refuses any run that is no longer the generation's owner, so two runs can
never interleave their rankings.

With ``--recovery-dir`` Bytewax stores, at every barrier, the user records, the song
counts, the merger's pending state and the input positions together; a restarted run
resumes from the last complete barrier and republishes from there. Redis refuses
anything behind what it already has, so readers never see counts go back in time.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import multiprocessing.process
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from pathlib import Path

import orjson
import redis

from bytewax.dataflow import Dataflow
from bytewax.inputs import Source
from bytewax.outputs import Sink
from bytewax.recovery import RecoveryConfig, init_db_dir
from bytewax.testing import cluster_main, run_main

from rankflow.connectors.jsonl import CHUNK_BYTES, JsonlDeadLetterSink, JsonlSource
from rankflow.connectors.kafka import KafkaDeadLetterSink, KafkaEndpoint, KafkaSource, KafkaUnavailable
from rankflow.connectors.source_batch import STOP
from rankflow.connectors.redis_generations import (
    FencedError,
    GenerationSwitched,
    claim_generation,
    current_generation,
    drop_generation,
    join_run,
    new_run_token,
    switch_generation,
)
from rankflow.connectors.redis_keys import DEFAULT_NAMESPACE, DEFAULT_REDIS_URL, Keys, connect
from rankflow.connectors.redis_publish import RedisSnapshotSink, is_transient
from rankflow.connectors.redis_read import read_generation, read_latest
from rankflow.flows.listeners import build_flow
from rankflow.operators.metrics import METRICS
from rankflow.operators.routing import HOT_SONGS
from rankflow.services import free_port

log = logging.getLogger("rankflow.run")

DEFAULT_DEAD_LETTER = "jsonl:dead-letters.jsonl"
RECOVERY_PARTITIONS = 2
LAYOUT_FILE = "rankflow-layout.json"
DEFAULT_USER_SHARDS = 64


class UsageError(ValueError):
    """Bad options: the CLI prints the message and exits with status 2."""


class ServiceError(RuntimeError):
    """A service the run needs (Redis, a broker) is unreachable or refused it."""


def default_redis_url() -> str:
    return os.environ.get("RANKFLOW_REDIS_URL", DEFAULT_REDIS_URL)


@dataclass
class RunOptions:
    input: str
    until_eof: bool = False
    redis_url: str = DEFAULT_REDIS_URL
    namespace: str = DEFAULT_NAMESPACE
    dead_letter: str = DEFAULT_DEAD_LETTER
    song_partitions: int = 16
    k_max: int = 100
    workers: int = 1
    barrier_ms: int = 250
    read_chunk_bytes: int = CHUNK_BYTES  # how much a JSONL partition reads per batch
    recovery_dir: str | None = None
    user_shards: int | None = None  # None: DEFAULT_USER_SHARDS, or 0 (a key per user) with recovery
    hot_threshold: float = 20_000.0  # changes/s of one song (per process) that split it; 0 never splits
    hot_salts: int = 4  # partial counters of a split song
    hot_window_s: float = 1.0  # how often the hot-song set is updated
    processes: int = 1  # local processes to start (each with `workers` threads)
    addresses: list[str] | None = None  # host:port of every process of a multi-machine run
    process_id: int | None = None  # this process's index in `addresses`
    run_id: str | None = None  # shared by the processes of one run (see join_run)
    metrics_port: int | None = None  # serve Prometheus metrics here (+ process index)

    @property
    def shards(self) -> int:
        """User shards of the user stage (0: one key per user); see ``operators.user_stage``."""
        if self.user_shards is not None:
            return self.user_shards
        return 0 if self.recovery_dir is not None else DEFAULT_USER_SHARDS

    def check(self) -> None:
        if self.user_shards is not None and self.user_shards < 0:
            raise UsageError("--user-shards must be >= 0")
        for name in ("song_partitions", "k_max", "workers", "barrier_ms", "read_chunk_bytes", "hot_salts"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be >= 1")
        if self.hot_threshold < 0:
            raise UsageError("--hot-threshold must be >= 0")
        if self.processes < 1:
            raise UsageError("--processes must be >= 1")
        if self.addresses is not None:
            if self.processes > 1:
                raise UsageError("--processes starts local processes; with --addresses start each one yourself")
            if self.process_id is None or not 0 <= self.process_id < len(self.addresses):
                raise UsageError("--addresses needs --process-id between 0 and the number of addresses - 1")
            if self.run_id is None:
                raise UsageError("--addresses needs --run-id: the same value for every process of the run")
        try:
            Keys(self.namespace)
        except ValueError as exc:
            raise UsageError(str(exc)) from None


def split_endpoint(uri: str, option: str) -> tuple[str, str]:
    kind, sep, rest = uri.partition(":")
    if not sep or not rest:
        raise UsageError(f"{option} must look like KIND:TARGET (e.g. jsonl:events.jsonl), got {uri!r}")
    return kind, rest


def make_source(uri: str, follow: bool, chunk_bytes: int = CHUNK_BYTES) -> Source:
    kind, target = split_endpoint(uri, "--input")
    try:
        if kind == "jsonl":
            return JsonlSource([target], follow=follow, chunk_bytes=chunk_bytes)
        if kind == "kafka":
            return KafkaSource(KafkaEndpoint.parse(target), until_eof=not follow)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:
        raise UsageError(f"--input: {exc}") from None
    except KafkaUnavailable as exc:
        raise ServiceError(str(exc)) from None
    raise UsageError(f"unknown input kind {kind!r}: use jsonl:PATH or kafka:HOST:PORT/TOPIC")


def make_dead_letter_sink(uri: str) -> Sink:
    kind, target = split_endpoint(uri, "--dead-letter")
    try:
        if kind == "jsonl":
            return JsonlDeadLetterSink(target)
        if kind == "kafka":
            return KafkaDeadLetterSink(KafkaEndpoint.parse(target))
    except ValueError as exc:
        raise UsageError(f"--dead-letter: {exc}") from None
    except KafkaUnavailable as exc:
        raise ServiceError(str(exc)) from None
    raise UsageError(f"unknown dead-letter kind {kind!r}: use jsonl:PATH or kafka:HOST:PORT/TOPIC")


def resumes_from_recovery(recovery_dir: str | None) -> bool:
    """Whether a run will start from stored state (else it starts its input over)."""
    return recovery_dir is not None and any(Path(recovery_dir).glob("part-*.sqlite3"))


def recovery_config(opts: RunOptions) -> RecoveryConfig | None:
    """Bytewax recovery in ``opts.recovery_dir``, creating its partitions the first time.

    State is stored under the keys of the flow's layout (song partitions, user
    shards), so a resume with another layout would look for it under other keys
    and count wrong. The layout is written next to the partitions and a resume
    with a different one is refused.
    """
    if opts.recovery_dir is None:
        return None
    path = Path(opts.recovery_dir)
    path.mkdir(parents=True, exist_ok=True)
    layout = {"song_partitions": opts.song_partitions, "user_shards": opts.shards}
    layout_file = path / LAYOUT_FILE
    if not any(path.glob("part-*.sqlite3")):
        init_db_dir(path, RECOVERY_PARTITIONS)
    elif layout_file.exists():
        stored = orjson.loads(layout_file.read_bytes())
        if stored != layout:
            wanted = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in stored.items())
            raise UsageError(f"{path} holds state of a run with {wanted}: resume with the same options, "
                             "or start over in an empty --recovery-dir")
    layout_file.write_bytes(orjson.dumps(layout))
    return RecoveryConfig(str(path))


def tune_gc() -> None:
    """Make the cyclic garbage collector run rarely.

    The flow keeps millions of long-lived objects (user records, index entries) and
    allocates a few short-lived tuples per event; with the default thresholds the
    collector rescans the long-lived ones constantly (16% of a 1M-event run in
    py-spy). Nothing in the flow builds reference cycles, so rarer collections cost
    no memory; measured: 1M events in 13.5 s with the defaults, 10 s with these.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


def _redis(url: str) -> redis.Redis:
    client = connect(url)
    try:
        client.ping()
    except redis.RedisError as exc:
        client.close()
        raise ServiceError(f"cannot reach Redis at {url}: {exc}") from None
    return client


def _flow(opts: RunOptions, token: int, generation: int, live: bool, source: Source) -> Dataflow:
    HOT_SONGS.configure(opts.hot_threshold, opts.hot_salts, opts.hot_window_s)
    return build_flow(
        source,
        make_dead_letter_sink(opts.dead_letter),
        RedisSnapshotSink(opts.redis_url, opts.namespace, token, generation, live),
        song_partitions=opts.song_partitions,
        k_max=opts.k_max,
        user_shards=opts.shards,
        run_token=token,
        recoverable=opts.recovery_dir is not None,
    )


def _stop_gracefully(signum: int, frame: Any) -> None:
    """SIGINT handler of a running flow: the first Ctrl-C ends the sources.

    The flow then finishes as at the end of its input: the last barrier closes, its
    snapshot is published, dead letters are flushed, recovery state is written. A
    second Ctrl-C aborts at once.
    """
    if STOP.is_set():
        raise KeyboardInterrupt
    log.warning("stopping at the next barrier (Ctrl-C again to abort)")
    STOP.set()


def _execute(flow: Dataflow, opts: RunOptions) -> None:
    interval = timedelta(milliseconds=opts.barrier_ms)
    recovery = recovery_config(opts)
    STOP.clear()  # a Ctrl-C of an earlier run in this process must not end this one
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, _stop_gracefully) if in_main_thread else None
    try:
        if opts.addresses is not None:
            cluster_main(flow, opts.addresses, opts.process_id, epoch_interval=interval,
                         recovery_config=recovery, worker_count_per_proc=opts.workers)
        elif opts.workers == 1:
            run_main(flow, epoch_interval=interval, recovery_config=recovery)
        else:
            cluster_main(flow, [], 0, epoch_interval=interval, recovery_config=recovery,
                         worker_count_per_proc=opts.workers)
    except Exception as exc:
        raise _explain(exc) from exc
    finally:
        if in_main_thread:
            signal.signal(signal.SIGINT, previous)


def run(opts: RunOptions) -> dict[str, Any] | None:
    """Run the flow live; with ``until_eof`` return the final published snapshot."""
    opts.check()
    if opts.processes > 1:
        return _run_local_processes(opts)
    tune_gc()
    if opts.metrics_port is not None:
        METRICS.serve(opts.metrics_port + (opts.process_id or 0))
    source = make_source(opts.input, follow=not opts.until_eof, chunk_bytes=opts.read_chunk_bytes)
    client = _redis(opts.redis_url)
    try:
        token, generation = join_run(client, opts.namespace, opts.run_id or uuid.uuid4().hex,
                                     fresh=not resumes_from_recovery(opts.recovery_dir))
        flow = _flow(opts, token, generation, live=True, source=source)
        log.info("run %s owns generation %s of namespace %r", token, generation, opts.namespace)
        _execute(flow, opts)
        return read_latest(client, opts.namespace)
    finally:
        client.close()


def _run_local_processes(opts: RunOptions) -> dict[str, Any] | None:
    """Start ``opts.processes`` processes of one run on this machine and wait for them.

    Bytewax needs every process alive: if one fails, the others are stopped and the
    run fails (start it again; with ``--recovery-dir`` it resumes).
    """
    ports = [free_port() for _ in range(opts.processes)]
    run_id = uuid.uuid4().hex
    context = multiprocessing.get_context("spawn")
    children = [
        context.Process(target=_process_main, name=f"rankflow-{i}", args=(replace(
            opts, processes=1, addresses=[f"127.0.0.1:{p}" for p in ports], process_id=i, run_id=run_id),))
        for i in range(opts.processes)
    ]
    for child in children:
        child.start()
    try:
        failed = _wait_all(children)
    except KeyboardInterrupt:
        for child in children:
            child.join(timeout=30)
        raise
    if failed is not None:
        raise ServiceError(f"process {failed.name} exited with status {failed.exitcode}; the run stopped")
    client = _redis(opts.redis_url)
    try:
        return read_latest(client, opts.namespace)
    finally:
        client.close()


def _wait_all(children: list[multiprocessing.process.BaseProcess]) -> multiprocessing.process.BaseProcess | None:
    while any(c.is_alive() for c in children):
        for child in children:
            if child.exitcode not in (None, 0):
                for other in children:
                    if other.is_alive():
                        other.terminate()
                for other in children:
                    other.join(timeout=30)
                return child
        time.sleep(0.05)
    return next((c for c in children if c.exitcode != 0), None)


def stopped_by_user() -> bool:
    """True if Ctrl-C ended the run (gracefully) rather than the end of its input."""
    return STOP.is_set()


def _process_main(opts: RunOptions) -> None:
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s %(name)s[{opts.process_id}]: %(message)s")
    try:
        run(opts)
        if stopped_by_user():
            sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - reported, and the exit status tells the parent
        log.error("%s", exc)
        sys.exit(1)


class RebuildFailed(RuntimeError):
    """The rebuilt generation failed its checks; readers still use the old one."""


def rebuild(opts: RunOptions) -> dict[str, Any]:
    """Replay the input into a new generation, check it, then switch readers to it.

    Readers keep the current generation until the switch, which is one atomic script
    that also removes the old generation. A live run still publishing into the old
    generation stops at its next publish (:class:`GenerationSwitched`).
    """
    opts.check()
    opts.until_eof = True
    tune_gc()
    client = _redis(opts.redis_url)
    try:
        source = make_source(opts.input, follow=False, chunk_bytes=opts.read_chunk_bytes)
        token = new_run_token(client, opts.namespace)
        old, new = current_generation(client, opts.namespace), token  # tokens are unique, so generations are
        flow = _flow(opts, token, new, live=False, source=source)
        claim_generation(client, opts.namespace, new, token)
        log.info("rebuilding namespace %r into generation %s (readers stay on %s)", opts.namespace, new, old)
        try:
            _execute(flow, opts)
            final = read_generation(client, opts.namespace, new)
            _check_rebuilt(final)
        except BaseException:
            drop_generation(client, opts.namespace, new)
            raise
        switch_generation(client, opts.namespace, old, new)
        log.info("readers switched to generation %s; generation %s removed", new, old)
        assert final is not None
        return final
    finally:
        client.close()


def _check_rebuilt(final: dict[str, Any] | None) -> None:
    if final is None:
        raise RebuildFailed("the rebuild published no snapshot")
    if final["errors"]:
        raise RebuildFailed(f"the rebuilt ranking has errors: {final['errors'][:3]}")
    if final["total_listeners"] != final["counted_users"]:
        raise RebuildFailed("the rebuilt ranking breaks total_listeners == counted_users")


def _explain(exc: BaseException) -> BaseException:
    """Bytewax wraps errors raised in steps; surface the ones users can act on."""
    if "signal received" in str(exc):
        return KeyboardInterrupt()
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, FencedError):
            return FencedError(f"stopped: a newer run took the namespace ({seen})")
        if isinstance(seen, GenerationSwitched):
            return GenerationSwitched(f"stopped: a rebuild replaced this run's ranking ({seen}); "
                                      "start the run again to continue on the new generation")
        if isinstance(seen, KafkaUnavailable):
            return ServiceError(str(seen))
        if isinstance(seen, redis.ConnectionError) or is_transient(seen):
            return ServiceError(f"lost Redis: {seen}")
        seen = seen.__cause__ or seen.__context__
    return exc
