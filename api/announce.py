"""The flows' announcements of new snapshots, heard once per process: :class:`Announcements`.

Contract: every publish script announces a snapshot stored into the generation readers
use, and the switch script a new generation, on the pub/sub channel named like the
namespace's generation pointer (``Keys.generation``, ``{ns}:generation``;
``connectors.scripts.PUBLISH_ARGV``). :class:`Announcements` subscribes, on one
connection for the whole process, to the channels its pollers follow
(:meth:`Announcements.follow`), and wakes every poller of a channel
(``api.watch.Polling.wake``) on each of its messages. Pub/sub delivers at most once: a
message sent while the connection is down is lost. So it wakes every poller each time
it subscribes (again), and the pollers still look on their own every ``poll_ms``: an
announcement makes a look early, never the only one. A message's content is not used,
only its channel: a poller reads what is current, whatever woke it.

Why: polling costs a reader one Redis call per interval whether or not anything changed
(the service's readers at 100 ms: about 110 commands and 14-22 ms of CPU a second,
idle, and the answers up to one interval behind). Woken, a reader reads once per snapshot, within a
round trip of its publish; idle, it looks once a ``poll_ms`` (1 s by default).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

import redis
import redis.asyncio as aioredis

from rankflow.api.watch import Polling, wait_bounded
from rankflow.connectors.redis_replicas import Endpoint, ReadRoute, skip_reason

log = logging.getLogger("rankflow.api")

RETRY_S = 1.0
"""Between attempts to subscribe while Redis cannot be reached (the pollers poll meanwhile)."""

LISTEN_S = 1.0
"""The longest the listener waits for a message before it checks whether it must stop."""

HEALTH_S = 10
"""How long the subscription may be silent before the client checks it with a ``PING``."""


class Announcements(Polling):
    """One subscription per process to the channels its pollers follow: a :class:`Polling`
    whose one look is the whole subscription (:meth:`poll_once` returns only when stopping
    or failing), made again ``RETRY_S`` after a failure.

    >>> a = Announcements("redis://127.0.0.1:1/0")
    >>> a.follow("{ns}:generation", Polling())
    >>> a.channels()
    ['{ns}:generation']
    """

    name = "announcement listener"

    def __init__(self, url: str, route: ReadRoute | None = None) -> None:
        super().__init__(int(RETRY_S * 1000))
        self.url = url
        self.route = route  # with replicas, subscribe where the readers read (:meth:`poll_once`)
        self._endpoint: Endpoint | None = None  # where the subscription is (being) made
        self._followers: dict[str, list[Polling]] = {}
        self.heard = 0  # messages received
        self.subscribed = False  # whether the subscription is up now
        self.problem: str | None = None  # why the last attempt to subscribe failed (logged once per reason)

    def follow(self, channel: str, poller: Polling) -> None:
        """Wake ``poller`` on each message of ``channel``. Call before :meth:`start`."""
        self._followers.setdefault(channel, []).append(poller)

    def channels(self) -> list[str]:
        return sorted(self._followers)

    def start(self) -> None:
        """Listen in the background (nothing to do when no poller follows a channel)."""
        if self._followers:
            super().start()

    def poll_failed(self, exc: Exception) -> bool:
        """Redis refused or dropped the subscription: log it (once per reason), try again later."""
        if not isinstance(exc, (redis.RedisError, OSError)):
            raise exc
        endpoint, reason = self._endpoint, skip_reason(exc)
        if self.route is not None and endpoint is not None and endpoint.replica and reason is not None:
            self.route.skip(endpoint, reason, exc)  # the next attempt subscribes at the next endpoint
        if repr(exc) != self.problem:  # e.g. an ACL user without the channels: NOPERM
            log.warning("cannot subscribe to the flows' announcements (%s): the readers poll on their own "
                        "meanwhile", exc)
        self.problem = repr(exc)
        return False

    async def poll_once(self) -> None:
        """Subscribe, wake everyone (what was announced before is unheard), then wake per message.

        With replicas (``--redis-read``), the subscription is made at the endpoint the readers
        read now (``ReadRoute.first``): a replica relays the primary's announcements after the
        writes they announce, so a woken reader finds the snapshot there. It is made again
        when the readers move to another endpoint."""
        route, url = self.route, self.url
        self._endpoint = endpoint = None if route is None else route.first()
        if endpoint is not None:
            url = endpoint.url
        # a PING every HEALTH_S while idle: a connection that died silently fails, and is made again
        client = aioredis.Redis.from_url(url, socket_connect_timeout=2, socket_keepalive=True,
                                         health_check_interval=HEALTH_S)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(*self._followers)
            self.subscribed, self.problem = True, None
            self._wake(self._followers)
            while not self._stopping and (route is None or route.first() is endpoint):
                message = await pubsub.get_message(timeout=LISTEN_S)
                if message is not None and message["type"] == "message":
                    self.heard += 1
                    self._wake((message["channel"].decode(),))
        finally:
            self.subscribed = False
            await wait_bounded(asyncio.ensure_future(_close(pubsub, client)), "the subscription did not close in time")

    def _wake(self, channels: Iterable[str]) -> None:
        for channel in channels:
            for poller in self._followers.get(channel, ()):
                poller.wake()


async def _close(pubsub: aioredis.client.PubSub, client: aioredis.Redis) -> None:
    try:
        await pubsub.aclose()
        await client.aclose()
    except (redis.RedisError, OSError):
        pass  # the connection is gone already
