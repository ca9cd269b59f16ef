"""The counter stage of every flow: partitions that apply each epoch's changes once.

Contract (``stateful_batch`` keyed by counter partition ``"0"`` .. ``"P-1"``):

* **Input**: :class:`operators.engine_types.PartitionBatch` items: a product's batch
  routed to this partition, or a barrier tick (``Tick``, nothing but its epoch) that
  every source batch sends to every partition. Bytewax hands a key all items of epoch ``e`` before any item of epoch
  ``e+1``, so the first item of a newer epoch proves epoch ``e`` is complete here.
* **State**: a :class:`Table` (what the product counts: song counts and partials,
  board entries ...), the open epoch and the last epoch closed: the identity that
  makes every epoch's changes count once (a resumed run replays exactly the epochs
  after its recovery state).
* **Output**: when epoch ``e`` closes (a later item, or end of input), the table's
  report for ``e``: one per partition per epoch, which is what the merger waits for.

The product is the table: the listener flow's :class:`operators.song_counter.SongTable`
and the boards flow's :class:`operators.board_counter.BoardTable`. This stage only
knows epochs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from bytewax.operators import StatefulBatchLogic

from rankflow.operators.engine_types import PartitionBatch, Tick

B = TypeVar("B", bound=PartitionBatch)  # a product's batch
B_contra = TypeVar("B_contra", bound=PartitionBatch, contravariant=True)
R = TypeVar("R")  # a product's partition report
R_co = TypeVar("R_co", covariant=True)


class Table(Protocol[B_contra, R_co]):
    """What a counter partition holds for one product, fed its batches, reporting its reports."""

    def stage(self, batch: B_contra) -> None:
        """Take one batch into the open epoch (never a ``Tick``: the stage keeps those)."""

    def close(self, epoch: int) -> R_co:
        """Apply the open epoch's changes and report the partition's state after them."""

    def state(self) -> Any:
        """What recovery stores (a copy: Bytewax pickles it later)."""


class CounterState(NamedTuple):
    """Recovery state of one counter partition."""

    table: Any
    open_epoch: int | None
    last_closed: int


class CounterLogic(StatefulBatchLogic[B | Tick, R, CounterState | None], Generic[B, R]):
    """Epoch bookkeeping around a :class:`Table` fed batches ``B``, reporting ``R``."""

    def __init__(self, table: Table[B, R], resume: CounterState | None, recoverable: bool) -> None:
        self.table = table
        self.recoverable = recoverable
        self.open_epoch = resume.open_epoch if resume else None
        self.last_closed = resume.last_closed if resume else 0

    @classmethod
    def builder(cls, make_table: Callable[[Any], Table[B, R]], recoverable: bool
                ) -> Callable[[CounterState | None], CounterLogic[B, R]]:
        """``make_table(stored table state or None)`` builds the partition's table."""
        return lambda resume: cls(make_table(resume.table if resume else None), resume, recoverable)

    def on_batch(self, items: list[B | Tick]) -> tuple[list[R], bool]:
        out: list[R] = []
        stage = self.table.stage
        for item in items:
            epoch = item.epoch
            if epoch != self.open_epoch:
                self._open(epoch, out)
            if type(item) is not Tick:
                stage(item)  # type: ignore[arg-type]  # B is a NamedTuple, never a Tick
        return out, StatefulBatchLogic.RETAIN

    def on_eof(self) -> tuple[list[R], bool]:
        out: list[R] = []
        if self.open_epoch is not None:
            out.append(self._close())
        return out, StatefulBatchLogic.RETAIN

    def _open(self, epoch: int, out: list[R]) -> None:
        if self.open_epoch is not None:
            if epoch < self.open_epoch:
                raise AssertionError(f"epoch {epoch} arrived after epoch {self.open_epoch}")
            out.append(self._close())
        if epoch <= self.last_closed:
            raise AssertionError(f"epoch {epoch} arrived after it was applied")
        self.open_epoch = epoch

    def _close(self) -> R:
        assert self.open_epoch is not None
        report = self.table.close(self.open_epoch)
        self.last_closed, self.open_epoch = self.open_epoch, None
        return report

    def snapshot(self) -> CounterState | None:
        # Bytewax calls this every epoch for every partition, recovery or not; the
        # copy is O(state), so it is made only when someone will read it.
        if not self.recoverable:
            return None
        return CounterState(self.table.state(), self.open_epoch, self.last_closed)
