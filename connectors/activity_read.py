"""Reading the activity rankings: a workspace's top, the global top, one channel.

Every query is one Lua script (``scripts.READ_ACTIVITY``), so the snapshot
id, its ``published_at`` (the document's; with ``age_ms``, ``connectors.snapshot_age``), the window and every item of an answer come from one state: the publish script
changes the workspaces' sorted sets (or switches them to the slots a large snapshot
was staged in, ``connectors.activity_staging``) and the snapshot id in one atomic step. A
channel's rank is ``ZREVRANK`` + 1 in its workspace's sorted set: exact for every
channel, not only the top ``K_max``.

The reader keeps the newest snapshot document it has read, and the script returns
the document only when the snapshot id moved: a query in a steady state is one
small round trip.

The same query logic serves two readers: :class:`ActivityReader` on a sync
``redis.Redis`` (the CLI, tests) and :class:`AsyncActivityReader` on ``redis.asyncio``
(the HTTP service, whose event loop must never wait on Redis). :class:`ActivityQuery`
holds everything but the call itself, and the ``*_answer`` functions turn its reply
into the answer dict, so the two readers differ only in ``await`` (as
``connectors.board_read`` does for the boards).

The snapshot document is parsed with the stdlib ``json``, not orjson: a watermark (and
so the window's bounds) may be beyond 64 bits (docs/semantics/windows.md 1: ``ts`` has no upper bound).
"""

from __future__ import annotations

import json
from typing import Any

import redis
import redis.asyncio as aioredis

from rankflow.connectors.read_hint import GenerationHint
from rankflow.connectors.redis_keys import Keys, activity_namespace
from rankflow.connectors.script_query import ScriptReader, arun, run
from rankflow.connectors.scripts import MOVES, READ_ACTIVITY, Call
from rankflow.connectors.snapshot_age import stamp

WINDOW_FIELDS = ("window_start", "window_end", "watermark")
SNAPSHOT_FIELDS = ("snapshot_id", "published_at", "watermark", "window_start", "window_end", "bucket_ms",
                   "window_buckets", "count", "k_max", "active_pairs")
"""What :meth:`ActivityReader.snapshot` tells of the current snapshot (its document has more)."""
ATTEMPTS = MOVES + 1
"""Calls of one query at most: each generation switch costs one more."""


class ActivityQueryError(LookupError):
    """A query without an answer: nothing published yet, or the channel has no count."""


class NoSnapshot(ActivityQueryError):
    pass


class NoCount(ActivityQueryError):
    pass


class ActivityMoving(RuntimeError):
    """The generation changed at every call of one query: give up (a rebuild switching in a
    loop?); the caller may ask again."""


def check_k(k: int, k_max: int) -> None:
    """A usage error (ValueError) unless 1 <= k <= K_max (docs/semantics/windows.md 4: never clamped)."""
    if not 1 <= k <= k_max:
        raise ValueError(f"k must be between 1 and K_max = {k_max}, got {k}")


class Held(GenerationHint):
    """What a reader last learnt about its namespace: the current generation, and the
    newest snapshot document it read (with the generation it came from). Only ever a
    hint: the script checks the generation, and sends the document when its id moved."""

    def __init__(self, namespace: str) -> None:
        super().__init__(Keys(activity_namespace(namespace)))
        self.doc: tuple[int, dict[str, Any]] | None = None  # (generation, document)

    def current_doc(self) -> dict[str, Any] | None:
        if self.doc is None or self.doc[0] != self.generation:
            return None
        return self.doc[1]

    def learn_doc(self, generation: int, doc: dict[str, Any]) -> None:
        """Keep ``doc`` unless a newer one of the same generation is held (async queries
        may settle out of order: an older one must not take the newer's place)."""
        if generation != self.generation:
            return
        held = self.current_doc()
        if held is None or int(doc["snapshot_id"]) >= int(held["snapshot_id"]):
            self.doc = (generation, doc)


