"""JSON Lines input and dead-letter output.

Input: each file is one source partition, named by the path as given; its offset is
the 0-based line number (docs/semantics/listeners.md section 5). The resume state also keeps the
byte offset, so a restart seeks instead of re-reading the file.

Dead letters: one JSON object per line, ``{"reason", "detail", "position", "raw"}``.
The sink buffers an epoch's dead letters and writes them sorted by position when the
epoch closes, so a replay of the same log writes the same file. With recovery the
sink resumes at the byte offset of its last completed epoch, truncating anything a
crashed execution wrote after it: dead letters are written exactly once.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import NamedTuple

from bytewax.inputs import FixedPartitionedSource
from bytewax.outputs import FixedPartitionedSink, StatefulSinkPartition

from rankflow.connectors.source_batch import BarrierPartition, InputChanged, PositionOutOfRange, SourceBatch
from rankflow.operators.metrics import METRICS
from rankflow.state.events import DeadLetter

log = logging.getLogger("rankflow.jsonl")

CHUNK_BYTES = 1 << 18
MAX_LINE_BYTES = 1 << 20
"""The default ``--max-line-bytes``: a longer line is not read but dead-lettered (``invalid_json``)."""
RAW_KEPT = 1024
"""The bytes of an over-long line kept as its dead letter's ``raw``: enough to tell what it was."""
CHUNKS_PER_READ = 16
"""Chunks one :meth:`_JsonlPartition.read` may take in a line that does not end: then it hands back
an empty batch, so barriers go on closing while a very long line is skipped."""
_TAIL = 4096
"""The last bytes read, looked at again before each read: a followed file must only grow. Dozens of
lines, so that a file written again from its start differs there, unless it holds the same lines."""


class FilePosition(NamedTuple):
    line: int
    byte: int


def _prefix(pieces: list[bytes], size: int) -> bytes:
    """The first ``size`` bytes of ``pieces`` joined, without joining the rest."""
    kept: list[bytes] = []
    for piece in pieces:
        if size <= 0:
            break
        kept.append(piece[:size])
        size -= len(piece)
    return b"".join(kept)


