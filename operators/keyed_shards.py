"""Keyed state in shards: the per-user and per-player stages' runtime side.

Both flows keep one record per entity (a listener's playback, a player's results
and board scores) and both key their stage the same way (``--user-shards``):

- **by shard** (the default): the key is ``crc32(entity id) % N`` and the state a
  dict of that shard's records. The runtime's cost is per key and item (a Python
  call for ``on_batch``, ``notify_at`` and ``snapshot``, a keyed exchange), so
  per-batch shards carry the same rules at about half the flow's cost (1M playback
  events: 12.8 s -> 7.2 s). With recovery a shard's snapshot is a position in its
  changelog (``connectors.changelog``), which holds the records that changed at each
  barrier: Bytewax would otherwise store the whole shard.
- **by input partition** (:class:`PartitionShardRouter`, the listener flow's default,
  ``--shard-by partition``): one shard per source partition, whose key
  (:func:`partition_key`) is chosen to land on the worker that read the partition
  (``operators.worker_keys``). The topic is keyed by entity, so a shard still holds whole
  entities, and a batch becomes one item that stays on its worker: with several processes
  no event is pickled to another one (only the stage's net changes cross). The key
  depends on the reading worker, so a recovery directory records the number of workers
  (``rankflow.recovery``).
- **by entity** (``--user-shards 0``): one key per id, the same logic with a shard of
  one; with recovery Bytewax stores every touched record at every barrier.

:class:`ShardLogic` holds the records and their recovery; a flow's stage subclasses
it with its rules (``operators.user_stage``, ``operators.player_stage``).

What Bytewax stores for a shard carries its format (:data:`FORMAT`), so a resume reads
it by the version it names, never by its shape. A snapshot without one was stored by
earlier code and is read by :meth:`ShardLogic._resume_legacy` alone.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from urllib.parse import quote
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from bytewax.operators import StatefulBatchLogic

from rankflow.connectors.barrier_sync import BarrierSync
from rankflow.connectors.changelog import TAG as CHANGELOG
from rankflow.connectors.changelog import Position, ShardChangelog
from rankflow.operators.worker_keys import local_key

if TYPE_CHECKING:
    from rankflow.operators.parse import ParsedBatch

ShardSnapshot = dict[str, Any]
"""A whole shard, as Bytewax stores it without a changelog: id -> stored record."""

FORMAT = "rankflow-shard/2"
"""The version tag of a shard's snapshot as this code writes it: ``(FORMAT, state)``, where
``state`` is the changelog's :data:`Position` (shards) or the :data:`ShardSnapshot` (one key
per entity), and every record in it has the stage's current shape (:meth:`ShardLogic._load`).
Version 1 is everything stored before snapshots carried one (:meth:`ShardLogic._resume_legacy`)."""

Stored = tuple[str, Position | ShardSnapshot]
"""What :meth:`ShardLogic.snapshot` hands Bytewax: ``(FORMAT, state)``."""

RESUMED = ""
"""Where a resumed record waits for its id when its stored state did not name it
(state from before snapshots were dicts): never a real id, ids are never empty."""


ShardItems = tuple[Any, ...]
"""What a shard gets per source batch: ``(partition, epoch, items)``, with the sweeper
``(partition, epoch, items, mark)`` (:class:`MarkingShardRouter`)."""


class ShardLogic(StatefulBatchLogic[ShardItems, Any, "Stored | None"]):
    """Records of one shard (or one entity) and their recovery.

    With recovery (``changelog`` set) the shard keeps the ids that changed since the
    last barrier, and its snapshot appends just those to the shard's changelog and
    hands Bytewax the changelog's position: a barrier costs what changed in it, not
    the whole shard. Subclasses put changed ids in :attr:`changed` (when it is not
    None) and may override :meth:`_load` / :meth:`_flat` to store records in another
    shape than they hold them.
    """

    __slots__ = ("records", "changelog", "changed", "shards", "epoch", "whole", "source", "_directory", "_expected")

    merge: Callable[[Any, Any], Any] | None = None
    """How a changelog frame's value folds into a record (``connectors.changelog``); None: it is the record."""

    grouped_sync = False
    """True: a barrier's frame is ``fdatasync``\\ ed with the worker's other shards of that barrier
    (``connectors.barrier_sync``), the stage calling :meth:`_expect` for every epoch whose items it
    keeps (one it discards is never snapshotted); False: each snapshot syncs its own frame."""

    def __init__(self, resume: Stored | Position | ShardSnapshot | tuple[Any, ...] | None, changelog: Path | None, shards: int,
                 whole: bool = False) -> None:
        """``changelog``: recovery with a changelog per shard; ``whole``: recovery that
        stores the whole state in Bytewax (one key per entity); neither: no recovery."""
        self.shards = shards
        self.whole = whole
        self.epoch = 0  # of the last items seen
        self.source = ""  # the source partition of the last items seen (names a partition's shard)
        self.records: dict[str, Any] = {}
        self.changelog: ShardChangelog | None = None
        self.changed: set[str] | None = None if changelog is None else set()
        self._directory = changelog
        self._expected = 0  # the last epoch this shard told its worker's BarrierSync about
        if resume is None:
            return
        if isinstance(resume, tuple) and resume[:1] == (FORMAT,):
            self._resume(resume[1])
        else:
            self._resume_legacy(resume)

    def _resume(self, state: Position | ShardSnapshot) -> None:
        """Restore a snapshot this code wrote (:data:`FORMAT`): a changelog position with
        shards, the whole state with one key per entity."""
        if self._directory is not None:
            self.changelog = ShardChangelog(self._directory, state[1], self.merge)  # type: ignore[index]
            self._load(self.changelog.restore(state))  # type: ignore[arg-type]
        else:
            self._load(state)  # type: ignore[arg-type]

    def _resume_legacy(self, resume: Position | ShardSnapshot | tuple[Any, ...]) -> None:
        """Legacy: a snapshot stored before snapshots carried their format (:data:`FORMAT`),
        recognised by its shape: a changelog position (``("changelog", shard, generation,
        offset)``), a whole shard, or one entity's record stored before snapshots named their
        id. Records may have any shape earlier code stored (:meth:`_load_legacy`). The next
        barrier stores the shard in the current format: a changelog starts a new generation,
        whose image holds every record in its current shape."""
        changelog = self._directory
        if isinstance(resume, tuple) and resume and resume[0] == CHANGELOG and changelog is not None:
            self.changelog = ShardChangelog(changelog, resume[1], self.merge)
            self._load_legacy(self.changelog.restore(resume))
            self.changelog.start_over()
        elif isinstance(resume, tuple):  # one entity's record, stored before snapshots named their id
            self._load_legacy({RESUMED: resume})
        elif isinstance(resume, dict):
            self._load_legacy(resume)
            if self.changed is not None:
                self.changed.update(self.records)  # the first barrier writes all of them to the changelog

    @classmethod
    def builder(cls, changelog: Path | None = None, shards: int = 1, whole: bool = False,
                **extra: Any) -> Callable[[Any], ShardLogic]:
        """``changelog``: the directory of the shards' changelogs (recovery on, shards);
        ``whole``: recovery on, one key per entity; ``extra``: the subclass's own arguments."""
        return lambda resume: cls(resume, changelog, shards, whole, **extra)

    def _load(self, flat: dict[str, Any]) -> None:
        """Take records as this code stores them."""
        self.records.update(flat)

    def _load_legacy(self, flat: dict[str, Any]) -> None:
        """Take records as earlier code stored them (:meth:`_resume_legacy`): by default the
        same shapes as :meth:`_load`'s."""
        self._load(flat)

    def _flat(self, ids: Iterable[str]) -> dict[str, Any]:
        records = self.records
        return {i: records[i] for i in ids}

    def _rename_resumed(self, entity: str) -> None:
        """A resumed record learns its id from its first item."""
        self.records[entity] = self.records.pop(RESUMED)

    def _saw_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            if self.changelog is not None:
                self.changelog.release(epoch)

    def _expect(self, epoch: int) -> None:
        """This shard keeps items of ``epoch``: its snapshot of it will come (Bytewax snapshots every
        key it woke in an epoch and did not discard), so the worker's other shards of ``epoch`` may
        leave their frames to the last one's sync (``connectors.barrier_sync``)."""
        if epoch != self._expected and self.grouped_sync and self.changed is not None and not self.whole:
            self._expected = epoch
            BarrierSync.of_this_worker().expect(epoch, self)

    def snapshot(self) -> Stored | None:
        if self.whole:
            flat = self._flat(self.records)
            return (FORMAT, flat) if flat else None
        if self.changed is None:
            return None  # no recovery: nobody reads snapshots
        log = self.changelog
        if log is None:
            if not self.records:
                if self.grouped_sync:  # reports all the same, so its group never waits on it
                    BarrierSync.of_this_worker().written(self.epoch, self, None)
                return None  # nothing kept so far
            first = next(iter(self.records))
            assert self._directory is not None  # ``changed`` is set only with a changelog directory
            name = partition_shard_name(self.source) if self.shards == BY_PARTITION else \
                shard_key(shard_of(first, self.shards))
            log = self.changelog = ShardChangelog(self._directory, name, self.merge)
            log.restore(None)
        if self.grouped_sync:
            position = log.append(self._changes(), self._image, self.epoch, sync=False)
            BarrierSync.of_this_worker().written(self.epoch, self, log)  # synced before Bytewax commits
        else:
            position = log.append(self._changes(), self._image, self.epoch)
        self.changed.clear()
        return (FORMAT, position)

    def _changes(self) -> dict[str, Any] | bytes:
        """What the changelog gets for a barrier: the records that changed (or, with
        :attr:`merge`, the pieces of them that did), or their frame's JSON."""
        return self._flat(self.changed or ())

    def _image(self) -> dict[str, Any] | bytes:
        """The whole shard for a changelog's image, or its JSON."""
        return self._flat(self.records)


