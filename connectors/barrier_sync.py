"""One ``fdatasync`` wait per barrier for a worker's changelog shards, not one per shard.

Why: a durable activity run appends a frame to each counter partition's changelog at every
barrier and synced each before its position went to Bytewax: eight ``fdatasync`` calls one
after the other per barrier, each waiting for its own journal commit (7 ms each on this
machine's disk when loaded; 12% of the durable run's samples, its worker blocked). Issued
together, the syncs share a journal commit: eight files written then synced from eight
threads took 1.6-2.7 ms a barrier against 10-30 ms one after the other (and written first,
then synced one after the other, 8-26 ms: each sync still waits for a commit of its own).

How: Bytewax calls a stateful step's ``snapshot()`` at the close of epoch ``E`` for every key
that got items in ``E``, on the worker thread that holds the key, and commits ``E``'s
positions only after every snapshot of ``E`` returned. So a shard tells its worker's
:class:`BarrierSync` when it first takes an item of ``E`` (:meth:`BarrierSync.expect`); its
snapshot writes its frame unsynced and reports it (:meth:`BarrierSync.written`); the last
expected shard's snapshot syncs every written file at once, before it returns. A shard that
snapshots ``E`` without having been expected (or after the group's sync) syncs at once, so
no snapshot ever returns a position whose bytes are not on disk unless a shard still due in
the same epoch will sync them before Bytewax's commit.

The changelog's bytes and files are those of ``connectors.changelog``: only the moment of
the ``fdatasync`` moved, so a recovery directory written before resumes as it is.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
_LOCAL = threading.local()
_RUN = [0]  # the process's runs so far: a worker's group belongs to one run (:func:`new_run`)


class Syncable(Protocol):
    def sync(self) -> None:
        """Make what was written durable."""


def new_run() -> None:
    """A run starts in this process: every worker thread's group of an earlier run is dropped.

    Why: a run stopped between a shard's first item of an epoch and its snapshot leaves that
    shard due in its group; a later run on the same thread (tests, or an embedding program)
    starts at low epochs again and would wait for it, leaving its own frames unsynced at a
    commit until that epoch's group synced."""
    _RUN[0] += 1


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="rankflow-fsync")
        return _POOL


def sync_all(logs: list[Syncable]) -> None:
    """Sync every log, concurrently when there are several (``fdatasync`` releases the GIL)."""
    if len(logs) == 1:
        logs[0].sync()
    elif logs:
        for future in [_pool().submit(log.sync) for log in logs]:
            future.result()  # an error (a full disk) is the snapshot's, as it was with a sync each


class BarrierSync:
    """The changelog shards of one worker thread, synced together once per barrier."""

    def __init__(self) -> None:
        self.due: dict[int, set[object]] = {}  # epoch -> shards that took its items and have not written
        self.pending: list[Syncable] = []  # written, not yet synced
        self.run = _RUN[0]

    @classmethod
    def of_this_worker(cls) -> BarrierSync:
        """The group of the calling worker thread (Bytewax runs a key's logic on one thread)."""
        group = getattr(_LOCAL, "group", None)
        if group is None or group.run != _RUN[0]:
            group = _LOCAL.group = cls()
        return group

    def expect(self, epoch: int, shard: object) -> None:
        """``shard`` took an item of ``epoch``: its snapshot of that epoch will come."""
        self.due.setdefault(epoch, set()).add(shard)

    def written(self, epoch: int, shard: object, log: Syncable | None) -> None:
        """``shard``'s snapshot of ``epoch`` wrote to ``log`` (None: nothing to sync). Returns
        once everything written is durable, unless another shard due in ``epoch`` is still to
        write (its snapshot will sync it all before Bytewax's commit)."""
        if log is not None:
            self.pending.append(log)
        for earlier in [e for e in self.due if e < epoch]:  # a snapshot that never came: never wait on it
            del self.due[earlier]
        due = self.due.get(epoch)
        if due is not None and shard in due:
            due.discard(shard)
            if due:
                return
            del self.due[epoch]
        pending, self.pending = self.pending, []
        sync_all(pending)