class _JsonlPartition(BarrierPartition[FilePosition]):
    """One file, read in chunks, in time linear in its size and memory bounded by the line cap.

    The incomplete last line is kept as the list of its pieces (``_parts``), joined once when
    its newline arrives: growing one bytes object chunk by chunk would copy a long line once
    per chunk (quadratic: 26 s for a 100 MB line). A line longer than ``max_line_bytes`` stops
    being kept (only its first :data:`RAW_KEPT` bytes are) and becomes a dead letter of its own
    (:attr:`SourceBatch.refused`) when it ends; so the buffer never holds more than the cap
    plus one chunk.
    """

    def __init__(self, path: str, resume: FilePosition | None, follow: bool, chunk_bytes: int,
                 max_line_bytes: int = MAX_LINE_BYTES) -> None:
        super().__init__()
        self._chunk_bytes = chunk_bytes
        self._cap = max_line_bytes
        self._keep = min(RAW_KEPT, max_line_bytes)
        self._path = path
        self._file = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._pos = resume or FilePosition(0, 0)
        self._check_resume()
        byte = self._pos.byte
        self._tail = os.pread(self._file.fileno(), min(byte, _TAIL), byte - min(byte, _TAIL))
        # the last bytes read (up to _TAIL), which must still be there at the next read
        self._file.seek(byte)
        self._follow = follow
        self._size_at_start = os.fstat(self._file.fileno()).st_size  # where the end was (operators.catch_up)
        self._caught_up = False  # the reader passed it (or reached the file's end): said once
        self._parts: list[bytes] = []  # the incomplete last line's pieces, waiting for its newline
        self._partial = 0  # that line's length so far (beyond the cap its pieces stop growing)

    @property
    def buffered_bytes(self) -> int:
        """The bytes held of the incomplete last line: at most the cap (between reads)."""
        return sum(map(len, self._parts))

    def _truncated_or_replaced(self, where: str, found: str, advice: str,
                               error: type[PositionOutOfRange] = InputChanged) -> PositionOutOfRange:
        """The one error for a file that is no longer the one its position was read from."""
        return error(f"jsonl {self._path}: {where} line {self._pos.line} (byte {self._pos.byte}), but "
                                  f"{found} (was it truncated or replaced?): {advice}")

    def _check_resume(self) -> None:
        """A resume position must end a line of this file: else the file was truncated or replaced."""
        byte = self._pos.byte
        if byte == 0:
            return
        size = os.fstat(self._file.fileno()).st_size
        if byte <= size:
            self._file.seek(byte - 1)
            if self._file.read(1) == b"\n":
                return
        self._file.close()
        raise self._truncated_or_replaced(
            "the recovery state resumes at", f"the file has {size} bytes{'' if byte > size else ' and no line ends there'}",
            "start over with an empty --recovery-dir, or give the file the state came from", PositionOutOfRange)

    def _check_unchanged(self) -> None:
        """What was read is still the file's beginning, and (followed) the path still names this file.

        A JSON Lines input only grows. Read on from the old byte offset, a truncated file
        would lose what was written again below it and cut lines in two; a file replaced
        (``mv``) would never be read again: both stop the run instead. Three system calls
        per chunk read, nothing beside a chunk's cost.
        """
        fd, read = self._file.fileno(), self._file.tell()
        here = os.fstat(fd)
        advice = ("a followed file may only grow: to read another file (or this one from its start), start a new run "
                  "on it (with an empty --recovery-dir if the run keeps one)")
        if here.st_size < read:
            raise self._truncated_or_replaced("the run has read it up to", f"the file has {here.st_size} bytes now",
                                              advice)
        if self._tail and os.pread(fd, len(self._tail), read - len(self._tail)) != self._tail:
            raise self._truncated_or_replaced("the run has read it up to", "the bytes it read there have changed",
                                              advice)
        if self._follow:
            try:
                now = os.stat(self._path)
            except FileNotFoundError:
                now = None
            if now is None or (now.st_dev, now.st_ino) != (here.st_dev, here.st_ino):
                raise self._truncated_or_replaced(
                    "the run has read it up to", "the path names another file now" if now else "the file is gone",
                    advice)

    def read(self) -> SourceBatch | None:
        self._check_unchanged()
        for _ in range(CHUNKS_PER_READ):
            chunk = self._file.read(self._chunk_bytes)
            if not chunk:
                return self._at_end()
            self._tail = chunk[-_TAIL:] if len(chunk) >= _TAIL else (self._tail + chunk)[-_TAIL:]
            lines = chunk.split(b"\n")
            if len(lines) > 1:
                return self._complete(lines, len(chunk))
            self._hold(chunk)
        return self.empty_batch()  # a long line without its end yet: an empty batch keeps the barriers going

    def _at_end(self) -> SourceBatch | None:
        if not self._caught_up:
            self._catch_up()
        if self._follow:
            return None  # a partial last line waits for its newline
        if self._parts or self._partial:  # a last line without a newline is still a line
            return self._complete([b"", b""], 0)  # as if its newline came now, with nothing after it
        raise StopIteration

    def _hold(self, piece: bytes) -> None:
        """Add a piece to the incomplete line, keeping only its beginning once it is over the cap."""
        before = self._partial
        self._partial += len(piece)
        if self._partial <= self._cap:
            self._parts.append(piece)
        elif before <= self._cap:
            self._parts = [_prefix([*self._parts, piece], self._keep)]

    def _complete(self, lines: list[bytes], chunk_size: int) -> SourceBatch:
        """Emit the lines a chunk ended: the incomplete one's end first, the chunk's last piece held."""
        rest = lines.pop()
        consumed = self._partial + chunk_size - len(rest)
        size = self._partial + len(lines[0])
        refused: list[tuple[int, str, bytes]] = []
        if size > self._cap:
            refused.append((0, self._too_long(size), _prefix([*self._parts, lines[0]], self._keep)))
        elif self._parts:
            lines[0] = b"".join([*self._parts, lines[0]])
        if chunk_size > self._cap:  # only then can a line inside the chunk be too long
            refused += [(i, self._too_long(len(line)), line[:self._keep])
                        for i, line in enumerate(lines) if i and len(line) > self._cap]
        self._parts, self._partial = [], 0
        if rest:
            self._hold(rest)
        return self._emit(lines, consumed, refused)

    def _too_long(self, size: int) -> str:
        return (f"the line is {size} bytes long, more than --max-line-bytes ({self._cap}): not read; raw holds its "
                f"first {self._keep} bytes")

    def _emit(self, lines: list[bytes], consumed: int, refused: list[tuple[int, str, bytes]]) -> SourceBatch:
        start = self._pos.line
        self._pos = FilePosition(start + len(lines), self._pos.byte + consumed)
        METRICS.input_lag[self._path] = os.fstat(self._file.fileno()).st_size - self._pos.byte
        if not self._caught_up and self._pos.byte >= self._size_at_start:
            self._catch_up()
        if not refused:
            return SourceBatch(self._path, start, self._pos.line, lines)
        skip = {i for i, _, _ in refused}
        kept = [i for i in range(len(lines)) if i not in skip]
        batch = SourceBatch(self._path, start, self._pos.line, [lines[i] for i in kept], [start + i for i in kept])
        batch.refused = [(start + i, detail, raw) for i, detail, raw in refused]
        return batch

    def _catch_up(self) -> None:
        """The reader is at the end the file had at start (or at its end): this line is where the input
        ended when the run first looked, in the partition's own positions (``operators.catch_up``)."""
        METRICS.catch_up.end_seen(self._path, self._pos.line)
        self._caught_up = METRICS.catch_up.read_to(self._path, self._pos.line)

    def empty_batch(self) -> SourceBatch:
        return SourceBatch(self._path, self._pos.line, self._pos.line, [])

    def position_state(self) -> FilePosition:
        return self._pos

    def close(self) -> None:
        self._file.close()


