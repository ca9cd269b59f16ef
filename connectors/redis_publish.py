"""Publishing a run's snapshots into Redis, one atomic script per snapshot.

The publish script (``scripts.PUBLISH_ARGV``'s prelude and a flow's body) decides what is stored; this
module keeps what Redis has not stored yet, and waits out a Redis that is
unreachable, stalled or answering "not now" (:func:`is_transient`) for
``retry_for_s`` (5 minutes) before the run stops with :class:`RedisUnavailable`.

If Redis lost its data, the first publish re-creates the generation pointer, the
owner and the run-token counter, and the next complete snapshot restores the
ranking: every snapshot is whole, and the publisher mirrors the full count table
to send it whole when Redis has none.

Changes are laid on what Redis holds, so each call names its *floor*: the positions
Redis must hold for them to apply (those of the last snapshot this publisher stored,
or, first, of the last one the resumed run's recovery state had emitted:
``rankflow.resume_point``). A Redis behind it (restored from an older backup, or
left behind by a run that died or stopped while Redis did not answer) answers
``GAP``, and the state sends everything or stops the run saying how to heal it,
as when Redis has nothing.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import orjson
import redis
from bytewax.outputs import DynamicSink, StatelessSinkPartition

from rankflow.connectors.board_layout import RedisBoardsLayout, layout_message
from rankflow.connectors.redis_generations import Fence, FencedError, GenerationSwitched
from rankflow.connectors.redis_keys import Keys, connect
from rankflow.connectors.script_query import bind
from rankflow.connectors.scripts import Published, Script, publish_call
from rankflow.operators.metrics import METRICS

log = logging.getLogger("rankflow.publisher")

STREAM_MAXLEN = 10_000

TRANSIENT_REPLIES = frozenset({"LOADING", "BUSY", "MASTERDOWN", "READONLY", "TRYAGAIN", "CLUSTERDOWN"})
"""Redis replies that mean "not now": loading its data, running a long script, a
replica without its master or not yet promoted, a cluster moving slots or failing over."""


LOST = "Redis has no snapshot of this run's generation (it lost its data?)"
"""Why a state must send everything (``ProductState.resend_all``): ``NO_TABLE``."""
BEHIND = ("Redis holds this run's generation at positions behind what the run has published (it was restored "
          "from an older backup, or the run's recovery state moved past snapshots Redis never stored)")
"""Why a state must send everything: ``GAP``."""


class RedisUnavailable(redis.ConnectionError):
    """Redis stayed unreachable, or kept answering "not now", for the whole retry bound."""


def is_transient(exc: BaseException) -> bool:
    """Whether a Redis error may go away by itself, so waiting beats stopping the run.

    A lost connection or a socket timeout (a stalled or restarting Redis) is; a
    refused password is not, however long one waits.
    """
    if isinstance(exc, (redis.AuthenticationError, redis.exceptions.AuthorizationError)):
        return False
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return True
    return isinstance(exc, redis.ResponseError) and describe(exc).split(" ", 1)[0] in TRANSIENT_REPLIES


def describe(exc: redis.RedisError) -> str:
    """The error as Redis sent it: redis-py keeps the code of the replies it knows
    (``READONLY``, ``MASTERDOWN``, ...) apart from the message."""
    message = str(exc)
    code = exc.status_code
    return f"{code} {message}" if code and not message.startswith(code) else message


def dumps_document(obj: Any) -> bytes:
    """A snapshot document as JSON. orjson refuses integers beyond 64 bits, which the activity
    flow's event times may be (docs/semantics/windows.md 1: ``ts`` of any size, so its watermark too):
    those documents, and only those, are written by the standard library, exactly.

    >>> dumps_document({"watermark": 10**30})
    b'{"watermark":1000000000000000000000000000000}'
    """
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def loads_document(raw: bytes | str) -> Any:
    """A snapshot document read exactly (:func:`dumps_document`'s integers beyond 64 bits stay
    integers; orjson would read them as floats). For the CLI and tests, not hot paths."""
    return json.loads(raw)


def merge_pending(pending: dict[Any, dict[Any, Any]], changes: dict[Any, dict[Any, Any]]) -> None:
    """Fold one snapshot's changes (per group: a workspace, a board, its members' new
    values) into the changes still waiting for Redis: a newer snapshot's value replaces
    the one waiting, so only the newest of each member is sent.

    >>> pending = {"w": {"a": 1}}
    >>> merge_pending(pending, {"w": {"a": 2, "b": 1}, "v": {"c": 0}})
    >>> pending
    {'w': {'a': 2, 'b': 1}, 'v': {'c': 0}}
    """
    for group, members in changes.items():
        got = pending.get(group)
        if got is None:
            pending[group] = dict(members)
        else:
            got.update(members)


class ProductState(Protocol):
    """What a flow keeps in Redis beside the snapshot document, and how it is sent."""

    script: Script

    def remember(self, snapshot: Any) -> None:
        """Take a snapshot's changes: pending until Redis stores a snapshot."""

    def resend_all(self, why: str) -> None:
        """Redis has nothing (``NO_TABLE``, ``why`` is :data:`LOST`) or lacks changes the pending
        ones build on (``GAP``, :data:`BEHIND`): the next call sends the whole state, or this
        raises, saying ``why`` and how to heal Redis, when the state does not hold it."""

    def stored(self) -> None:
        """Redis stored the pending changes."""

    def keys(self, k: Keys) -> list[str]:
        """The script's keys after the shared ones (``scripts.PUBLISH_KEYS``)."""

    def args(self) -> list[Any]:
        """The script's arguments from ``ARGV[P]`` (after the positions): ``full`` or ``delta`` first."""

    # Optional: ``prepare(client, keys, fence, hurry)``, called before every call of the script, and
    # ``finish(client, keys, fence)`` after each call that returned, for a state that reads
    # Redis to name its keys or writes in several calls (``redis_activity.ActivityState``).
    # Their scripts raise the publish script's FENCED and SWITCHED errors.


