"""A busy partition of a run with several workers asks to be woken a moment later, not at once
(``connectors.source_batch.pause_when_busy``): Bytewax's input would otherwise step without
pause while it waits for the other workers (issue 40)."""

from __future__ import annotations

from datetime import UTC, datetime

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
