"""How old the snapshot an answer was read from is: ``published_at`` and ``age_ms``.

Every board and activity answer names its snapshot by id, by when the flow published it
(``published_at``, ms since the Unix epoch: the snapshot document's, which the publish
script also stores beside the id, ``scripts.PUBLISH_KEYS``) and by its age when the
answer is given (``age_ms = now - published_at``, never below 0: clocks of two hosts
may differ a little). Both come from the very snapshot the answer's items come from, so a
reader on a replica that lags names an older snapshot by its id and its age, never one
and the other's. An answer kept and served again (``api.shared_cache``) gets its age
again when served (:func:`aged`): the age is the answer's, not the read's.

``published_at`` is null (and so ``age_ms``) for a snapshot an older rankflow stored,
which kept no ``published_at`` beside the id; the next snapshot published has one.
"""

from __future__ import annotations

import time
from typing import Any


def now_ms() -> int:
    return int(time.time() * 1000)


def age_ms(published_at: int | None, now: int | None = None) -> int | None:
    """``now - published_at`` (ms), at least 0; None without a publication time.

    >>> age_ms(1000, 1500), age_ms(1500, 1000), age_ms(None, 1000)
    (500, 0, None)
    """
    if published_at is None:
        return None
    return max(0, (now_ms() if now is None else now) - published_at)


def published(raw: bytes | str | None) -> int | None:
    """A ``published_at`` as Redis holds it ('' or absent: not kept, None).

    >>> published(b"1700000000000"), published(b""), published(None)
    (1700000000000, None, None)
    """
    return int(raw) if raw else None


def stamp(snapshot_id: Any, published_at: int | None) -> dict[str, Any]:
    """What an answer starts with: ``{snapshot_id, published_at, age_ms}``, the age now."""
    return {"snapshot_id": snapshot_id, "published_at": published_at, "age_ms": age_ms(published_at)}


def aged(answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` (read earlier, kept) with its ``age_ms`` now; the same dict if it has none."""
    if "age_ms" not in answer:
        return answer
    return {**answer, "age_ms": age_ms(answer["published_at"])}


def is_stale(published_at: int | None, stale_after_ms: int, now: int | None = None) -> bool:
    """Whether an answer of a snapshot published at ``published_at`` is stale: older than
    ``stale_after_ms`` (``rankflow serve --stale-after-ms``), the listeners' rule. A snapshot
    without a publication time (an older rankflow's) cannot be told old: not stale.

    >>> is_stale(1000, 500, 1600), is_stale(1000, 500, 1500), is_stale(None, 500, 1600)
    (True, False, False)
    """
    age = age_ms(published_at, now)
    return age is not None and age > stale_after_ms


def judged(answer: dict[str, Any], stale_after_ms: int) -> dict[str, Any]:
    """``answer`` (one :func:`stamp` starts) with ``"stale"`` right after its ``age_ms``, by the
    service's rule applied to that age (:func:`is_stale`), where the cache validators look for it
    (``api.http_cache``); the same dict if it has no age. One dict, no loop: the prepared answers
    (a player's rank from the mirror) pay it per request.

    >>> judged({"snapshot_id": 1, "published_at": 1000, "age_ms": 600, "items": []}, 500)
    {'snapshot_id': 1, 'published_at': 1000, 'age_ms': 600, 'stale': True, 'items': []}
    """
    if "age_ms" not in answer:
        return answer
    age = answer["age_ms"]
    return {"snapshot_id": answer["snapshot_id"], "published_at": answer["published_at"], "age_ms": age,
            "stale": age is not None and age > stale_after_ms, **answer}
