"""schemathesis hooks of ``test_openapi_contract``: what a static schema cannot say, so that the
requests the schema calls valid are the ones the service accepts.

* ``k`` beyond the snapshot's K_max: the schema declares ``minimum: 1`` only (K_max is the
  flow's, known at run time; beyond it is a documented ``400``). The test's flows publish
  with ``K_MAX`` (``RANKFLOW_CONTRACT_K_MAX``), and no request asks more.
* An integer field written ``10.0``: JSON Schema's ``integer`` admits it, the flows take an
  integer literal only (``400 wrong_type``, as the flow would dead-letter it).
* A match result played in the future (``played_at`` more than 60 s after the request:
  ``400 in_future``) or naming another match than its path (``400 match_id_mismatch``).
* A match result's ``sig``: a generated one that has the signature's form (64 lowercase
  hex digits) is replaced by the result's signature under the service's key
  (``RANKFLOW_CONTRACT_SIGNING_KEY``), as a match server signs. One without that form is
  left as generated: a request the schema refuses, and the service must refuse it.
* A board page's ``after``: a generated one of the cursor's alphabet (base64url) is replaced by
  a cursor built from it (docs/semantics/boards.md 5.1: the text of ``[score, reached_at,
  player_id]``), as a client sends back a page's ``next``. One outside that alphabet is left as
  generated, and the service must refuse it.

Requests that break the schema otherwise (negative data) are kept as generated.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any
from urllib.parse import unquote

import schemathesis

from rankflow.connectors.board_pages import Cursor, encode_cursor
from rankflow.state.score_events import MAX_TIME
from rankflow.state.signatures import sign

K_MAX = int(os.environ.get("RANKFLOW_CONTRACT_K_MAX", "20"))
KEY = bytes.fromhex(os.environ.get("RANKFLOW_CONTRACT_SIGNING_KEY", ""))
INTEGERS = ("version", "ts", "idle_ms", "points", "played_at")
SIGNATURE = re.compile(r"[0-9a-f]{64}")
CURSOR_ALPHABET = re.compile(r"[A-Za-z0-9_-]+")


def items(body: Any) -> list[dict[str, Any]]:
    """The objects of a body that is one object or an array of them."""
    return [item for item in (body if isinstance(body, list) else [body]) if isinstance(item, dict)]


@schemathesis.hook
def filter_query(context: Any, query: dict[str, Any] | None) -> bool:
    k = (query or {}).get("k")
    return not (type(k) is int and k > K_MAX)


@schemathesis.hook
def map_query(context: Any, query: dict[str, Any] | None) -> dict[str, Any] | None:
    after = (query or {}).get("after")
    if isinstance(after, str) and CURSOR_ALPHABET.fullmatch(after):
        return {**(query or {}), "after": encode_cursor(Cursor(len(after) * 7, len(after), after))}
    return query


@schemathesis.hook
def filter_body(context: Any, body: Any) -> bool:
    return not any(type(item.get(name)) is float and item[name] == int(item[name])
                   for item in items(body) for name in INTEGERS if name in item)


@schemathesis.hook
def filter_case(context: Any, case: Any) -> bool:
    if not case.operation.path.startswith("/matches/"):
        return True
    now = time.time_ns() // 1_000_000
    match_id = unquote(str((case.path_parameters or {}).get("match_id")))
    for result in items(case.body):
        played_at = result.get("played_at")
        if type(played_at) is int and now < played_at <= MAX_TIME:
            return False
        if isinstance(result.get("match_id"), str) and result["match_id"] != match_id:
            return False
    return True


def signed(result: dict[str, Any], match_id: Any) -> dict[str, Any]:
    """``result`` with its signature, if its ``sig`` has the form of one (a copy: examples share bodies)."""
    sig = result.get("sig")
    if not (isinstance(sig, str) and SIGNATURE.fullmatch(sig)):
        return result
    try:
        return {**result, "sig": sign(KEY, result["game_id"], match_id, result["player_id"], result["points"],
                                      result["played_at"])}
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        return result  # a field the schema refuses: the service refuses the result for it


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    if not case.operation.path.startswith("/matches/"):
        return
    match_id = unquote(str((case.path_parameters or {}).get("match_id")))  # the server's (schemathesis
    # sends a value unquoted then quoted: one of the coverage phase arrives here percent-encoded)
    if isinstance(case.body, list):
        case.body = [signed(r, match_id) if isinstance(r, dict) else r for r in case.body]
    elif isinstance(case.body, dict):
        case.body = signed(case.body, match_id)
