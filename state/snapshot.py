"""Published snapshots: what a listener snapshot holds, and what every flow's snapshot shares.

Its top ``K_max`` comes from the song partitions' local tops by
``state.ranking_index.merge_local_tops``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

SNAPSHOT_ID_RUN_FACTOR = 1_000_000_000
"""Snapshot ids are ``run_token * 10**9 + epoch``: growing within a run (epochs grow)
and across runs (each run takes a larger token from Redis at start-up)."""


def snapshot_id(run_token: int, epoch: int) -> int:
    if not 0 < epoch < SNAPSHOT_ID_RUN_FACTOR:
        raise ValueError(f"epoch {epoch} out of range for a snapshot id")
    return run_token * SNAPSHOT_ID_RUN_FACTOR + epoch


class Gauge(NamedTuple):
    """A number of a published snapshot, as ``--metrics-port`` exports it (``rankflow_<name>``).

    Each product's snapshot type lists its own (``gauges()``), so the metrics operator
    exports what it is given and never asks which flow runs. With a ``label``, ``value``
    holds one number per label value."""

    name: str
    doc: str
    value: float | Mapping[str, float]
    label: str | None = None


def cut_gauges(snapshot_id: int, partition_lag_ms: Mapping[str, int]) -> list[Gauge]:
    """The gauges every flow's snapshot has: which cut it is, and how far each partition trailed."""
    return [Gauge("snapshot_id", "Id of the last published snapshot", snapshot_id),
            Gauge("partition_lag_seconds", "How far each partition's counts trailed the input in the last "
                  "snapshot", {part: ms / 1000 for part, ms in partition_lag_ms.items()}, "partition")]


class Cut(Protocol):
    """What every flow's snapshot says of the cut it is (the fields :func:`cut_header` reads)."""

    @property
    def snapshot_id(self) -> int: ...
    @property
    def run(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def positions(self) -> dict[str, int]: ...


def cut_header(cut: Cut, published_at_ms: int) -> dict[str, Any]:
    """The fields that open every flow's snapshot document, in this order: which cut it is,
    where each partition stood, and when it was published. One place, so that a reader
    of any product finds the same header."""
    return {"snapshot_id": cut.snapshot_id, "run": cut.run, "epoch": cut.epoch, "positions": cut.positions,
            "published_at": published_at_ms}


def dead_letters_by_reason(counts: Mapping[str, int]) -> dict[str, int]:
    """The ``dead_letters.<reason>`` running totals of ``counts``, by reason, sorted by name
    (every product's snapshot document's ``dead_letters_by_reason``)."""
    return {name.split(".", 1)[1]: n for name, n in sorted(counts.items()) if name.startswith("dead_letters.")}


class RecentRanking(NamedTuple):
    """A listener snapshot's recent plays (docs/semantics/windows.md 7): its window, its watermark (ms;
    all None before the first valid event) and the top ``K_max`` songs by accepted starts
    in the window, as ``(song_id, plays)`` in ranking order."""

    window_start: int | None
    window_end: int | None
    watermark: int | None
    items: list[tuple[str, int]]

    def to_json_obj(self) -> dict[str, Any]:
        return {"window_start": self.window_start, "window_end": self.window_end, "watermark": self.watermark,
                "items": [{"rank": i, "song_id": song, "plays": n} for i, (song, n) in enumerate(self.items, 1)]}


class Snapshot(NamedTuple):
    """One consistent cut of the input, ready to publish."""

    snapshot_id: int
    run: int
    epoch: int
    positions: dict[str, int]
    total_listeners: int
    counted_users: int
    active_songs: int
    dead_letters: int
    k_max: int
    items: list[tuple[str, int]]
    partition_lag_ms: dict[str, int]
    errors: list[str]
    split_songs: list[str] = []
    counts: dict[str, int] = {}  # songs whose count changed since the previous snapshot (not in the JSON)
    counts_full: bool = False  # ``counts`` holds every song: readers' count tables start over
    recent: RecentRanking | None = None  # recent plays; None with ``--recent-minutes 0`` (then not in the JSON)
    dead_letters_by_reason: dict[str, int] = {}  # running totals, as the boards and activity documents have them

    def to_json_obj(self, published_at_ms: int) -> dict[str, Any]:
        obj = {
            **cut_header(self, published_at_ms),
            "total_listeners": self.total_listeners,
            "counted_users": self.counted_users,
            "active_songs": self.active_songs,
            "dead_letters": self.dead_letters,
            "dead_letters_by_reason": self.dead_letters_by_reason,
            "k_max": self.k_max,
            "items": [
                {"rank": i, "song_id": song, "listeners": count}
                for i, (song, count) in enumerate(self.items, start=1)
            ],
            "partition_lag_ms": self.partition_lag_ms,
            "split_songs": self.split_songs,
            "errors": self.errors,
        }
        if self.recent is not None:
            obj["recent"] = self.recent.to_json_obj()
        return obj

    def gauges(self) -> list[Gauge]:
        """What ``--metrics-port`` shows of the listener flow's last snapshot."""
        return [*cut_gauges(self.snapshot_id, self.partition_lag_ms),
                Gauge("counted_users", "Users counted as listening", self.counted_users),
                Gauge("total_listeners", "Sum of song counts", self.total_listeners),
                Gauge("active_songs", "Songs with listeners", self.active_songs),
                Gauge("split_songs", "Songs split into partial counters", len(self.split_songs))]