class Publisher:
    """Publishes the snapshots of one run into one generation.

    ``live=True`` (a run) requires the generation to stay current; ``live=False`` (a
    rebuild) writes into a generation readers do not use yet. ``state`` is the
    flow's state in Redis, its product's (``connectors.redis_listeners.CountTable``,
    ``redis_boards.BoardsState``, ``redis_activity.ActivityState``).
    """

    def __init__(self, url: str, namespace: str, run_token: int, generation: int = 0,
                 live: bool = True, retry_for_s: float = 300.0, *, state: ProductState,
                 floor: dict[str, int] | None = None) -> None:
        self._client = connect(url)
        self._keys = Keys(namespace, generation)
        self._state = state
        self._script = bind(self._client, self._state.script)
        self._fence = Fence(run_token, generation, "live" if live else "build")
        k = self._keys
        self._shared_keys = {"generation": k.generation, "owner": k.owner, "snapshot_id": k.snapshot_id,
                             "snapshot": k.snapshot, "positions": k.positions, "stream": k.stream, "runs": k.runs,
                             "published_at": k.published_at}
        self._hurry = False
        self._retry_for_s = retry_for_s
        self._floor = floor  # the positions Redis must hold for the pending changes to apply

    def publish(self, snapshot: Any, hurry: bool = False) -> Published:
        """Store ``snapshot``, or keep its changes until Redis stores a snapshot.

        A snapshot Redis does not store (``OLDER``, ``BEHIND``) leaves its changes
        pending: they are real (a resumed run replays epochs Redis has seen under
        other cuts) and go with the next snapshot stored. When Redis has nothing for
        the generation (it is new, or Redis lost its data) the script says so and the
        publisher sends the whole state, which it mirrors for that case.

        ``hurry``: the publisher is behind (a backlog's catch-up: snapshots keep
        waiting to be stored): the state should store this one the quickest way, not
        the way that least delays readers.
        """
        self._state.remember(snapshot)
        self._hurry = hurry
        deadline = time.monotonic() + self._retry_for_s
        delay = 0.1
        while True:
            try:
                return self._publish_once(snapshot)
            except redis.RedisError as exc:
                if not is_transient(exc):
                    raise
                if time.monotonic() + delay > deadline:
                    raise RedisUnavailable(f"Redis did not accept snapshot {snapshot.snapshot_id} for "
                                           f"{self._retry_for_s:g} s: {describe(exc)}") from exc
                log.warning("Redis is unavailable (%s); retrying snapshot %s in %.1f s",
                            describe(exc), snapshot.snapshot_id, delay)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _publish_once(self, snapshot: Any) -> Published:
        published_at = int(time.time() * 1000)
        body = dumps_document(snapshot.to_json_obj(published_at))
        started = time.perf_counter()
        outcome = Published(self._call(snapshot, body, published_at))
        if outcome in (Published.NO_TABLE, Published.GAP):  # send all of it
            why = LOST if outcome is Published.NO_TABLE else BEHIND
            self._state.resend_all(why)  # raises when the state cannot: the run stops saying how to heal Redis
            if outcome is Published.GAP:
                log.warning("%s: snapshot %s sends the whole state", why, snapshot.snapshot_id)
            outcome = Published(self._call(snapshot, body, published_at))
        if outcome is Published.STORED:
            METRICS.published(snapshot.positions, snapshot.gauges(), time.perf_counter() - started)
        if outcome in (Published.STORED, Published.ALREADY_STORED):  # the pending changes are in Redis
            if outcome is Published.ALREADY_STORED:  # a resumed run's first: what it holds is there all the same
                METRICS.catch_up.stored(snapshot.positions)
            self._state.stored()
            self._floor = dict(snapshot.positions)
        return outcome

    def _call(self, snapshot: Any, body: bytes, published_at: int) -> Any:
        k, state = self._keys, self._state
        prepare, finish = getattr(state, "prepare", None), getattr(state, "finish", None)
        try:
            if prepare is not None:
                prepare(self._client, k, self._fence, self._hurry)
            reply = self._script(*publish_call(state.script, self._fence, snapshot.snapshot_id, body, published_at,
                                               STREAM_MAXLEN,
                                               snapshot.positions, self._shared_keys, state.keys(k), state.args(),
                                               self._floor))
            if finish is not None:
                finish(self._client, k, self._fence)
            return reply
        except redis.ResponseError as exc:
            message = str(exc)
            if message.startswith("FENCED"):
                raise FencedError(message.removeprefix("FENCED ")) from None
            if message.startswith("SWITCHED"):
                raise GenerationSwitched(message.removeprefix("SWITCHED ")) from None
            if message.startswith("LAYOUT"):
                raise RedisBoardsLayout(layout_message(message.split(" layout ")[1].split(",")[0])) from None
            raise

    def close(self) -> None:
        self._client.close()


