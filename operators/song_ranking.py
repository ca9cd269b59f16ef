"""The listener flow's combiner: the merger's P song-partition reports -> one snapshot.

The merger (``operators.merger``) completes an epoch once every song partition has
reported it; :class:`SongRanking` makes the listener flow's
:class:`state.snapshot.Snapshot` from the epoch's :class:`operators.merger.Cut` and the
P :class:`operators.song_counter.PartitionReport`: the global top ``K_max`` merged from
the P local lists and the split songs (every partial added first, see
``operators.routing``), input positions (the next offset per source partition),
listener and user totals, the invariant check ``total_listeners == counted_users``, and
per song partition its lag (``partition_lag_ms``): how long after the newest input of
the cut was read the partition closed the epoch, i.e. how far its counts trailed the
input. A violation or a negative count is logged and carried in the snapshot's
``errors``; nothing is clamped. With recent plays, the window and its top
(``operators.recent_plays.combine_recent``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rankflow.operators.merger import Cut, MergerLogic, MergerState, lag_ms
from rankflow.operators.recent_plays import combine_recent
from rankflow.operators.song_counter import PartitionReport
from rankflow.state.ranking_index import COUNT_THEN_ID_DESCENDING, merge_local_tops
from rankflow.state.snapshot import Snapshot, dead_letters_by_reason

log = logging.getLogger("rankflow.merger")


class SongRanking:
    """The listener flow's combiner: the global top ``K_max`` songs and the count changes,
    and with ``recent_minutes`` the recent plays (``operators.recent_plays``)."""

    def __init__(self, k_max: int, recent_minutes: int = 0) -> None:
        self.k_max = k_max
        self.recent_minutes = recent_minutes

    def combine(self, cut: Cut, reports: dict[str, PartitionReport]) -> Snapshot:
        full = all(r.full for r in reports.values())
        split: dict[str, int] = {}
        for r in reports.values():
            for song, count in r.partials.items():
                split[song] = split.get(song, 0) + count
        split_live = COUNT_THEN_ID_DESCENDING.sort((song, count) for song, count in split.items() if count > 0)
        counts: dict[str, int] = {}
        for r in reports.values():
            counts.update(r.changed)
        counts.update(split)  # a split song's count is the sum of its partials
        total = sum(r.total for r in reports.values())
        users = sum(r.counted_users for r in reports.values())
        errors = [f"negative count: {song} = {n} (partition {p})"
                  for p, r in sorted(reports.items()) for song, n in r.negative]
        if total != users:
            errors.append(f"invariant violated: total_listeners {total} != counted_users {users}")
        recent = None
        if self.recent_minutes:
            recent, disagree = combine_recent([r.recent for _, r in sorted(reports.items())],
                                              self.recent_minutes, self.k_max)
            errors += disagree
        for e in errors:
            log.error("epoch %s: %s", cut.epoch, e)
        return Snapshot(
            snapshot_id=cut.snapshot_id,
            run=cut.run,
            epoch=cut.epoch,
            positions=cut.positions,
            total_listeners=total,
            counted_users=users,
            active_songs=sum(r.active_songs for r in reports.values()) + len(split_live),
            dead_letters=cut.dead_letters,
            dead_letters_by_reason=dead_letters_by_reason(cut.counts),
            k_max=self.k_max,
            items=merge_local_tops([*(r.top for r in reports.values()), split_live], self.k_max,
                                   COUNT_THEN_ID_DESCENDING),
            split_songs=sorted(song for song, count in split.items() if count),
            counts=counts,
            counts_full=full,
            partition_lag_ms=lag_ms(cut, reports),
            errors=errors,
            recent=recent,
        )

    def state(self) -> None:
        return None



def song_merger(song_partitions: int, k_max: int, run_token: int, recent_minutes: int = 0
                ) -> Callable[[MergerState | None], MergerLogic]:
    """The listener flow's merger logic builder (``stateful_batch``'s, and what tests build)."""
    return MergerLogic.builder(song_partitions, lambda _: SongRanking(k_max, recent_minutes), run_token)
