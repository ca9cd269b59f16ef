"""Running a flow live: one process, or several processes of one run.

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

import ctypes
import logging
import multiprocessing
import multiprocessing.process
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import redis
from bytewax.dataflow import Dataflow
from bytewax.inputs import Source
from bytewax.outputs import Sink

from rankflow.products import listeners
from rankflow.connectors.redis_generations import join_run
from rankflow.connectors.redis_keys import connect
from rankflow.connectors.redis_owner import record_owner
from rankflow.connectors.redis_read import read_latest
from rankflow.connectors.redis_contact import NotRedis, first_contact
from rankflow.connectors.source_batch import pause_when_busy
from rankflow.endpoints import check_endpoints, dead_letter_place, make_dead_letter_sink, make_source
from rankflow.execution import GRACEFUL, execute, record_stop, stop_signal, tune_gc
from rankflow.operators.metrics import METRICS
from rankflow.options import RunOptions, ServiceError, UsageError, check_redis_url, redacted
from rankflow.recovery import check_resumable, recovery_config, resumes_from_recovery
from rankflow.resume_point import published_floor
from rankflow import log_setup
from rankflow.run_log import RunLog
from rankflow.services import cannot_listen, free_port

log = logging.getLogger("rankflow.run")


def connect_redis(url: str) -> redis.Redis:
    """A client of a Redis that answered a ping: a run fails at once, clearly, when Redis is
    unreachable or the address is not Redis (``redis_contact``: within about 2 s)."""
    try:
        first_contact(url)
    except NotRedis as exc:
        raise ServiceError(str(exc)) from None
    except redis.RedisError as exc:
        raise ServiceError(f"cannot reach Redis at {redacted(url)}: {exc}") from None
    return connect(url)


def check_run(opts: RunOptions) -> None:
    """Everything a run or a rebuild can check before it touches Redis: its options, its
    input and dead-letter output, the Redis URL and the metrics address. A mistaken
    command must fail here, on its own, and never after claiming a healthy run's namespace."""
    opts.check()
    check_redis_url(opts.redis_url)
    check_endpoints(opts.input, opts.dead_letter)
    if opts.metrics_port is not None:
        for port in range(opts.metrics_port, opts.metrics_port + opts.processes):
            problem = cannot_listen(opts.metrics_host, port + (opts.process_id or 0))
            if problem is not None:
                raise UsageError(f"--metrics-host/--metrics-port: {problem}")


def build_dataflow(opts: RunOptions, token: int, generation: int, live: bool, source: Source, fresh: bool,
                   republish: bool = False, dead_letter: Sink | None = None,
                   floor: dict[str, int] | None = None) -> Dataflow:
    """The flow of the product ``opts.flow`` names, publishing into ``generation`` with run token
    ``token``; ``fresh``: it starts its input over (no recovery state to resume from). ``dead_letter``:
    the sink made (and its topic created) before the run claimed anything, else made here. ``floor``:
    what Redis must hold before the first changes apply (:class:`Start`)."""
    if dead_letter is None:
        dead_letter = make_dead_letter_sink(opts.dead_letter, opts.kafka_settings)
    return opts.product.build_flow(opts, token, generation, live, source, dead_letter, fresh, republish, floor)


@dataclass(frozen=True)
class Start:
    """Where a run starts: over from its input's beginning (``fresh``, no recovery state), or
    resumed, with ``floor``, the positions of the last snapshot its recovery state had emitted
    (``rankflow.resume_point``): Redis must hold them, or the changes before them are lost."""

    fresh: bool
    floor: dict[str, int] | None = None

    @classmethod
    def of(cls, opts: RunOptions) -> Start:
        """Read before the run's store is opened (a resume's floor from Bytewax's store)."""
        if not resumes_from_recovery(opts.recovery_dir):
            return cls(fresh=True)
        return cls(fresh=False, floor=published_floor(opts.recovery_dir, opts.flow))


def warn_unchecked(opts: RunOptions) -> None:
    """What the run will not check, said once at start (a boards run without a signing key)."""
    opts.product.warn(opts)