FAILURES: list[BaseException] = []
"""The errors that stopped this process's publishers. With several processes, Bytewax turns an
error raised in a step into a panic of the cluster (``PanicException``, "Send thread panic"),
and the error itself is lost: ``execution.execute`` reports it from here instead."""


class _PublisherPartition(StatelessSinkPartition[tuple[str, Any]]):
    """Publishes from a thread of its own, in order, so the flow never waits for Redis.

    A publish is one Lua script that applies thousands of count changes (about 20 ms
    per barrier on the 1M-event benchmark, 7% of the run when the flow waited for
    it). The flow hands snapshots over and goes on; the thread publishes them in
    order, Redis working on the other core. At most :data:`IN_FLIGHT` snapshots wait:
    beyond that the flow waits (a Redis that falls behind slows the flow instead of
    filling memory). An error (fenced, switched, Redis gone for good) stops the flow
    at its next snapshot or at its end; ``close`` returns once everything handed over
    is published, so a finished or interrupted run has published its last barrier.
    Nothing is lost by publishing later: every snapshot is complete, and a crashed
    run resumes from its recovery state and publishes again.
    """

    IN_FLIGHT = int(os.environ.get("RANKFLOW_PUBLISH_IN_FLIGHT", 2))
    """Snapshots handed over and not yet stored before the flow waits. (Tests of a Redis stall set
    more through ``RANKFLOW_PUBLISH_IN_FLIGHT``, so the flow surely commits barriers past what
    Redis stored before it waits.)"""
    PRESSED = 2
    """Snapshots in a row that found another waiting behind them: from then on the publisher
    is behind (a backlog's catch-up) and asks for the quickest store (``hurry``); one
    waiting snapshot alone (after a slow store, a bucket leaving the window) is not."""

    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=self.IN_FLIGHT)
        self._failure: BaseException | None = None
        self._reported = False
        self._thread = threading.Thread(target=self._publish_all, name="rankflow-publisher", daemon=True)
        self._thread.start()

    def _publish_all(self) -> None:
        pressed = 0  # snapshots in a row that found another one waiting behind them
        while (snapshot := self._queue.get()) is not None:
            pressed = pressed + 1 if not self._queue.empty() else 0
            if self._failure is None:
                try:
                    # a backlog: the flow keeps handing snapshots over faster than they are stored
                    self._publisher.publish(snapshot, hurry=pressed >= self.PRESSED)
                except BaseException as exc:  # noqa: BLE001 - handed to the flow's thread
                    self._failure = exc
                    FAILURES.append(exc)

    def _raise_failure(self) -> None:
        """Raise the thread's error, once: Bytewax closes the partition while it unwinds
        from that error, and an error raised again there aborts the process."""
        failure = self._failure
        if failure is not None and not self._reported:
            self._reported = True
            raise failure

    def write_batch(self, items: list[tuple[str, Any]]) -> None:
        self._raise_failure()
        for _, snapshot in items:
            self._queue.put(snapshot)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self._publisher.close()
        self._raise_failure()


class RedisSnapshotSink(DynamicSink[tuple[str, Any]]):
    """Bytewax sink publishing the merger's ``(key, snapshot)`` items.

    ``state``: builds the flow's :class:`ProductState` (its product's); one per
    partition, built where the partition runs. ``retry_for_s``: how long a snapshot waits
    for Redis before the run stops (``--redis-retry-s``). ``floor``: the positions Redis
    must hold before the run's first changes apply (``rankflow.resume_point``).
    """

    def __init__(self, url: str, namespace: str, run_token: int, generation: int = 0, live: bool = True, *,
                 state: Callable[[], ProductState], retry_for_s: float = 300.0,
                 floor: dict[str, int] | None = None) -> None:
        self._args = (url, namespace, run_token, generation, live, retry_for_s)
        self._state = state
        self._floor = floor

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _PublisherPartition:
        return _PublisherPartition(Publisher(*self._args, state=self._state(), floor=self._floor))
