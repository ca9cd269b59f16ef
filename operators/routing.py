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

**Hot songs.** A song changing faster than a threshold (changes per second, as seen
by one process), or named by ``--split-songs`` (split at its first change), is *split*: new contributions to it go to one of S partial counters
``(song, salt)``, ``salt = 1 + crc32(user_id) % S``, spread over the partitions. The
user stage records the salt with the user's contribution, so the later -1 finds
its partial whatever the routing is by then; salt 0 is the ordinary counter. When
the combine step sends a salted change it also sends a *split marker* to the song's
ordinary partition, in the same epoch, which from then on reports the song's
ordinary count as one more partial. Partials never enter local top-K lists; the
merger adds every partial of a song before ranking it.

**Recent plays** (``operators.recent_plays``, on unless ``--recent-minutes 0``). The
user stage's accepted starts are counted per ``(song, bucket)`` and epoch and go to
the song's ordinary partition, split or not (splitting is for listener counts:
recent counts are added once per epoch, not per change), as one ``RECENT_STARTS``
entry per partition beside the deltas. Each barrier tick carries its source batch's
watermark mark as ``(partition, SOURCE_MARK, mark, 0)``. With recent plays off
neither is sent: the ticks carry nothing, as before.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterable
from typing import Any

from rankflow.operators.player_stage import BoardChanges
from rankflow.state.events import DeadLetter
from rankflow.state.window_rules import SourceMark

SongDelta = tuple[str, int, Any, int]
"""``(song_id, salt, delta, user_delta)``; a negative ``salt`` marks another entry:
:data:`SPLIT_MARKER` ``(song_id, SPLIT_MARKER, 0, 0)``, :data:`RECENT_STARTS`
``("", RECENT_STARTS, {(song_id, bucket): starts}, 0)`` (the partition's songs),
:data:`SOURCE_MARK` ``(partition, SOURCE_MARK, SourceMark, 0)``."""

CounterBatch = tuple[int, list[SongDelta] | tuple[()]]
"""``(epoch, deltas)``: what a song partition gets, one item per partition per call of
the combine step (the runtime's cost is per item: one item per song would be as many
items as songs changed). A barrier tick is a batch with no deltas."""

SPLIT_MARKER = -1
RECENT_STARTS = -2
SOURCE_MARK = -3


def tick(epoch: int) -> CounterBatch:
    return (epoch, ())


def marked_tick(epoch: int, mark: SourceMark) -> CounterBatch:
    """A barrier tick that carries its source batch's watermark mark (recent plays)."""
    return (epoch, [(mark.partition, SOURCE_MARK, mark, 0)])


def partition_of(song_id: str, salt: int, partitions: int) -> int:
    """The partition holding the counter ``(song_id, salt)``."""
    key = song_id if salt == 0 else f"{song_id}\x00{salt}"
    return zlib.crc32(key.encode()) % partitions


def user_salt(user_id: str, salts: int) -> int:
    return 1 + zlib.crc32(user_id.encode()) % salts


class HotSongs:
    """Songs this process routes to salted partial counters (sticky once hot).

    Fed by :func:`combine_song_deltas` with the number of changes per song; every
    ``window_s`` the songs that changed at least ``threshold`` times per second
    join the set. The set is only a routing hint: counts are exact whatever it
    holds, and different processes may disagree.
    """

    def __init__(self, threshold_per_s: float = 0.0, salts: int = 4, window_s: float = 1.0,
                 always: frozenset[str] = frozenset()) -> None:
        self.configure(threshold_per_s, salts, window_s, always)

    def configure(self, threshold_per_s: float, salts: int, window_s: float = 1.0,
                  always: frozenset[str] = frozenset()) -> None:
        """``always``: songs split at their first change whatever their rate (``--split-songs``):
        a deterministic trigger for songs known to be hot, and for tests."""
        if salts < 1:
            raise ValueError("salts must be >= 1")
        self.threshold_per_s = threshold_per_s
        self.salts = salts
        self.window_s = window_s
        self.always = frozenset(always)
        self.hot: set[str] = set()
        self._window: dict[str, int] = {}
        self._window_start = time.monotonic()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.threshold_per_s > 0 or bool(self.always)

    def observe(self, changes: dict[str, int]) -> None:
        if not self.enabled:
            return
        if self.always:
            self.hot.update(song for song in changes if song in self.always)
        if self.threshold_per_s <= 0:
            return
        with self._lock:
            window = self._window
            for song, n in changes.items():
                window[song] = window.get(song, 0) + n
            elapsed = time.monotonic() - self._window_start
            if elapsed >= self.window_s:
                limit = self.threshold_per_s * elapsed
                self.hot.update(s for s, n in window.items() if n >= limit)
                self._window = {}
                self._window_start = time.monotonic()


