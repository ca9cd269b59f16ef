"""Executing a built flow: Bytewax's entry points, graceful stops, and readable errors.

A graceful stop (the first Ctrl-C, or SIGTERM from a process manager) ends every
source at its next read; the flow then finishes as at the end of its input: the
last barrier closes, its snapshot is published, dead letters are flushed and
recovery state is written. A second signal aborts at once. The caller learns which
signal stopped the run from :func:`stop_signal`: a run exits 128 + its number, and
a rebuild knows it did not reach the end of its input. A source whose input changed
under it (a followed file truncated or replaced: ``source_batch.InputChanged``) stops
the run the same way, and :func:`execute` then raises its error.
"""

from __future__ import annotations

import gc
import logging
import signal
import sys
import threading
import time
from contextlib import nullcontext
from datetime import timedelta
from typing import Any

import redis
from bytewax.dataflow import Dataflow
from bytewax.recovery import RecoveryConfig
from bytewax.testing import cluster_main, run_main

from rankflow.cluster_watch import ClusterWatch, is_repeat
from rankflow.connectors import barrier_sync
from rankflow.connectors.redis_activity import RedisLostActivity
from rankflow.connectors.board_layout import RedisBoardsLayout
from rankflow.connectors.redis_boards import RedisLostBoards
from rankflow.connectors.kafka import KafkaUnavailable
from rankflow.connectors.redis_generations import FencedError, GenerationSwitched
from rankflow.connectors.redis_publish import FAILURES, is_transient
from rankflow.connectors.source_batch import ENDS, FAILED, STOP, PositionOutOfRange
from rankflow.operators.metrics import METRICS
from rankflow.options import RunOptions, ServiceError
from rankflow.panic_filter import PanicFilter

log = logging.getLogger("rankflow.run")

GRACEFUL = (signal.SIGINT, signal.SIGTERM)
_stopped_by: list[int] = []  # the signal of this execution's graceful stop, if any
_stopped_at: list[float] = []  # when it came (time.monotonic)


YOUNG_OBJECTS = 1_000_000
"""The collector's first threshold: allocations less deallocations between its young collections."""