def must_republish(client: redis.Redis, opts: RunOptions, generation: int, fresh: bool,
                   floor: dict[str, int] | None = None) -> bool:
    """Whether a resumed run must send its whole state again: Redis lost it while the run was down,
    or holds less than the run's recovery state has published (``floor``)."""
    return opts.product.must_republish(client, opts, generation, fresh, floor)


def listener_flow(opts: RunOptions, token: int, generation: int, live: bool, source: Source,
                  dead_letter: Sink) -> Dataflow:
    """The listener flow of ``opts`` (tests build it beside a run)."""
    return listeners.PRODUCT.build_flow(opts, token, generation, live, source, dead_letter, fresh=True,
                                        republish=False)


def run(opts: RunOptions, start: Start | None = None) -> dict[str, Any] | None:
    """Run the flow live; with ``until_eof`` return the final published snapshot.

    ``start``: whether the run starts its input over (no stored state) and where a resume's
    snapshots build on, when the caller read it before creating the store (the processes of
    one run); else read here."""
    check_run(opts)
    check_resumable(opts)  # before any process starts: another input, layout or key is a usage error
    if opts.processes > 1:
        return _run_local_processes(opts)
    if opts.process_id in (None, 0):  # one line per run, not per process
        warn_unchecked(opts)
    tune_gc()
    pause_when_busy(opts.worker_count, opts.barrier)
    if start is None:
        start = Start.of(opts)
    fresh = start.fresh
    recovery = recovery_config(opts)  # first: a directory of another input or layout is a usage error
    if opts.metrics_port is not None:
        METRICS.serve(opts.metrics_port + (opts.process_id or 0), opts.metrics_host)
    source = make_source(opts.input, follow=not opts.until_eof, chunk_bytes=opts.read_chunk_bytes,
                         max_line_bytes=opts.max_line_bytes, read_batch=opts.kafka_batch,
                         kafka_settings=opts.kafka_settings)
    dead_letter = make_dead_letter_sink(opts.dead_letter, opts.kafka_settings)  # a Kafka topic: created, or the run fails, here
    client = connect_redis(opts.redis_url)
    try:
        run_id = opts.run_id or uuid.uuid4().hex
        token, generation = join_run(client, opts.redis_namespace, run_id, fresh=fresh)
        record_owner(client, opts.redis_namespace, generation, token, run_id, "run",
                     dead_letter_place(opts.dead_letter))  # for `rankflow status`
        flow = build_dataflow(opts, token, generation, live=True, source=source, fresh=fresh,
                              republish=must_republish(client, opts, generation, fresh, start.floor),
                              dead_letter=dead_letter, floor=start.floor)
        # what taking the namespace means for the user; the token and generation stay for JSON logs and status
        log.info("this run (run id %s) now publishes to namespace %r: readers get its snapshots from now on, and "
                 "an earlier run still publishing there stops at its next snapshot", run_id, opts.redis_namespace,
                 extra={"event": "publishing", "run_id": run_id, "token": token, "generation": generation,
                        "namespace": opts.redis_namespace})
        reporting = RunLog.of(opts, live=not opts.until_eof, what="reading" if opts.until_eof else "catching up").start()
        try:
            execute(flow, opts, recovery)
        finally:
            reporting.stop()
        return read_latest(client, opts.redis_namespace)
    finally:
        client.close()


