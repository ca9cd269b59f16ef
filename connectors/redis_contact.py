"""A command's first contact with the Redis a user named: answered within about 2 s, in words.

A command's client waits long for Redis (``redis_keys.connect``: 5 s to connect, 10 s per
reply), which is right for a busy Redis running a publish script and wrong for an address
that is not Redis at all. A port that accepts and never answers (a Kafka broker, which
reads the ``PING`` as the length of a request and waits for the rest; a stuck proxy) held
a command silent for 10.6 s, and an HTTP server's answer came back as redis-py's
``Protocol error, got "<" as reply type byte``. So a command first sends one ``PING`` on a
client of its own, bounded by :data:`FIRST_CONTACT_S` to connect and to answer, with no
retries, and a failure says what was found at the address (:class:`NotRedis`). Any answer
in Redis's protocol, an error included (``NOAUTH``, a wrong password, ``LOADING``), is
Redis: the command goes on, and its own calls say the rest. The address is named as
``host:port`` (or the socket's path), never with the URL's password.
"""

from __future__ import annotations

import re

import redis
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.retry import Retry

FIRST_CONTACT_S = 2.0
"""How long the first contact waits to connect, and then for the answer to its ``PING``."""

_REPLY_TYPE = re.compile(r'got "(.*)" as reply type byte')


class NotRedis(redis.ConnectionError):
    """Nothing at the address answered as Redis does; the message says what happened there.
    A ``ConnectionError``: every reader already treats it as Redis being unreachable."""


def address(url: str) -> str:
    """``host:port`` of a Redis URL (``unix:PATH`` for a socket), never its credentials.

    >>> address("redis://:secret@10.0.0.5:6390/2?socket_timeout=1")
    '10.0.0.5:6390'
    >>> address("unix:///run/redis.sock?db=1")
    'unix:/run/redis.sock'
    """
    parts = parse_url(url)
    if "path" in parts:
        return f"unix:{parts['path']}"
    return f"{parts.get('host', 'localhost')}:{parts.get('port', 6379)}"


def first_contact(url: str, option: str = "--redis") -> None:
    """Raise :class:`NotRedis` unless something at ``url`` answers a ``PING`` as Redis within
    :data:`FIRST_CONTACT_S`; any other ``redis.RedisError`` as redis-py raised it (refused,
    no route: the caller's "cannot reach Redis" message)."""
    where = address(url)
    client = redis.Redis.from_url(url, socket_connect_timeout=FIRST_CONTACT_S, socket_timeout=FIRST_CONTACT_S,
                                  retry=Retry(NoBackoff(), 0))
    try:
        client.ping()
    except redis.ResponseError:
        return  # an answer in Redis's protocol: it is Redis, and the command's own calls say the rest
    except redis.TimeoutError:
        raise NotRedis(f"no answer from Redis at {where} within {FIRST_CONTACT_S:g} s: something there took the "
                       f"connection but did not answer (not a Redis server, or a stalled one: check {option})") from None
    except redis.InvalidResponse as exc:
        found = _REPLY_TYPE.search(str(exc))
        first = found.group(1) if found else None
        http = ", as an HTTP server's does" if first in ("H", "<") else ""
        starts = "" if first is None else f" (its answer starts with {first!r}{http})"
        raise NotRedis(f"{where} is not a Redis server: it answered in another protocol{starts}; check {option}") \
            from None
    except redis.ConnectionError as exc:
        if "closed by server" in str(exc).lower():
            raise NotRedis(f"{where} closed the connection without answering as Redis does: is it a Redis server, "
                           f"and does it take TLS (rediss://) or not? check {option}") from None
        raise
    finally:
        client.close()
