"""Building playback events for tests."""

from __future__ import annotations

import orjson


def ev(user: str, playback: str, song: str, etype: str, version: int, ts: int = 0, **extra: object) -> bytes:
    return orjson.dumps({"user_id": user, "playback_id": playback, "song_id": song,
                         "type": etype, "version": version, "ts": ts, **extra})


def ranking(snapshot: dict) -> list[tuple[str, int]]:
    return [(i["song_id"], i["listeners"]) for i in snapshot["items"]]


def recent(snapshot: dict) -> list[tuple[str, int]]:
    """A snapshot's recent plays (docs/semantics/windows.md 7) as ``(song_id, plays)`` in rank order."""
    items = snapshot["recent"]["items"]
    assert [i["rank"] for i in items] == list(range(1, len(items) + 1))
    return [(i["song_id"], i["plays"]) for i in items]


def recent_window(snapshot: dict) -> tuple:
    r = snapshot["recent"]
    return r["window_start"], r["window_end"], r["watermark"]
