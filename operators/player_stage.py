"""The per-player stage: each match result counted once (``stateful_batch`` keyed by player).

Contract:

* **Input**: ``(source partition, epoch, results)`` items, results in arrival order
  per player (the input is keyed by ``player_id``, so a player's results come from
  one source partition along one path), keyed by input partition, by player shard or by
  player (``--shard-by``, ``--user-shards``; sharding and recovery: ``operators.keyed_shards``).
* **State**: per player the record of ``state.board_rules``: the newest receipt
  ``R``, the accepted results still inside the 24 h identity window, and the
  player's score and ``reached_at`` ingredients on each board, as bytes the Rust
  kernel reads and writes (``state.board_rules.apply_result``). With player shards
  the changelog gets, per barrier, only the pieces of records that changed, merged back
  on restore (``state.board_rules.merge_piece``): the kernel notes each result into the
  shard's ``_native.PlayerChanges`` and writes the frame's JSON, and the images', from its
  own records (``native/src/changes.rs``), no Python object per changed player.
* **Output**, keyed like the input: one :class:`BoardChanges` per call with the
  board entries the call's accepted results changed (docs/semantics/boards.md sections 2 to 4),
  a ``DeadLetter`` for every ``too_old``, ``in_future`` or ``conflict`` result, and a
  ``Tally`` of the call's duplicates (they change nothing; the merger puts their
  running total in the snapshot, :data:`VERDICTS` in the metrics). A resumed run
  whose Redis lost the boards (``republish``) first emits every record's entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from rankflow import _native
from rankflow.connectors.changelog import Position
from rankflow.operators.keyed_shards import RESUMED, ShardLogic, ShardSnapshot
from rankflow.operators.engine_types import MERGER_KEY, Tally
from rankflow.operators.metrics import METRICS
from rankflow.state.board_rules import (DETAILS, Entry, Span, Verdict, forget_expired, loaded, merge_piece, rules,
                                        standings, stored)
from rankflow.state.events import DeadLetter
from rankflow.state.score_events import GroupedScoreEvent, ScoreEvent

ScoreBatch = tuple[str, int, list[ScoreEvent]]
"""``(source partition, epoch, results)``."""

ACCEPTED, DUPLICATE = Verdict.ACCEPTED, Verdict.DUPLICATE

VERDICTS: dict[str, int] = {}
"""Per-process tally of what results did (accepted, duplicate, conflict ...), for metrics
(the boards flow makes it ``METRICS.verdicts``)."""


PlayerChanges = tuple[str, tuple[Entry, ...]]
"""``(player_id, changes)``: a player's entries after an accepted result, each change a
``state.board_rules.Entry`` ``(game_id, board, score, reached_at, new)``."""


class BoardChanges(NamedTuple):
    """A call's board entries in ``epoch``: per accepted result ``(player, changes)``, the
    changes as ``state.board_rules.apply_result`` gives them, ``(game, board, score,
    reached_at, new)`` (grouped by player: routing and counting look at the player once)."""

    epoch: int
    entries: list[PlayerChanges]


PlayerOutput = BoardChanges | DeadLetter | Tally
"""What the per-player stage emits."""


class PlayerShardLogic(ShardLogic):
    """One key per player shard: each of the shard's players and their record."""

    __slots__ = ("republish", "duplicates", "noted", "seasons", "apply_all")

    merge = staticmethod(merge_piece)  # changelog frames hold the pieces of records that changed
    grouped_sync = True  # a worker's shards fdatasync a barrier's frames together (connectors.barrier_sync)

    def __init__(self, resume: Position | ShardSnapshot | None, changelog: Path | None, shards: int,
                 whole: bool = False, republish: bool = False, seasons: Sequence[Span] = ()) -> None:
        """``republish``: the first call emits every entry of every record (Redis lost the
        boards while the run was down: see ``runner``; the router makes every shard run).
        ``seasons``: the run's seasons, whose boards results played in them enter too.
        A run that groups its boards (``--group-by``) hands each result with a ninth field, its
        group's game key (``state.score_events.GroupedScoreEvent``), which the kernel reads."""
        super().__init__(resume, changelog, shards, whole)
        self.republish = republish
        self.seasons = tuple(seasons)
        # the kernel's rules (state.board_rules.apply_result), a batch of results a call
        self.apply_all = rules(self.seasons).apply_all
        # with a changelog: the players that changed since the last barrier, and what did (the kernel's)
        self.noted: _native.PlayerChanges | None = None if self.changed is None else _native.PlayerChanges()
        self.duplicates = 0  # in this call: the merger puts their running total in the snapshot

    def on_batch(self, batches: list[ScoreBatch]) -> tuple[list[Any], bool]:
        """Bytewax hands ``on_batch`` the items of one epoch at a time."""
        if RESUMED in self.records and batches[0][2]:
            self._rename_resumed(batches[0][2][0][2])
        out: list[Any] = []
        epoch = batches[0][1]
        entries: list[PlayerChanges] = []
        if self.republish:
            self.republish = False
            entries = [(player, tuple((game, board, score, at, False) for game, board, score, at in standings(record)))
                       for player, record in self.records.items()]
        for partition, batch_epoch, results in batches:
            if batch_epoch != epoch:  # not what Bytewax does; if it ever did, keep epochs apart
                out.append(BoardChanges(epoch, entries))
                entries, epoch = [], batch_epoch
            self._apply(partition, epoch, results, entries, out)
        self._saw_epoch(epoch)
        if entries:
            out.append(BoardChanges(epoch, entries))
        if self.duplicates:
            out.append(Tally(epoch, {"duplicates": self.duplicates}))
            self.duplicates = 0
        if not self.records:
            return out, True  # discarded: Bytewax will not snapshot it, so its worker must not wait on it
        self._expect(epoch)  # its snapshot of ``epoch`` will come: the worker's frames synced together
        return out, False

    def _apply(self, partition: str, epoch: int, results: list[ScoreEvent] | list[GroupedScoreEvent],
               entries: list[PlayerChanges], out: list[Any]) -> None:
        """A batch's results, each through the kernel's rules whole: the kernel reads its fields,
        and its group when the run groups its boards (a ninth field, docs/semantics/boards.md 10),
        so one loop serves both kinds of run, and notes the changes for the changelog; only a dead
        letter looks at fields here."""
        self.source = partition  # names a partition's shard (keyed by input partition)
        # the kernel's loop (BoardRules.apply_all): records looked up and put back, entries appended,
        # verdicts counted into VERDICTS, with no Python bytecode per result
        duplicates, refused = self.apply_all(self.records, results, entries, VERDICTS, self.noted)
        self.duplicates += duplicates
        for verdict, event in refused:
            out.append(DeadLetter(verdict, DETAILS[verdict], partition, event[6], event[7], epoch))

    def _changes(self) -> bytes:
        """The barrier's frame, as the kernel writes it; records resumed from an earlier form
        (``_resume_legacy`` puts them in :attr:`changed`) written whole."""
        noted = self.noted
        assert noted is not None  # a changelog has a snapshot call this
        for player in self.changed or ():
            noted.mark_whole(player)
        return noted.frame(self.records)

    def _image(self) -> bytes:
        return _native.board_image(self.records)

    def _load(self, flat: dict[str, Any]) -> None:
        super()._load({player: forget_expired(loaded(record)) for player, record in flat.items()})

    def _flat(self, ids: Iterable[str]) -> dict[str, Any]:
        records = self.records
        return {i: stored(records[i]) for i in ids}


def select_tallies(items: list[tuple[str, Any]]) -> list[tuple[str, Tally]]:
    """``flat_map_batch`` mapper: the stage's counts, for the merger."""
    return [(MERGER_KEY, t) for _, t in items if t.__class__ is Tally]


def select_dead_letters(items: list[tuple[str, Any]]) -> list[tuple[str, DeadLetter]]:
    """``flat_map_batch`` mapper: the results the rules rejected, for the dead-letter output."""
    dead = [(d.partition, d) for _, d in items if d.__class__ is DeadLetter]
    for _, d in dead:
        METRICS.dead_letters[d.reason] += 1
    return dead
