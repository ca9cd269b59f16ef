"""Reading what the publisher wrote: the latest snapshot, the count table, the history.

For the CLI, tests and benchmarks; the HTTP service follows snapshots with its own
script instead (``api.store``).
"""

from __future__ import annotations

from typing import Any, cast

import redis

from rankflow.connectors.redis_generations import current_generation
from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_replies import Entries, Scored
from rankflow.connectors.redis_publish import loads_document


def read_latest(client: redis.Redis, namespace: str) -> dict[str, Any] | None:
    """The current generation's latest snapshot, or None if there is none."""
    keys = Keys(namespace)
    for _ in range(3):  # a generation switch between the two reads: read again
        generation = current_generation(client, namespace)
        raw = client.get(keys.of_generation(generation).snapshot)
        if raw is not None:
            return loads_document(raw)
        if current_generation(client, namespace) == generation:
            return None
    return None


def read_generation(client: redis.Redis, namespace: str, generation: int) -> dict[str, Any] | None:
    raw = client.get(Keys(namespace, generation).snapshot)
    return None if raw is None else loads_document(raw)


def read_counts(client: redis.Redis, namespace: str) -> dict[str, int]:
    """Every song's count in the current generation's latest snapshot."""
    keys = Keys(namespace, current_generation(client, namespace))
    counts = cast(Scored, client.zrange(keys.counts, 0, -1, withscores=True))
    return {song.decode(): int(count) for song, count in counts}


def read_history(client: redis.Redis, namespace: str, generation: int | None = None) -> list[dict[str, Any]]:
    """Every snapshot still in a generation's stream, oldest first."""
    if generation is None:
        generation = current_generation(client, namespace)
    stream = Keys(namespace, generation).stream
    entries = cast(Entries, client.xrange(stream))
    return [loads_document(fields[b"snapshot"]) for _, fields in entries]
