"""Where a song change goes: song partitions, hot-song salts, and net deltas.

**Song partitions.** A song's changes go to partition ``crc32(song) % P``: stable
across processes, runs and Python versions (unlike ``hash()``).

**Net deltas.** The user stage's changes are combined per song before they cross
to the counters (:func:`combine_song_deltas`): within one batch of the user stage's
output, hundreds of -1/+1 for a hit song become one net update. The identity of a
net update is its epoch: a counter applies an epoch's changes exactly once, since
the epochs it has applied are recorded in its state together with its counts (see
``operators.song_counter``), and a replay after a restart re-derives exactly the
epochs after that state.

**Hot songs** (``operators.song_keys``). A song changing faster than a threshold
(changes per second, as seen by one process), or named by ``--split-songs`` (split at
its first change), is *split*: new contributions to it go to one of S partial counters
``(song, salt)``, ``salt = 1 + crc32(user_id) % S``, spread over the partitions. The
user stage records the salt with the user's contribution, so the later -1 finds
its partial whatever the routing is by then; salt 0 is the ordinary counter. When
the combine step sends a salted change it also names the song in the ``split`` of
its ordinary partition's batch, in the same epoch, which from then on reports the
song's ordinary count as one more partial. Partials never enter local top-K lists;
the merger adds every partial of a song before ranking it.

**Recent plays** (``operators.recent_plays``, on unless ``--recent-minutes 0``). The
user stage's accepted starts are counted per bucket, song and epoch and go to
the song's ordinary partition, split or not (splitting is for listener counts:
recent counts are added once per epoch, not per change), as the ``starts`` of that
partition's batch. Each barrier tick is then a :class:`SongBatch` carrying its source
batch's watermark mark (:func:`song_ticks`). With recent plays off neither is sent:
the ticks are the engine's plain :class:`operators.engine_types.Tick`.

**What a counter partition gets** is one typed batch per partition per call
(:class:`SongBatch`, :class:`BoardBatch`; the runtime's cost is per item: one item per
song would be as many items as songs changed), of the engine's
:class:`operators.engine_types.PartitionBatch` shape.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from rankflow import _native
from rankflow.operators.engine_types import SourceMark, Tally
from rankflow.operators.parse import ParsedBatch
from rankflow.operators.song_keys import HOT_SONGS, HotSongs
from rankflow.state.events import DeadLetter

if TYPE_CHECKING:
    from rankflow.operators.player_stage import PlayerOutput
    from rankflow.operators.user_stage import Decision

SongDelta = tuple[str, int, int, int]
"""``(song_id, salt, delta, user_delta)``: a net change of one counter (salt 0: the song's
ordinary counter, salt >= 1: one of its partials)."""

RecentStarts = dict[int, dict[str, int]]
"""Accepted starts of an epoch: ``bucket -> song_id -> how many`` (recent plays). Per bucket,
so that song ids (whose hashes ``str`` keeps) are the keys all the way into the window's
buckets: no ``(song, bucket)`` tuple is made, hashed and compared at every step."""


class SongBatch(NamedTuple):
    """What one song partition gets from one call of the combine step (or one source batch's
    tick, with recent plays): the epoch's net ``deltas`` routed here, the ``split`` songs
    whose ordinary counter is here (from now on their ordinary count is one of their
    partials), the ``starts`` of the partition's songs, and the source batch's ``mark`` (a
    tick's, for the recent plays' watermark)."""

    epoch: int
    deltas: list[SongDelta] | tuple[()] = ()
    split: list[str] | tuple[()] = ()
    starts: RecentStarts | None = None
    mark: SourceMark | None = None


class BoardBatch(NamedTuple):
    """What a board partition gets per call of :func:`route_board_entries`: the epoch's
    entries as the per-player stage groups them, ``(player, changes)``, in the bytes the
    kernel writes (``_native.board_partitions``; ``_native.board_entries`` reads them back).
    Half of them cross to the other process with two (a player's partition is
    ``crc32(player) % P``): one bytes object pickles as a copy, where the tuples were pickled
    and made again one by one."""

    epoch: int
    entries: bytes


def song_ticks(parsed: ParsedBatch, song_partitions: int, quiet_after_s: float | None
               ) -> list[tuple[str, SongBatch]]:
    """``flat_map`` mapper: the barrier ticks of a source batch that carry its
    :meth:`ParsedBatch.source_mark` (recent plays: every song partition advances the
    same watermark), one per song partition."""
    t = SongBatch(parsed.epoch, mark=parsed.source_mark(quiet_after_s))
    return [(str(p), t) for p in range(song_partitions)]


def partition_of(song_id: str, salt: int, partitions: int) -> int:
    """The partition holding the counter ``(song_id, salt)``."""
    key = song_id if salt == 0 else f"{song_id}\x00{salt}"
    return zlib.crc32(key.encode()) % partitions


def combine_song_deltas(items: Iterable[tuple[str, Decision]], partitions: int,
                        hot: HotSongs = HOT_SONGS) -> list[tuple[str, SongBatch]]:
    """``flat_map_batch`` mapper over the user stage's output: net deltas per song.

    Sums the user shards' :class:`operators.user_stage.NetChanges` (conflicts go
    their own way) per ``(song, salt)`` and epoch, names every salted song in its
    ordinary partition's ``split``, counts accepted starts per bucket and song
    (recent plays), and groups them by song partition: one :class:`SongBatch` per
    partition and epoch.
    """
    nets: dict[int, dict[tuple[str, int], list[int]]] = {}
    recent: dict[int, dict[int, Counter[str]]] = {}  # epoch -> bucket -> song -> accepted starts
    changes: dict[str, int] = {}
    watch = hot.enabled
    for _, item in items:
        if isinstance(item, DeadLetter):
            continue
        epoch, counts, starts = item
        net = nets.get(epoch)
        if net is None:
            net = nets[epoch] = {}
        if starts:  # bucket -> songs started: counted per song in C
            counted = recent.get(epoch)
            if counted is None:
                counted = recent[epoch] = {}
            for b, songs in starts.items():
                had = counted.get(b)
                if had is None:
                    counted[b] = Counter(songs)
                else:
                    had.update(songs)
        for key, (delta, user_delta, n) in counts.items():
            acc = net.get(key)
            if acc is None:
                net[key] = [delta, user_delta]
            else:
                acc[0] += delta
                acc[1] += user_delta
            if watch:
                changes[key[0]] = changes.get(key[0], 0) + n
    hot.observe(changes)
    out: list[tuple[str, SongBatch]] = []
    for epoch, net in nets.items():
        deltas: dict[int, list[SongDelta]] = {}
        split: dict[int, list[str]] = {}
        marked: set[str] = set()
        for (song, salt), (delta, user_delta) in net.items():
            if delta or user_delta:
                p = partition_of(song, salt, partitions)
                mine = deltas.get(p)
                if mine is None:
                    deltas[p] = [(song, salt, delta, user_delta)]
                else:
                    mine.append((song, salt, delta, user_delta))
            if salt and song not in marked:
                marked.add(song)
                split.setdefault(partition_of(song, 0, partitions), []).append(song)
        started = _by_partition(recent.pop(epoch), partitions) if recent and epoch in recent else None
        if not split and not started:
            out.extend([(str(p), SongBatch(epoch, mine)) for p, mine in deltas.items()])
            continue
        for p in {*deltas, *split, *(started or ())}:
            out.append((str(p), SongBatch(epoch, deltas.get(p, ()), split.get(p, ()),
                                          None if started is None else started.get(p))))
    return out


def _by_partition(starts: dict[int, Counter[str]], partitions: int) -> dict[int, RecentStarts]:
    """Counted starts ``bucket -> song -> n`` grouped by their song's ordinary partition."""
    out: dict[int, RecentStarts] = {}
    where = _song_partitions(partitions)
    for b, counted in starts.items():
        here: dict[int, dict[str, int]] = {}
        for song, n in counted.items():
            p = where.get(song)
            if p is None:
                p = where[song] = partition_of(song, 0, partitions)
            mine = here.get(p)
            if mine is None:
                here[p] = {song: n}
            else:
                mine[song] = n
        for p, songs in here.items():
            part = out.get(p)
            if part is None:
                out[p] = {b: songs}
            else:
                part[b] = songs
    return out