def tune_gc() -> None:
    """Make the cyclic garbage collector run rarely.

    The flow keeps millions of long-lived objects (user records, index entries) and
    allocates a few short-lived tuples per event; with the default thresholds the
    collector rescans the long-lived ones constantly (16% of a 1M-event run in
    py-spy). Nothing in the flow builds reference cycles, so rarer collections cost
    no memory; measured: 1M events in 13.5 s with the defaults, 10 s with these.
    A young generation of 1M objects rather than 100k: the objects of the batches in
    flight are young when a collection comes, and each collection walks them all
    (30,000-message Kafka batches: 240k events of 8 partitions at once). Measured
    paired on 1M events (docs/benchmarks.md): the listener flow x0.88 CPU plain and
    durable, boards and activity unchanged, the same peak RSS; 10M gained nothing more.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_OBJECTS, 50, 100)
    global _freezer
    if _freezer is None:
        _freezer = threading.Thread(target=_freeze_survivors, name="rankflow-gc-freeze", daemon=True)
        _freezer.start()


FREEZE_EVERY_S = 5.0
_freezer: threading.Thread | None = None


def _freeze_survivors() -> None:
    """Move what survived so far out of the collector's sight, every few seconds.

    Rarer collections are not enough for a state that keeps growing (the boards
    flow's player records: about ten dicts and lists per player): Python still runs
    a full collection whenever the objects that survived since the last one reach a
    quarter of all, and each scans every record (11% of the boards flow's CPU in
    py-spy). Frozen objects are still freed by reference counting when dropped; only
    a reference cycle among them would stay, and the flow's state builds none.
    """
    while True:
        time.sleep(FREEZE_EVERY_S)
        gc.freeze()


def stop_signal() -> int | None:
    """The signal that stopped the last execution gracefully, or None if its input ended."""
    return _stopped_by[-1] if _stopped_by else None


def record_stop(signum: int | None) -> None:
    """Note which signal stopped this run, None for none (the parent of ``--processes`` children,
    which passes its signals on to them instead of running the flow): :func:`stop_signal` names it."""
    _stopped_by.clear()
    if signum is not None:
        _stopped_by.append(signum)


def _stop_gracefully(signum: int, frame: Any) -> None:
    if STOP.is_set():
        if is_repeat(signum, _stopped_by[:1], _stopped_at[:1]):
            return
        raise KeyboardInterrupt
    _stopped_at[:] = [time.monotonic()]
    log.warning("%s: stopping once what was read is published (send it again to stop at once)",
                signal.Signals(signum).name)
    _stopped_by.append(signum)
    STOP.set()


def execute(flow: Dataflow, opts: RunOptions, recovery: RecoveryConfig | None) -> None:
    """Run ``flow`` to its end (or a graceful stop) with the options' workers and processes."""
    interval = timedelta(milliseconds=opts.barrier)
    STOP.clear()  # a stop of an earlier run in this process must not end this one
    _stopped_by.clear()
    _stopped_at.clear()
    ENDS.clear()
    FAILED.clear()
    FAILURES.clear()
    barrier_sync.new_run()
    METRICS.catch_up.reset(whole_input=opts.addresses is None)  # one process reads all and publishes
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, _stop_gracefully) for s in GRACEFUL} if in_main_thread else {}
    watch = ClusterWatch(opts.addresses, opts.process_id or 0, opts.peer_timeout_s).start() if opts.addresses else None
    try:
        if opts.addresses is None and opts.workers == 1:
            # run_main leaves Rust's panic report on standard error (panic_filter drops it where
            # a user would read it); cluster_main's polling main thread would cost 5-10% of the CPU.
            with PanicFilter() if in_main_thread else nullcontext():
                run_main(flow, epoch_interval=interval, recovery_config=recovery)
        else:  # cluster_main hands errors raised in steps to Python without a panic report
            cluster_main(flow, opts.addresses or [], opts.process_id or 0, epoch_interval=interval,
                         recovery_config=recovery, worker_count_per_proc=opts.workers)
    except BaseException as exc:  # a cluster's panic hides the error that caused it
        if opts.addresses is not None or opts.workers > 1:
            quiet_late_panics()
        if FAILURES:  # this process's own failure first: its peers' connections close because of it
            raise explain(FAILURES[0]) from exc
        if watch is not None and watch.lost_now():
            raise ServiceError(watch.lost_line()) from exc
        if isinstance(exc, Exception):
            raise explain(exc) from exc
        if watch is not None and _lost_peer(exc):  # timely's panic, before the watch saw the connection go
            raise ServiceError(watch.lost_line()) from exc
        raise
    finally:
        if watch is not None:
            watch.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
    if FAILED:  # a source stopped the run because its input changed under it (source_batch.InputChanged)
        raise explain(FAILED[0])


def quiet_late_panics() -> None:
    """Keep the panics of a cluster's other threads, once the run has failed, off standard error.

    Bytewax hands a worker's panic to ``cluster_main`` through a channel; a panic of another
    thread after ``cluster_main`` returned (the connection threads of a link that was cut) finds
    the channel closed and is printed through ``sys.excepthook`` as a ``RuntimeError: (src/run.rs...)
    panicked at`` line beside the one line this process stops with. Such a panic follows from the
    failure being reported, so it goes to the debug log; any other exception is printed as before.
    """
    original = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if issubclass(kind, RuntimeError) and "panicked at" in str(value):
            log.debug("a panic after the run failed: %s", value)
            return
        original(kind, value, tb)
    sys.excepthook = hook


TIMELY_LOST = ("timely communication error", "MergeQueue poisoned", "Send thread panic", "Recv thread panic")
"""What timely's panics say when a connection to another process failed (``rankflow.cluster_watch``)."""


def _lost_peer(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if any(text in str(seen) for text in TIMELY_LOST):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def explain(exc: BaseException) -> BaseException:
    """Bytewax wraps errors raised in steps; surface the ones users can act on."""
    if "signal received" in str(exc):  # run_main's word for a second Ctrl-C
        return KeyboardInterrupt()
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, FencedError):
            return FencedError(f"stopped: a newer run took the namespace ({seen})")
        if isinstance(seen, GenerationSwitched):
            return GenerationSwitched(f"stopped: a rebuild replaced this run's ranking ({seen}); "
                                      "start the run again to continue on the new generation")
        if isinstance(seen, (KafkaUnavailable, PositionOutOfRange, RedisLostBoards, RedisLostActivity,
                             RedisBoardsLayout)):
            return ServiceError(str(seen))
        if isinstance(seen, redis.ConnectionError) or is_transient(seen):
            return ServiceError(f"lost Redis: {seen}")
        seen = seen.__cause__ or seen.__context__
    return exc