class ActivityQuery:
    """One query's calls of ``scripts.READ_ACTIVITY`` (a ``script_query.Query``): :meth:`call`
    gives the keys and arguments of the next one, :meth:`settle` reads its reply and says whether the
    query is answered (then :attr:`doc` and :attr:`answer` hold it) or must call again.

    The query remembers the document whose id it sent: if the script says the reader
    holds it (no document in the reply), that one is the answer's, whatever another
    query settled meanwhile."""

    attempts = ATTEMPTS

    def __init__(self, held: Held, query: str, workspace: str = "", k: int = 0, channel: str = "") -> None:
        self.held, self.query, self.workspace, self.k, self.channel = held, query, workspace, k, channel
        self.doc: dict[str, Any] | None = None
        self.answer: Any = None
        self._generation = 0
        self._sent: dict[str, Any] | None = None

    def call(self) -> Call:
        h = self.held
        self._generation, self._sent = h.generation, h.current_doc()
        keys = h.keys.of_generation(self._generation)
        sent_id = str(self._sent["snapshot_id"]) if self._sent else ""
        slot_a, slot_b = keys.workspace_both(self.workspace)
        return READ_ACTIVITY.ordered(
            {"generation": keys.generation, "snapshot_id": keys.snapshot_id, "snapshot": keys.snapshot,
             "workspace_slots": keys.workspace_slots, "slot_a": slot_a, "slot_b": slot_b},
            {"generation": self._generation, "held_snapshot_id": sent_id, "query": self.query, "k": self.k,
             "channel": self.channel, "workspace": self.workspace})

    def settle(self, reply: list[Any]) -> bool:
        tag = reply[0]
        if tag == b"moved":
            if int(reply[1]) != self.held.generation:
                self.held.generation, self.held.doc = int(reply[1]), None
            return False
        if tag == b"none":
            raise NoSnapshot(f"no activity snapshot published yet in namespace {self.held.keys.namespace!r}")
        if reply[2]:
            doc = json.loads(reply[2])  # not orjson: a watermark may be beyond 64 bits (docs/semantics/windows.md 1)
            self.held.learn_doc(self._generation, doc)
        else:
            doc = self._sent
        assert doc is not None and str(doc["snapshot_id"]) == reply[1].decode()
        self.doc, self.answer = doc, reply[3] if len(reply) > 3 else None
        return True

    def gave_up(self) -> ActivityMoving:
        return ActivityMoving("the generation changed at every read: a rebuild switching in a loop?")


def check_k_known(k: int, held: Held) -> bool:
    """:func:`check_k` before any read, with the K_max of the snapshot the reader holds;
    ``False`` when it holds none (then the caller learns it first, :meth:`ActivityReader.top`).
    A k below 1 is a usage error even when nothing is published. So a k out of range
    never makes Redis read a workspace's channels (``ZREVRANGE`` of k items), nor
    reaches it at all (a k beyond 64 bits would be a Redis error, not a usage error)."""
    if k < 1:
        raise ValueError(f"k must be between 1 and K_max, got {k}")
    doc = held.current_doc()
    if doc is None:
        return False
    check_k(k, doc["k_max"])
    return True


def top_query(held: Held, workspace: str, k: int) -> ActivityQuery:
    """Only once :func:`check_k_known` passed: the script reads the first k channels."""
    return ActivityQuery(held, "top", workspace, k)


def global_query(held: Held, k: int) -> ActivityQuery:
    check_k_known(k, held)  # the answer is in the snapshot document: no read grows with k
    return ActivityQuery(held, "global")


def of_snapshot(doc: dict[str, Any]) -> dict[str, Any]:
    """``{snapshot_id, published_at, age_ms}`` of the document an answer was read with: the
    script returns the document (or says the reader holds it) with the id, atomically."""
    return stamp(doc["snapshot_id"], doc.get("published_at"))


