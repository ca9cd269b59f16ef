"""The player shards of a worker fdatasync a barrier's changelog frames together
(``connectors.barrier_sync``, ``operators.keyed_shards.ShardLogic.grouped_sync``).

The rule that keeps a resumed run exact: no snapshot returns a position whose frame is not on
disk unless a shard still due in that epoch will sync it before Bytewax commits (Bytewax commits
an epoch after every snapshot of it returned, and snapshots every key it woke in the epoch and
did not discard). The bytes are those of a sync per snapshot (the code before), so a recovery
directory written before resumes as it is.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from rankflow.connectors import barrier_sync
from rankflow.connectors.barrier_sync import BarrierSync
from rankflow.operators.keyed_shards import shard_of
from rankflow.operators.player_stage import PlayerShardLogic
from tests.boards.test_packed_records import (FAST, PARTITION, PLAYERS, apply_result, events_of, fold, in_effect,
                                              score_logs)

SHARDS = 4  # PLAYERS fall in three different shards of four (the fourth gets only empty batches)


class SyncEach(PlayerShardLogic):
    """The stage as the code before ran it: each snapshot syncs its own frame."""

    grouped_sync = False


def test_the_players_fall_in_several_shards():
    assert len({shard_of(p, SHARDS) for p in PLAYERS}) == len(PLAYERS)


def test_the_player_stage_groups_its_syncs():
    assert PlayerShardLogic.grouped_sync and not SyncEach.grouped_sync


@FAST
@given(score_logs(), st.data())
def test_no_snapshot_returns_an_unsynced_frame_that_no_due_shard_will_sync(lines, data):
    """Generated logs cut into barriers, the results routed to shards by player, every shard also
    woken with an empty batch now and then (a shard with no players is discarded, never
    snapshotted), the snapshots of a barrier in any order: whenever a snapshot returns while a
    frame is unsynced, a shard kept in that epoch has still to snapshot; once the last one did,
    every frame is on disk; and the files, positions and restored records are those of a sync per
    snapshot."""
    barrier_sync._LOCAL.group = BarrierSync()  # this example's worker
    events = events_of(lines)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(events) - 1), max_size=5)) if len(events) > 1 else set())
    with tempfile.TemporaryDirectory() as tmp:
        grouped_dir, each_dir = Path(tmp, "grouped"), Path(tmp, "each")
        grouped: dict[int, PlayerShardLogic] = {}
        each: dict[int, PlayerShardLogic] = {}
        positions: dict[int, tuple[object, object]] = {}
        for epoch, (start, end) in enumerate(zip([0, *cuts], [*cuts, len(events)]), start=1):
            batches: dict[int, list] = {s: [] for s in data.draw(st.sets(st.integers(0, SHARDS - 1)))}
            for event in events[start:end]:
                batches.setdefault(shard_of(event[2], SHARDS), []).append(event)
            kept = []
            for shard in sorted(batches):  # Bytewax visits a pass's keys in sorted order
                for logics, directory, cls in ((grouped, grouped_dir, PlayerShardLogic), (each, each_dir, SyncEach)):
                    logic = logics.get(shard) or cls(None, directory, SHARDS)
                    _, discard = logic.on_batch([(PARTITION, epoch, batches[shard])])
                    if discard:
                        logics.pop(shard, None)
                    else:
                        logics[shard] = logic
                if shard in grouped:
                    kept.append(shard)
            order = data.draw(st.permutations(kept))
            for done, shard in enumerate(order, start=1):
                stored = grouped[shard].snapshot()
                unsynced = [s for s, lg in grouped.items() if lg.changelog is not None and lg.changelog.unsynced]
                if unsynced:
                    assert done < len(order), f"epoch {epoch}: shards {unsynced} unsynced after the last snapshot"
                positions[shard] = (stored, each[shard].snapshot())
                assert positions[shard][0] == positions[shard][1]
            assert not any(lg.changelog is not None and lg.changelog.unsynced for lg in grouped.values())
        for logics in (grouped, each):
            for logic in logics.values():
                assert logic.changelog is not None
                logic.changelog.close()
        names = sorted(p.name for p in grouped_dir.glob("*.log")) if grouped_dir.exists() else []
        assert names == (sorted(p.name for p in each_dir.glob("*.log")) if each_dir.exists() else [])
        for name in names:
            assert (grouped_dir / name).read_bytes() == (each_dir / name).read_bytes()
        live = fold(apply_result, events)[1]
        restored: dict[str, object] = {}
        for stored, _ in positions.values():  # a resumed run's shards, from the grouped run's files
            resumed = PlayerShardLogic(stored, grouped_dir, SHARDS)
            restored.update(resumed.records)
            assert resumed.changelog is not None
            resumed.changelog.close()
        assert {p: in_effect(r) for p, r in restored.items()} == {p: in_effect(r) for p, r in live.items()}