def shard_of(entity_id: str, shards: int) -> int:
    """The entity's shard: stable across processes and runs (unlike ``hash()``)."""
    return zlib.crc32(entity_id.encode()) % shards


def shard_key(shard: int) -> str:
    return f"users-{shard}"


BY_PARTITION = -1
"""The ``shards`` of a stage keyed by input partition (:class:`PartitionShardRouter`)."""


def partition_shard_name(partition: str) -> str:
    """The name of a source partition's shard (its changelog's file names): the partition's
    name made safe for a file name (a JSON Lines partition is a path)."""
    return "partition-" + quote(partition, safe="")


def partition_key(partition: str, worker: int, workers: int) -> str:
    """The key of a source partition's shard read by ``worker`` of ``workers``: lands on that worker."""
    return local_key(f"users@{partition}", worker, workers)


class ShardRouter:
    """``flat_map`` mapper: a parsed batch -> one ``(partition, epoch, items)`` per shard it touches.

    An item's shard is :func:`shard_of` its id (field ``id_field`` of the item); with
    ``shards == 0`` each id is its own key. Order within a shard's list is the
    batch's order, so each entity's items keep their arrival order.
    """

    __slots__ = ("shards", "keys", "id_field", "touch_all")

    def __init__(self, shards: int, id_field: int = 0, touch_all: bool = False) -> None:
        """``touch_all``: the first call also sends every shard an empty batch, so that every
        shard's logic runs in the execution's first epoch (to republish its state)."""
        if shards < 0:
            raise ValueError("user shards must be >= 0")
        if touch_all and not shards:
            raise ValueError("touch_all needs shards: keys of single entities cannot be listed")
        self.shards = shards
        self.keys = [shard_key(i) for i in range(shards)]
        self.id_field = id_field
        self.touch_all = touch_all

    def __call__(self, batch: ParsedBatch) -> Sequence[tuple[str, ShardItems]]:
        groups: dict[str, list[Any]] = {}
        n, keys, crc32, f = self.shards, self.keys, zlib.crc32, self.id_field
        for ev in batch.events:
            key = keys[crc32(ev[f].encode()) % n] if n else ev[f]
            group = groups.get(key)
            if group is None:
                groups[key] = [ev]
            else:
                group.append(ev)
        if self.touch_all:
            self.touch_all = False
            for key in keys:
                groups.setdefault(key, [])
        partition, epoch = batch.partition, batch.epoch
        return [(key, (partition, epoch, group)) for key, group in groups.items()]


