"""A changelog of one user shard's records, beside Bytewax's recovery store.

Why: Bytewax stores, at every barrier, the whole snapshot of every key touched in
it. Keyed by user, that is one pickled row per user who did anything (48 s for 1M
events, most of it in the recovery store); keyed by shard, a whole shard per
barrier. Kafka Streams' changelog topics and Flink's incremental checkpoints
persist only what changed; so does this. Bytewax keeps only a small
:data:`Position` per shard, atomically with the input positions and the other
stages' state, so the one source of truth for "where a resumed run starts" stays
Bytewax's store.

The file: frames of ``(kind, length, epoch, crc32)`` + a JSON object
``{user_id: record}`` (orjson: 15 times faster to write than pickle for this
shape, measured 66 vs 898 ns per record, and loading it runs no code). An ``IMAGE`` frame holds the whole shard and starts every
file; a ``DELTA`` frame the records that changed in one barrier. A file is one
*generation*: when the deltas outgrow the image (:data:`COMPACT_FACTOR`), the next
barrier starts generation ``g + 1`` with a new image instead of appending.

The cut: :meth:`ShardChangelog.append` writes and ``fdatasync``\\ s a barrier's
frame *before* its position goes to Bytewax, so every position Bytewax committed
names bytes that are on disk. A crash may leave frames after the committed
position (barriers Bytewax will replay): :meth:`ShardChangelog.restore` cuts the
file back to the position it is given, so the restored shard is exactly the state
at the barrier the resumed run starts after. A generation replaced by a compaction
is deleted once Bytewax can no longer resume before it: once any item of a later
epoch exists (with recovery on, Bytewax's inputs do not start epoch ``E`` before
epochs below ``E`` are committed; read in ``src/inputs.rs``, the probe of
``src/worker.rs``); if that were ever wrong, a restore would fail loudly on the
missing file, never count wrong.

A copy of the recovery directory is consistent only if taken atomically (a
filesystem snapshot) or of a stopped run.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("rankflow.changelog")

IMAGE, DELTA = 0, 1
STDLIB_JSON = 2
"""Flag in a frame's kind: the payload holds an integer beyond 64 bits (a version may be
any size), which orjson neither writes nor reads back exactly: the standard library does."""
HEADER = struct.Struct("<BIQI")  # kind, payload length, epoch, crc32 of the payload
COMPACT_FACTOR = float(os.environ.get("RANKFLOW_CHANGELOG_FACTOR", 2))
"""Start a new generation when the deltas exceed this many times the image. The environment
variable exists for tests: with 0 a shard compacts as soon as its deltas pass
:data:`COMPACT_MIN_BYTES`, which happens by a point of the log whatever the machine's speed
(every change is in some delta, however the barriers cut the log), while whether twice the
image is ever passed depends on how many barriers the machine's speed made (each barrier's
frame repeats whatever it touched)."""
COMPACT_MIN_BYTES = int(os.environ.get("RANKFLOW_CHANGELOG_MIN_BYTES", 1 << 22))
"""... and at least this much, so small shards compact rarely. The environment variable
exists for tests that need many generations from a small log."""
TAG = "changelog"

Position = tuple[str, str, int, int]
"""What Bytewax stores for a shard: ``("changelog", shard name, generation, byte offset)``.
A plain tuple, so the stored state does not depend on a class's import path."""


class ChangelogCorrupt(RuntimeError):
    """The changelog does not hold what Bytewax's recovery store says it does."""


