"""The listener flow's state in Redis: the count table every snapshot's changes go into.

``connectors.redis_publish.Publisher`` publishes any product's snapshots; this is what
the listener product (``rankflow.products.listeners``) gives it to publish with: the
count changes of each snapshot, sent with it by ``scripts.PUBLISH_LISTENERS``.
"""

from __future__ import annotations

from typing import Any

import orjson

from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.scripts import PUBLISH_LISTENERS
from rankflow.state.snapshot import Snapshot

CHANGES_MAXLEN = 1_000  # about 4 minutes of snapshots at the default barrier; a reader further behind reloads


class CountTable:
    """The listener flow's state in Redis: the count table, sent as changes.

    Count changes not yet in Redis wait for the next snapshot Redis accepts. The
    publisher mirrors the whole table, to send it whole when Redis has none or holds
    an older one (restored from a backup): the flow heals Redis in place.
    """

    script = PUBLISH_LISTENERS

    def __init__(self) -> None:
        self._pending: dict[str, int] = {}
        self._full = False
        self._mirror: dict[str, int] = {}  # the whole table, for a Redis that lost it

    def remember(self, snapshot: Snapshot) -> None:
        if snapshot.counts_full:
            self._pending, self._full = dict(snapshot.counts), True
            self._mirror = {song: n for song, n in snapshot.counts.items() if n > 0}
            return
        self._pending.update(snapshot.counts)
        for song, n in snapshot.counts.items():
            if n > 0:
                self._mirror[song] = n
            else:
                self._mirror.pop(song, None)

    def resend_all(self, why: str) -> None:
        self._pending, self._full = dict(self._mirror), True  # whatever ``why``: the mirror is the whole table

    def stored(self) -> None:
        self._pending, self._full = {}, False

    def keys(self, k: Keys) -> list[str]:
        return PUBLISH_LISTENERS.product_keys(counts=k.counts, changes=k.changes)

    def args(self) -> list[Any]:
        return PUBLISH_LISTENERS.at_p(full="full" if self._full else "delta", counts=orjson.dumps(self._pending),
                                      changes_cap=CHANGES_MAXLEN)
