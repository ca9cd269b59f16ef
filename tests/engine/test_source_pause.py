"""A busy partition of a run with several workers asks to be woken a moment later, not at once
(``connectors.source_batch.pause_when_busy``): Bytewax's input would otherwise step without
pause while it waits for the other workers (issue 40); the read that closes an epoch sleeps
through most of the barrier's wait (``BarrierWait``)."""

from __future__ import annotations

import doctest
from datetime import UTC, datetime, timedelta

from rankflow.connectors.source_batch import BUSY_PAUSE, BarrierPartition, SourceBatch, pause_when_busy


class _Records(BarrierPartition[int]):
    """Two batches of records, then the end."""

    def __init__(self) -> None:
        super().__init__()
        self.left = 2

    def read(self) -> SourceBatch | None:
        if not self.left:
            raise StopIteration
        self.left -= 1
        return SourceBatch("p", 0, 1, [b"{}"])

    def empty_batch(self) -> SourceBatch:
        return SourceBatch("p", 0, 0, [])

    def position_state(self) -> int:
        return 0


def test_one_worker_reads_again_at_once_several_wait_a_moment() -> None:
    try:
        pause_when_busy(1)
        part = _Records()
        assert part.next_batch() and part.next_awake() is None
        pause_when_busy(4)
        before = datetime.now(UTC)
        assert part.next_batch()
        awake = part.next_awake()
        assert awake is not None and before + BUSY_PAUSE <= awake
    finally:
        pause_when_busy(1)


def test_the_read_after_the_end_sleeps_through_most_of_the_last_wait() -> None:
    """The read after the epoch's end (which Bytewax closes the epoch after) answers "not before
    most of the last wait"; reads in the middle of an epoch keep the short pause. The clocks
    are moved by hand: no test waits."""
    try:
        pause_when_busy(2, barrier_ms=1000)
        part = _Records()
        assert part.next_batch()
        soon = part.next_awake()
        assert soon is not None and soon <= datetime.now(UTC) + 10 * BUSY_PAUSE  # mid-epoch: the pause only
        assert part._wait is not None
        part._epoch_started -= 1.0  # the interval has passed: Bytewax closes the epoch after this read
        part._wait.closed_at -= 1.0
        part.snapshot()
        part._wait.closed_at -= 0.2  # ... and the next read comes 200 ms after the close
        assert part.next_batch()
        assert 0.15 < part._wait.guess_s < 0.17
        assert part.next_awake() is not None and part.next_awake() <= datetime.now(UTC) + 10 * BUSY_PAUSE
        part._epoch_started -= 1.0
        before = datetime.now(UTC)
        awake = part.next_awake()
        assert awake is not None and awake >= before + timedelta(seconds=0.15)
    finally:
        pause_when_busy(1)


def test_one_worker_never_sleeps_at_a_barrier() -> None:
    pause_when_busy(1, barrier_ms=1000)
    part = _Records()
    assert part.next_batch()
    part._epoch_started -= 5
    assert part.next_awake() is None


def test_the_wait_guess_examples_hold() -> None:
    from rankflow.connectors import source_batch

    result = doctest.testmod(source_batch)
    assert result.attempted and not result.failed