_SONG_PARTITIONS: dict[int, dict[str, int]] = {}
SONG_PARTITIONS_KEPT = 200_000


def _song_partitions(partitions: int) -> dict[str, int]:
    """A cache of songs' ordinary partitions (``partition_of(song, 0, partitions)``): the same
    songs start again and again. Emptied when it holds :data:`SONG_PARTITIONS_KEPT` songs, so
    it stays small; shared by the worker threads of a process (a lost update only costs a
    recomputation)."""
    cache = _SONG_PARTITIONS.get(partitions)
    if cache is None or len(cache) >= SONG_PARTITIONS_KEPT:
        cache = _SONG_PARTITIONS[partitions] = {}
    return cache


def route_board_entries(items: Iterable[tuple[str, PlayerOutput]], partitions: int) -> list[tuple[str, BoardBatch]]:
    """``flat_map_batch`` mapper over the per-player stage's output: entries by board partition.

    A player's entries all go to partition ``crc32(player_id) % P`` (zlib's CRC-32 of the
    UTF-8 id: the same on every process and run), so each partition holds whole players and the
    P local tops of a board together hold its global top. The kernel splits each item's entries
    (``_native.board_partitions``: no Python object per entry) into one bytes object per
    partition, the calls' of one epoch joined; the stage's dead letters and tallies go their own
    ways; every other item is its ``BoardChanges`` ``(epoch, entries)``.
    """
    batches: dict[tuple[int, int], list[bytes]] = {}
    split = _native.board_partitions
    for _, item in items:
        if isinstance(item, (DeadLetter, Tally)):
            continue
        epoch, entries = item
        for p, mine in split(entries, partitions):
            batch = batches.get((epoch, p))
            if batch is None:
                batches[(epoch, p)] = [mine]
            else:
                batch.append(mine)
    return [(str(p), BoardBatch(epoch, mine[0] if len(mine) == 1 else b"".join(mine)))
            for (epoch, p), mine in batches.items()]
