"""Keep Rust's panic report off the terminal of a one-worker run.

Bytewax's ``run_main`` (one worker in one process) leaves Rust's default panic hook in
place, so every error raised in a step is first printed by Rust as ``thread '<unnamed>'
panicked at src/...`` (with ``RUST_BACKTRACE=1`` a backtrace of some 60 lines) before
Python sees it and rankflow prints the one line a user can act on. ``cluster_main``
installs a silent hook, but its main thread wakes every millisecond to check for signals,
which costs the default one-worker run 5-10% of its CPU (measured: 1M-event listener
backlog, about 0.6 s of system time more per run). So a one-worker run keeps ``run_main``
and passes the process's standard error through :class:`PanicFilter`, which drops exactly
the panic report's lines and forwards everything else as it comes.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from types import TracebackType

_PANIC = re.compile(rb"^thread '.*' panicked at ")
_REPORT = (b"Box<dyn Any>", b"stack backtrace:", b"note: ")
_LOG_RECORD = re.compile(rb'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|\{"time":)')  # either format (log_setup)


class PanicLines:
    """Which lines of standard error belong to a Rust panic report (and are dropped).

    A report is its ``thread '...' panicked at`` line, the payload line ``Box<dyn Any>``
    (a Python error), the backtrace (``stack backtrace:`` and indented frames), the
    ``note:`` lines, and the one empty line ``run_main`` prints after it. A log record is
    kept and does not end the report: another thread (the run's position lines,
    ``rankflow.run_log``) may log while the report is written. Any other line ends the
    report and is kept (a panic with a text payload keeps its text).

    >>> lines = PanicLines()
    >>> [line for line in [b"INFO start", b"thread '<unnamed>' panicked at src/operators.rs:198:33:",
    ...                    b"Box<dyn Any>", b"stack backtrace:", b"   0: std::panicking::begin_panic",
    ...                    b"             at /rustc/src/panicking.rs:1", b"note: Some details are omitted", b"",
    ...                    b"rankflow: stopped"] if lines.keep(line)]
    [b'INFO start', b'rankflow: stopped']
    >>> lines.keep(b"")  # an empty line outside a report is kept
    True
    >>> [line for line in [b"thread '<unnamed>' panicked at src/operators.rs:198:33:", b"stack backtrace:",
    ...                    b"  34: std::rt::lang_start", b"2026-12-04 23:37:53,770 INFO rankflow.run: caught up",
    ...                    b"  35: __libc_start_call_main", b"", b"rankflow: stopped"] if lines.keep(line)]
    [b'2026-12-04 23:37:53,770 INFO rankflow.run: caught up', b'rankflow: stopped']
    """

    def __init__(self) -> None:
        self._in_report = False

    def keep(self, line: bytes) -> bool:
        """Whether ``line`` (without its newline) is forwarded. O(len(line))."""
        if _PANIC.match(line):
            self._in_report = True
            return False
        if not self._in_report:
            return True
        if line.startswith(_REPORT) or line[:1] in (b" ", b"\t"):
            return False
        if _LOG_RECORD.match(line):
            return True
        self._in_report = False
        return line != b""  # run_main's empty line after the report


class PanicFilter:
    """While open, file descriptor 2 is a pipe read by a thread that forwards every line
    but a panic report's to the real standard error. Open it in the main thread only: the
    descriptor is the process's, so two filters must nest.

    >>> with PanicFilter():
    ...     pass
    """

    def __init__(self) -> None:
        self._saved = -1
        self._reader: threading.Thread | None = None

    def __enter__(self) -> PanicFilter:
        sys.stderr.flush()
        read, write = os.pipe()
        self._saved = os.dup(2)
        os.dup2(write, 2)
        os.close(write)
        self._reader = threading.Thread(target=self._forward, args=(read, self._saved), name="stderr", daemon=True)
        self._reader.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        sys.stderr.flush()
        os.dup2(self._saved, 2)  # closes the pipe's last write end: the reader sees its end
        assert self._reader is not None
        self._reader.join()
        os.close(self._saved)

    @staticmethod
    def _forward(read: int, out: int) -> None:
        lines, pending = PanicLines(), []  # pending: the unfinished line's pieces, joined once it ends
        while chunk := os.read(read, 65536):
            end = chunk.rfind(b"\n")
            if end < 0:
                pending.append(chunk)
                continue
            complete = (b"".join(pending) + chunk[:end]).split(b"\n")
            pending = [chunk[end + 1:]]
            _write_all(out, b"".join(line + b"\n" for line in complete if lines.keep(line)))
        rest = b"".join(pending)
        if rest and lines.keep(rest):
            _write_all(out, rest)
        os.close(read)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]
