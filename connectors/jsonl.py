"""JSON Lines input and dead-letter output.

Input: each file is one source partition, named by the path as given; its offset is
the 0-based line number (SEMANTICS.md section 5). The resume state also keeps the
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

from rankflow.connectors.source_batch import BarrierPartition, PositionOutOfRange, SourceBatch
from rankflow.operators.metrics import METRICS
from rankflow.state.events import DeadLetter

log = logging.getLogger("rankflow.jsonl")

CHUNK_BYTES = 1 << 18


class FilePosition(NamedTuple):
    line: int
    byte: int


class _JsonlPartition(BarrierPartition[FilePosition]):
    def __init__(self, path: str, resume: FilePosition | None, follow: bool, chunk_bytes: int) -> None:
        super().__init__()
        self._chunk_bytes = chunk_bytes
        self._path = path
        self._file = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._pos = resume or FilePosition(0, 0)
        self._check_resume()
        self._file.seek(self._pos.byte)
        self._follow = follow
        self._rest = b""  # an incomplete last line, waiting for its newline

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
        raise PositionOutOfRange(
            f"jsonl {self._path}: the recovery state resumes at line {self._pos.line} (byte {byte}), but the file "
            f"has {size} bytes{'' if byte > size else ' and no line ends there'} (was it truncated or replaced?): "
            "start over with an empty --recovery-dir, or give the file the state came from")

    def read(self) -> SourceBatch | None:
        while True:
            chunk = self._file.read(self._chunk_bytes)
            if not chunk:
                if self._follow:
                    return None  # a partial last line waits for its newline
                if self._rest:  # a last line without a newline is still a line
                    last, self._rest = self._rest, b""
                    return self._emit([last], len(last))
                raise StopIteration
            data = self._rest + chunk
            lines = data.split(b"\n")
            self._rest = lines.pop()
            if lines:
                return self._emit(lines, len(data) - len(self._rest))

    def _emit(self, lines: list[bytes], consumed: int) -> SourceBatch:
        start = self._pos.line
        self._pos = FilePosition(start + len(lines), self._pos.byte + consumed)
        METRICS.input_lag[self._path] = os.fstat(self._file.fileno()).st_size - self._pos.byte
        return SourceBatch(self._path, start, self._pos.line, lines)

    def empty_batch(self) -> SourceBatch:
        return SourceBatch(self._path, self._pos.line, self._pos.line, [])

    def position_state(self) -> FilePosition:
        return self._pos

    def close(self) -> None:
        self._file.close()


class JsonlSource(FixedPartitionedSource[SourceBatch, FilePosition]):
    """One partition per file. ``follow=True`` tails the files instead of ending."""

    def __init__(self, paths: list[str], follow: bool = False, chunk_bytes: int = CHUNK_BYTES) -> None:
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            raise FileNotFoundError(f"input file not found: {', '.join(missing)}")
        self._paths = list(paths)
        self._follow = follow
        self._chunk_bytes = chunk_bytes

    def list_parts(self) -> list[str]:
        return self._paths

    def build_part(
        self, step_id: str, for_part: str, resume_state: FilePosition | None
    ) -> _JsonlPartition:
        if resume_state is not None:
            log.info("%s: resuming at line %s", for_part, resume_state.line)
        return _JsonlPartition(for_part, resume_state, self._follow, self._chunk_bytes)


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