def top_answer(query: ActivityQuery) -> dict[str, Any]:
    """``{snapshot_id, published_at, age_ms, workspace_id, window_start, window_end, watermark, items}``
    (docs/semantics/windows.md 6)."""
    doc, pairs = query.doc, query.answer
    assert doc is not None
    check_k(query.k, doc["k_max"])
    items = [{"rank": i, "channel_id": pairs[2 * i - 2].decode(), "count": int(float(pairs[2 * i - 1]))}
             for i in range(1, len(pairs) // 2 + 1)]
    return {**of_snapshot(doc), "workspace_id": query.workspace, **{f: doc[f] for f in WINDOW_FIELDS}, "items": items}


def global_answer(query: ActivityQuery, k: int) -> dict[str, Any]:
    """The global ranking's first ``k`` from the snapshot document."""
    doc = query.doc
    assert doc is not None
    check_k(k, doc["k_max"])
    return {**of_snapshot(doc), **{f: doc[f] for f in WINDOW_FIELDS}, "items": doc["global"][:k]}


def channel_answer(query: ActivityQuery) -> dict[str, Any]:
    """``{snapshot_id, published_at, age_ms, workspace_id, channel_id, count, rank}``; :class:`NoCount`
    when it has none."""
    doc, found = query.doc, query.answer
    assert doc is not None
    workspace, channel = query.workspace, query.channel
    if not found:
        raise NoCount(f"channel {channel!r} of workspace {workspace!r} has no count in the window of "
                      f"snapshot {doc['snapshot_id']}")
    count, rank = found
    return {**of_snapshot(doc), "workspace_id": workspace, "channel_id": channel,
            "count": int(float(count)), "rank": int(rank) + 1}


def snapshot_answer(query: ActivityQuery) -> dict[str, Any]:
    """The current snapshot's id, publication time, watermark, window and settings."""
    doc = query.doc
    assert doc is not None
    return {f: doc.get(f) for f in SNAPSHOT_FIELDS}


class ActivityReader(ScriptReader[redis.Redis, Held]):
    """Queries on a sync client (the CLI, tests)."""

    hint_type = Held
    source = READ_ACTIVITY

    def top(self, workspace: str, k: int) -> dict[str, Any]:
        """``{snapshot_id, published_at, age_ms, workspace_id, window_start, window_end, watermark, items}`` (docs/semantics/windows.md 6).

        A reader holding no snapshot reads it first (one small call) to learn K_max."""
        if not check_k_known(k, self.hint):
            check_k(k, self.snapshot()["k_max"])
        return top_answer(self._query(top_query(self.hint, workspace, k)))

    def global_top(self, k: int) -> dict[str, Any]:
        """The global ranking's first ``k`` from the snapshot document."""
        return global_answer(self._query(global_query(self.hint, k)), k)

    def channel(self, workspace: str, channel: str) -> dict[str, Any]:
        """``{snapshot_id, published_at, age_ms, workspace_id, channel_id, count, rank}``; :class:`NoCount` when it has none."""
        return channel_answer(self._query(ActivityQuery(self.hint, "channel", workspace, 0, channel)))

    def snapshot(self) -> dict[str, Any]:
        """:data:`SNAPSHOT_FIELDS` of the current snapshot."""
        return snapshot_answer(self._query(ActivityQuery(self.hint, "global")))

    def _query(self, query: ActivityQuery) -> ActivityQuery:
        return run(self.script, query)


class AsyncActivityReader(ScriptReader[aioredis.Redis, Held]):
    """:class:`ActivityReader` on a ``redis.asyncio`` client: the same queries and answers."""

    hint_type = Held
    source = READ_ACTIVITY

    async def top(self, workspace: str, k: int) -> dict[str, Any]:
        if not check_k_known(k, self.hint):
            check_k(k, (await self.snapshot())["k_max"])
        return top_answer(await self._query(top_query(self.hint, workspace, k)))

    async def global_top(self, k: int) -> dict[str, Any]:
        return global_answer(await self._query(global_query(self.hint, k)), k)

    async def channel(self, workspace: str, channel: str) -> dict[str, Any]:
        return channel_answer(await self._query(ActivityQuery(self.hint, "channel", workspace, 0, channel)))

    async def snapshot(self) -> dict[str, Any]:
        return snapshot_answer(await self._query(ActivityQuery(self.hint, "global")))

    async def _query(self, query: ActivityQuery) -> ActivityQuery:
        return await arun(self.script, query)