def line_end(path: str) -> int:
    """The position after the file's last complete line: its count of newlines, the offset
    the source reaches at its end (positions are 0-based line numbers). A last line without
    its newline is not counted: a followed file's run waits for it (an ``--until-eof`` run
    counts it, and then stands one past this end). Read in chunks: memory stays small
    whatever the file's size."""
    lines = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES * 4):
            lines += chunk.count(b"\n")
    return lines


class JsonlSource(FixedPartitionedSource[SourceBatch, FilePosition]):
    """One partition per file. ``follow=True`` tails the files instead of ending."""

    def __init__(self, paths: list[str], follow: bool = False, chunk_bytes: int = CHUNK_BYTES,
                 max_line_bytes: int = MAX_LINE_BYTES) -> None:
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            raise FileNotFoundError(f"input file not found: {', '.join(missing)}")
        self._paths = list(paths)
        self._follow = follow
        self._chunk_bytes = chunk_bytes
        self._max_line_bytes = max_line_bytes

    def list_parts(self) -> list[str]:
        METRICS.catch_up.listed_parts(self._paths)
        return self._paths

    def build_part(
        self, step_id: str, for_part: str, resume_state: FilePosition | None
    ) -> _JsonlPartition:
        METRICS.catch_up.built_part(for_part)
        if resume_state is not None:
            log.info("%s: resuming at line %s", for_part, resume_state.line)
        return _JsonlPartition(for_part, resume_state, self._follow, self._chunk_bytes, self._max_line_bytes)


class _DeadLetterPartition(StatefulSinkPartition[DeadLetter, int]):
    def __init__(self, path: Path, resume_byte: int | None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if resume_byte:
            size = path.stat().st_size if path.exists() else None
            if size is None or size < resume_byte:
                raise PositionOutOfRange(
                    f"jsonl {path}: the recovery state continues the dead letters at byte {resume_byte}, but the "
                    f"file {'is missing' if size is None else f'has {size} bytes'}: give the run the dead-letter "
                    "file it wrote before, or start over with an empty --recovery-dir")
        self._file = open(path, "r+b" if resume_byte else "wb")  # noqa: SIM115
        if resume_byte:
            self._file.seek(resume_byte)
            self._file.truncate()
        self._pending: list[DeadLetter] = []

    def write_batch(self, values: list[DeadLetter]) -> None:
        self._pending.extend(values)

    def _flush(self) -> None:
        if self._pending:
            self._pending.sort(key=lambda d: (d.partition, d.offset))
            self._file.write(b"".join(d.to_json() + b"\n" for d in self._pending))
            self._pending.clear()
        self._file.flush()

    def snapshot(self) -> int:
        self._flush()
        return self._file.tell()

    def close(self) -> None:
        self._flush()
        self._file.close()


class JsonlDeadLetterSink(FixedPartitionedSink[DeadLetter, int]):
    """Dead letters to one JSON Lines file. Feed it ``(any_key, DeadLetter)`` pairs."""

    def __init__(self, path: str) -> None:
        self._path = Path(path)

    def list_parts(self) -> list[str]:
        return ["dead-letters"]

    def part_fn(self, item_key: str) -> int:
        return 0

    def build_part(
        self, step_id: str, for_part: str, resume_state: int | None
    ) -> _DeadLetterPartition:
        return _DeadLetterPartition(self._path, resume_state)
