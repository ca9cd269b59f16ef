"""Building playback events for tests."""

from __future__ import annotations

import orjson


def ev(user: str, playback: str, song: str, etype: str, version: int, ts: int = 0, **extra: object) -> bytes:
    return orjson.dumps({"user_id": user, "playback_id": playback, "song_id": song,
                         "type": etype, "version": version, "ts": ts, **extra})


def ranking(snapshot: dict) -> list[tuple[str, int]]:
    return [(i["song_id"], i["listeners"]) for i in snapshot["items"]]
