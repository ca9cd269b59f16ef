"""The cache validators in the OpenAPI schema: what ``api.http_cache`` sends, written where a
client generator or a CDN's configuration reads it.

Contract: every ``GET`` of a snapshot-backed route (a path under a :class:`Cacheable`
prefix that is not an event stream) documents the ``If-None-Match`` request header, the
``ETag``, ``Cache-Control`` and ``Last-Modified`` of its ``200``, a ``304 Not Modified``
with the same headers and no body, and the ``Cache-Control: no-store`` of its errors. The
route modules say nothing of caching: the middleware adds the headers, this adds their
documentation, from the same list of prefixes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rankflow.api.http_cache import Cacheable

_STRING = {"type": "string"}
VALIDATORS: dict[str, Any] = {
    "ETag": {"description": 'weak: W/"<snapshot_id>-<published_at>-<digest of the path and query>"',
             "schema": _STRING},
    "Cache-Control": {"description": "public, max-age=N (rankflow serve --cache-max-age; no-cache when it is 0)",
                      "schema": _STRING},
    "Last-Modified": {"description": "the snapshot's published_at as an HTTP date", "schema": _STRING},
}
NO_STORE: dict[str, Any] = {"Cache-Control": {"description": "no-store: no cache keeps an error", "schema": _STRING}}
IF_NONE_MATCH: dict[str, Any] = {
    "name": "If-None-Match", "in": "header", "required": False, "schema": _STRING,
    "description": "ETags of answers the client holds (or *): 304 without a body when one is the current answer's",
}


def document_validators(schema: dict[str, Any], cacheable: Iterable[Cacheable]) -> None:
    """Add the validators to the ``GET`` of every path of ``schema`` under a ``cacheable`` prefix."""
    prefixes = tuple(c.prefix for c in cacheable)
    for path, operations in schema.get("paths", {}).items():
        get = operations.get("get")
        if get is None or not path.startswith(prefixes) or path.endswith("/stream"):
            continue
        get.setdefault("parameters", []).append(IF_NONE_MATCH)
        answers = get.setdefault("responses", {})
        for status, answer in answers.items():
            if status == "200":
                answer.setdefault("headers", {}).update(VALIDATORS)
            elif status[:1] in "45":
                answer.setdefault("headers", {}).update(NO_STORE)
        answers["304"] = {"description": "Not Modified: the If-None-Match names the current answer; no body",
                          "headers": dict(VALIDATORS)}