class MarkingShardRouter(ShardRouter):
    """:class:`ShardRouter` for the sweeper (docs/semantics/listeners.md 6, ``operators.user_stage``): every
    batch reaches every shard, as ``(partition, epoch, items, mark)`` with the batch's
    ``source_mark`` (an empty list for a shard it has no items for), so each shard learns
    how far every input partition has been processed after it has applied that
    partition's items up to there (one partition's items reach a shard in order)."""

    __slots__ = ("quiet_after_s",)

    def __init__(self, shards: int, quiet_after_s: float | None, id_field: int = 0) -> None:
        if shards < 1:
            raise ValueError("the sweeper needs user shards (>= 1): keys of single entities cannot be listed")
        super().__init__(shards, id_field)
        self.quiet_after_s = quiet_after_s

    def __call__(self, batch: ParsedBatch) -> Sequence[tuple[str, ShardItems]]:
        keys, crc32, f, n = self.keys, zlib.crc32, self.id_field, self.shards
        groups: list[list[Any]] = [[] for _ in keys]
        for ev in batch.events:
            groups[crc32(ev[f].encode()) % n].append(ev)
        partition, epoch, mark = batch.partition, batch.epoch, batch.source_mark(self.quiet_after_s)
        return [(key, (partition, epoch, group, mark)) for key, group in zip(keys, groups)]


class PartitionShardRouter:
    """``flat_map`` mapper: a parsed batch -> one ``(partition, epoch, items)``, keyed by its source
    partition on the worker that read it (:func:`partition_key`): nothing is done per event, and
    the item never leaves its worker. Needs an input whose partitions hold whole entities (the
    topic keyed by entity, as docs/semantics/listeners.md 3 and boards.md 2 require)."""

    __slots__ = ("workers", "touched")

    def __init__(self, workers: int, touch_all: bool = False) -> None:
        """``workers``: in all processes (a key's worker is its hash modulo that). ``touch_all``:
        each partition's first batch reaches its shard even without events, so that every shard's
        logic runs in the execution's first epoch (to republish its state): every partition sends a
        batch in every epoch (``connectors.source_batch``), so each shard's comes then."""
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.workers = workers
        self.touched: set[str] | None = set() if touch_all else None  # the partitions already touched

    def __call__(self, batch: ParsedBatch) -> Sequence[tuple[str, ShardItems]]:
        touched = self.touched
        if touched is not None and batch.partition not in touched:
            touched.add(batch.partition)  # one worker reads a partition: no other thread adds it
        elif not batch.events:
            return ()
        return ((partition_key(batch.partition, batch.worker, self.workers),
                 (batch.partition, batch.epoch, batch.events)),)