class ShardChangelog:
    """The changelog files of one shard, in ``directory``."""

    def __init__(self, directory: Path, shard: str, merge: Callable[[Any, Any], Any] | None = None) -> None:
        """``merge(record or None, frame value)``: how a frame's value for an id folds into
        the record read so far; None replaces it (frames hold whole records). A stage
        whose records grow piece by piece writes only the new pieces and merges them."""
        self.directory = directory
        self.shard = shard
        self._merge = merge
        self.generation = 0
        self.offset = 0
        self._file: Any = None
        self._image_bytes = 0
        self._delta_bytes = 0
        self._obsolete: list[tuple[int, int]] = []  # (generation, epoch it was replaced in)
        self._image_due = False  # the next append starts a generation (:meth:`start_over`)

    def _path(self, generation: int) -> Path:
        return self.directory / f"{self.shard}.g{generation}.log"

    def _generations(self) -> list[int]:
        prefix = f"{self.shard}.g"
        return sorted(int(p.name[len(prefix):-4]) for p in self.directory.glob(f"{prefix}*.log"))

    # -- restoring ----------------------------------------------------------------
    def restore(self, position: Position | None) -> dict[str, Any]:
        """The shard's records at ``position`` (None: a shard with no committed state).

        Cuts the file back to the position and removes every other generation: what
        lies beyond was written for barriers the resumed run replays.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        records: dict[str, Any] = {}
        if position is not None:
            _, _, self.generation, self.offset = position
            records = self._read(self._path(self.generation), self.offset)
        for generation in self._generations():
            if generation != self.generation or position is None:
                self._path(generation).unlink()
        if position is None:
            self.generation, self.offset = 0, 0
        else:
            self._file = open(self._path(self.generation), "r+b")  # noqa: SIM115 - closed in close()
            self._file.truncate(self.offset)
            self._file.seek(self.offset)
        return records

    def _read(self, path: Path, end: int) -> dict[str, Any]:
        if not path.exists() or path.stat().st_size < end:
            raise ChangelogCorrupt(f"{path} should hold {end} bytes (recovery state of shard {self.shard}), "
                                   f"but {'it is missing' if not path.exists() else f'has {path.stat().st_size}'}")
        records: dict[str, Any] = {}
        with open(path, "rb") as f:
            while f.tell() < end:
                kind, length, _, crc = HEADER.unpack(f.read(HEADER.size))
                payload = f.read(length)
                if len(payload) != length or zlib.crc32(payload) != crc:
                    raise ChangelogCorrupt(f"{path}: a damaged frame at byte {f.tell() - len(payload)}")
                batch = (json.loads if kind & STDLIB_JSON else orjson.loads)(payload)
                if kind & ~STDLIB_JSON == IMAGE:
                    records = {}
                    self._image_bytes, self._delta_bytes = length, 0
                else:
                    self._delta_bytes += length
                merge = self._merge
                if merge is None:
                    records.update(batch)
                else:
                    for key, value in batch.items():
                        records[key] = merge(records.get(key), value)
            if f.tell() != end:
                raise ChangelogCorrupt(f"{path}: no frame ends at byte {end}")
        return records

    # -- writing ------------------------------------------------------------------
    def append(self, changed: dict[str, Any] | bytes, everything: Callable[[], dict[str, Any] | bytes],
               epoch: int, sync: bool = True) -> Position:
        """Make a barrier's changes durable; the position Bytewax stores for it.

        ``everything()`` is the whole shard, written as a new generation's image when
        the file has none yet or its deltas outgrew its image. Either may come as the frame's
        JSON already (bytes, empty when nothing changed): the player stage's kernel writes its
        frames and images from its own records (``native/src/changes.rs``). ``sync`` False: a
        delta frame is written but not yet ``fdatasync``\\ ed (:attr:`unsynced`); the caller calls
        :meth:`sync` before Bytewax can commit the position (``connectors.barrier_sync`` syncs a
        worker's shards of a barrier together: one journal commit, not one each).
        """
        if self._file is None or self._image_due \
                or self._delta_bytes > max(COMPACT_FACTOR * self._image_bytes, COMPACT_MIN_BYTES):
            self._start_generation(everything(), epoch)
        elif changed:
            self._delta_bytes += self._write(DELTA, changed, epoch)
            if sync:
                os.fdatasync(self._file.fileno())
            else:
                self.unsynced = True
        return (TAG, self.shard, self.generation, self.offset)

    unsynced = False
    """A frame was written with ``sync`` False and :meth:`sync` has not run since."""

    def sync(self) -> None:
        """Make the frames written with ``sync`` False durable (releases the GIL while it waits)."""
        if self.unsynced and self._file is not None:
            os.fdatasync(self._file.fileno())
        self.unsynced = False

    def start_over(self) -> None:
        """Make the next :meth:`append` start a new generation with the whole shard as its image,
        whatever its deltas weigh: what the file holds was written in another format (records of
        an earlier shape), which the new generation does not carry on. The old one stays until
        Bytewax can no longer resume before it, as after a compaction."""
        self._image_due = True

    def _start_generation(self, everything: dict[str, Any] | bytes, epoch: int) -> None:
        self._image_due = False
        previous = self._file
        if previous is not None:
            self.sync()
            previous.close()
            self._obsolete.append((self.generation, epoch))
        self.generation += 1
        self.offset = 0
        self._file = open(self._path(self.generation), "wb")  # noqa: SIM115 - closed in close()
        self._image_bytes, self._delta_bytes = self._write(IMAGE, everything, epoch), 0
        os.fdatasync(self._file.fileno())
        _fsync_directory(self.directory)

    def _write(self, kind: int, records: dict[str, Any] | bytes, epoch: int) -> int:
        if isinstance(records, bytes):
            payload = records
        else:
            try:
                payload = orjson.dumps(records)
            except orjson.JSONEncodeError:  # an integer beyond 64 bits
                payload, kind = json.dumps(records, separators=(",", ":")).encode(), kind | STDLIB_JSON
        self._file.write(HEADER.pack(kind, len(payload), epoch, zlib.crc32(payload)) + payload)
        self._file.flush()
        self.offset += HEADER.size + len(payload)
        return len(payload)

    def release(self, epoch: int) -> None:
        """An item of ``epoch`` exists: Bytewax can no longer resume before it, so a
        generation replaced in an earlier epoch will never be read again."""
        for generation, replaced_in in [o for o in self._obsolete if epoch > o[1]]:
            self._path(generation).unlink(missing_ok=True)
            self._obsolete.remove((generation, replaced_in))

    def close(self) -> None:
        if self._file is not None:
            self.sync()
            self._file.close()
            self._file = None


def _fsync_directory(directory: Path) -> None:
    """A new file's name is durable only once its directory is."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