def _run_local_processes(opts: RunOptions) -> dict[str, Any] | None:
    """Start ``opts.processes`` processes of one run on this machine and wait for them.

    Bytewax needs every process alive: if one fails, the others are stopped and the
    run fails (start it again; with ``--recovery-dir`` it resumes). The children are this
    process's to stop: SIGTERM or Ctrl-C here is passed on to each of them (the first asks for
    the graceful stop, a second aborts); a child that gets the signal twice at once, from here
    and from a terminal or a process manager signalling the whole group, counts it once
    (``cluster_watch.REPEAT_S``); if this process dies outright, the kernel sends them SIGTERM
    (``PR_SET_PDEATHSIG``).
    """
    ports = [free_port() for _ in range(opts.processes)]
    run_id = uuid.uuid4().hex
    # decided once, and the store created once, before the processes start: each deciding for
    # itself would race the first one's creating it (and disagree on ``fresh``)
    start = Start.of(opts)
    recovery_config(opts)
    context = multiprocessing.get_context("fork")
    children = [
        context.Process(target=_process_main, name=f"rankflow-{i}", args=(replace(
            opts, processes=1, addresses=[f"127.0.0.1:{p}" for p in ports], process_id=i, run_id=run_id), start))
        for i in range(opts.processes)
    ]
    stopping: list[int] = []
    record_stop(None)

    def pass_on(signum: int, frame: Any) -> None:
        if not stopping:
            log.warning("%s: stopping every process once what was read is published (send it again to stop at "
                        "once)", signal.Signals(signum).name)
        stopping.append(signum)
        for child in children:
            if child.pid is not None and child.exitcode is None:
                try:
                    os.kill(child.pid, signum)
                except ProcessLookupError:
                    pass

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, pass_on) for s in GRACEFUL} if in_main_thread else {}
    try:
        for child in children:
            child.start()
        failed = _wait_all(children, stopping)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    record_stop(stopping[0] if stopping else None)
    if failed is not None:
        raise ServiceError(f"process {failed.name} exited with status {failed.exitcode}; the run stopped")
    client = connect_redis(opts.redis_url)
    try:
        return read_latest(client, opts.redis_namespace)
    finally:
        client.close()


def _wait_all(children: Sequence[multiprocessing.process.BaseProcess],
              stopping: Sequence[int] = ()) -> multiprocessing.process.BaseProcess | None:
    """Wait for every child; the first that failed, or None. A child that exits with the status of the
    signal passed on to it (``stopping``) stopped as asked, and did not fail; so did one that exits 1
    once a stop was asked and a peer stopped by the signal: a signal that comes while the processes
    still wait for each other stops each at once, and the others then lose that peer."""
    while any(c.is_alive() for c in children):
        for child in children:
            if child.exitcode not in (None, 0) and not (stopping and child.exitcode in (1, 128 + stopping[0])):
                for other in children:
                    if other.is_alive():
                        other.terminate()
                for other in children:
                    other.join(timeout=30)
                    if other.is_alive():  # still connecting to the failed one (Bytewax retries forever):
                        other.kill()  # stop it, or this process would wait for it at exit
                        other.join()
                return child
        time.sleep(0.05)
    expected = (0, 128 + stopping[0]) if stopping else (0,)
    if stopping and any(c.exitcode == 128 + stopping[0] for c in children):
        expected = (*expected, 1)  # it lost a peer that stopped as asked
    return next((c for c in children if c.exitcode not in expected), None)


def _follow_parent() -> None:
    """In a child of ``--processes``: SIGTERM when the parent dies (Linux's ``prctl``). It stays in
    the parent's process group, so that signalling the group reaches every process of the run."""
    for s in GRACEFUL:  # not the parent's handler, inherited by the fork, until the flow sets its own
        signal.signal(s, signal.SIG_DFL)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the parent's handler still passes signals on
        pass
    if os.getppid() == 1:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


PR_SET_PDEATHSIG = 1


def _process_main(opts: RunOptions, start: Start) -> None:
    _follow_parent()
    log_setup.configure(opts.log_format, opts.process_id)
    try:
        run(opts, start)
        stopped = stop_signal()
        if stopped is not None:
            sys.exit(128 + stopped)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - reported, and the exit status tells the parent
        log.error("%s", exc)
        sys.exit(1)
    except BaseException as exc:
        if type(exc).__name__ != "PanicException":  # pyo3's, not importable by name
            raise
        # Bytewax's cluster panics in every process when one of them fails: the one that failed
        # reports why (above); the others only stop
        log.error("stopped: another process of the run failed (%s)", exc)
        sys.exit(1)