HOT_SONGS = HotSongs()
"""The process-wide hot-song set, configured by the runner."""


def combine_song_deltas(items: Iterable[tuple[str, object]], partitions: int,
                        hot: HotSongs = HOT_SONGS) -> list[tuple[str, CounterBatch]]:
    """``flat_map_batch`` mapper over the user stage's output: net deltas per song.

    Sums the user shards' :class:`operators.user_stage.NetChanges` (conflicts go
    their own way) per ``(song, salt)`` and epoch, adds a split marker for every
    salted song, counts accepted starts per ``(song, bucket)`` (recent plays), and
    groups them by song partition: one :data:`CounterBatch` per partition and epoch.
    """
    nets: dict[int, dict[tuple[str, int], list[int]]] = {}
    recent: dict[int, Counter[tuple[str, int]]] = {}  # epoch -> (song, bucket) -> accepted starts
    changes: dict[str, int] = {}
    watch = hot.enabled
    for _, item in items:
        if item.__class__ is DeadLetter:
            continue
        epoch, counts, starts = item  # type: ignore[misc]
        net = nets.get(epoch)
        if net is None:
            net = nets[epoch] = {}
        if starts:  # counted per (song, bucket) in C
            counted = recent.get(epoch)
            if counted is None:
                counted = recent[epoch] = Counter()
            counted.update(starts)
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
    out: list[tuple[str, CounterBatch]] = []
    for epoch, net in nets.items():
        batches: dict[int, list[SongDelta]] = {}
        marked: set[str] = set()
        for (song, salt), (delta, user_delta) in net.items():
            if delta or user_delta:
                batches.setdefault(partition_of(song, salt, partitions), []).append((song, salt, delta, user_delta))
            if salt and song not in marked:
                marked.add(song)
                batches.setdefault(partition_of(song, 0, partitions), []).append((song, SPLIT_MARKER, 0, 0))
        if recent and epoch in recent:
            for p, starts in _by_partition(recent.pop(epoch), partitions).items():
                batches.setdefault(p, []).append(("", RECENT_STARTS, starts, 0))
        out.extend((str(p), (epoch, deltas)) for p, deltas in batches.items())
    return out


def _by_partition(starts: Counter[tuple[str, int]], partitions: int) -> dict[int, dict[tuple[str, int], int]]:
    """Counted starts ``(song, bucket) -> n`` grouped by their song's ordinary partition."""
    out: dict[int, dict[tuple[str, int], int]] = {}
    where = _song_partitions(partitions)
    for key, n in starts.items():
        song = key[0]
        p = where.get(song)
        if p is None:
            p = where[song] = partition_of(song, 0, partitions)
        mine = out.get(p)
        if mine is None:
            out[p] = {key: n}
        else:
            mine[key] = n
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


BoardBatch = tuple[int, list[tuple[str, tuple]] | tuple[()]]
"""``(epoch, entries)``: what a board partition gets per call of :func:`route_board_entries`;
entries as the per-player stage groups them, ``(player, changes)``."""


def route_board_entries(items: Iterable[tuple[str, object]], partitions: int) -> list[tuple[str, BoardBatch]]:
    """``flat_map_batch`` mapper over the per-player stage's output: entries by board partition.

    A player's entries all go to partition ``crc32(player_id) % P`` (the same on every
    process and run), so each partition holds whole players and the P local tops of
    a board together hold its global top.
    """
    batches: dict[tuple[int, int], list[tuple[str, tuple]]] = {}
    crc32 = zlib.crc32
    for _, item in items:
        if item.__class__ is not BoardChanges:  # dead letters and tallies go their own ways
            continue
        epoch, entries = item  # type: ignore[misc]
        for entry in entries:
            key = (epoch, crc32(entry[0].encode()) % partitions)
            batch = batches.get(key)
            if batch is None:
                batches[key] = [entry]
            else:
                batch.append(entry)
    return [(str(p), (epoch, entries)) for (epoch, p), entries in batches.items()]
