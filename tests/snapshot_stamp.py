"""What tests check of an answer's snapshot stamp: ``published_at`` as Redis holds it, ``age_ms``."""

from __future__ import annotations

import re
from typing import Any

import redis

from rankflow.connectors.redis_generations import current_generation
from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_publish import loads_document


def stored_published_at(client: redis.Redis, namespace: str) -> int:
    """The ``published_at`` Redis holds beside the current snapshot of ``namespace`` (a product's
    namespace: ``boards_namespace(ns)``, ``activity_namespace(ns)``), checked against the snapshot's
    document, which says the same."""
    keys = Keys(namespace)
    keys = keys.of_generation(current_generation(client, namespace))
    at, doc = client.mget(keys.published_at, keys.snapshot)
    assert at is not None and doc is not None, f"no snapshot in {namespace!r}"
    assert int(at) == loads_document(doc)["published_at"]
    return int(at)


def unjudged(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without the ``stale`` the service writes right after ``age_ms`` (a bool: checked),
    to compare an answer of ``rankflow serve`` with the reader's or the CLI's, which say none:
    whether an age is stale is the service's rule (tests/api/test_http_cache.py checks it)."""
    keys = list(body)
    if "age_ms" not in keys or keys.index("age_ms") + 1 >= len(keys) or keys[keys.index("age_ms") + 1] != "stale":
        return body
    assert isinstance(body["stale"], bool), body
    return {key: value for key, value in body.items() if key != "stale"}


def stamped(body: dict[str, Any], published_at: int) -> dict[str, Any]:
    """``body`` but for its age, which must be a whole number of ms, at least 0 (and the service's
    ``stale`` after it: :func:`unjudged`); its ``published_at`` must be ``published_at``."""
    assert body["published_at"] == published_at, body
    age = body["age_ms"]
    assert isinstance(age, int) and age >= 0, body
    return {key: value for key, value in unjudged(body).items() if key != "age_ms"}


AGE = re.compile(rb'"age_ms":\d+')


def ageless(raw: Any) -> Any:
    """An answer's bytes (or a structure holding them, a tuple or list) with every ``age_ms`` 0:
    two ways of answering one query must give the same bytes but for the age, which is the
    moment's."""
    if isinstance(raw, bytes):
        return AGE.sub(b'"age_ms":0', raw)
    if isinstance(raw, (tuple, list)):
        return type(raw)(ageless(part) for part in raw)
    if isinstance(raw, dict):  # a decoded answer: without the service's ``stale`` too (:func:`unjudged`)
        return {key: 0 if key == "age_ms" else ageless(value) for key, value in unjudged(raw).items()}
    return raw


def ageless_response(status: int, headers: list[tuple[str, str]], body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """A response to compare with another way's: no ``date``, every ``age_ms`` 0, and its
    ``content-length`` (checked against the body first) that of the body so changed."""
    plain = ageless(body)
    out = []
    for name, value in headers:
        if name.lower() == "date":
            continue
        if name.lower() == "content-length":
            assert int(value) == len(body), (value, body)
            value = str(len(plain))
        out.append((name, value))
    return status, out, plain
