"""``POST /matches/{match_id}/result``: match servers hand signed results to the score topic.

Contract (docs/semantics/boards.md section 1; the seed's API table):

* The body is one result ``{game_id, player_id, points, played_at, sig}`` or a JSON
  array of them (the players of one match, at most ``MAX_RESULTS_PER_REQUEST``). The
  path names the match, any id of 1 to 64 characters (``/`` too, as is or ``%2F``:
  the route takes the whole path up to its last ``/result``): each result gets
  ``match_id`` from it, and one whose body holds another ``match_id`` is refused
  (``match_id_mismatch``). Every result is stamped with ``received_at``, the server's
  clock in ms when the request was checked (one value for the whole request; a
  ``received_at`` in the body is replaced). The stamps are spliced into the result as
  written (:func:`with_stamps`): other fields reach the topic as sent, and are ignored, as the flow does.
* Each result, stamped, passes the flow's own checks 1 to 6 (``state.score_events.check_score``
  on the very bytes produced: ``invalid_json``, ``not_an_object``, ``missing_field``,
  ``wrong_type``, ``out_of_range``, ``bad_signature`` when the service has a signing
  key: ``--signing-key`` / ``$RANKFLOW_SIGNING_KEY``), so ingest accepts a result
  exactly when the flow's checks would, and
  check 8 (``in_future``: played more than 60 s after this receipt), which needs
  nothing but the stamp: a result the flow would dead-letter for sure is refused
  while the match server can still hear about it. Check 7 and duplicates need the
  player's history: the flow decides them.
* ``400 {error, index, reason, detail}`` names the first bad result (``index`` null
  when the body as a whole is wrong: not JSON, empty, too many) and nothing of the
  request is produced. ``401``, ``413``, ``503`` and the ``202`` after the broker
  acknowledged every result are those of ``POST /events`` (``api.ingest``, ``415`` too), with
  the score topic of ``--score-kafka``, keyed by ``player_id``.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials

from rankflow.api import paths  # noqa: F401 - registers {match_id:rest}
from rankflow.api.responses import UsageErrorsAre400
from rankflow.api.ingest import Checked, Records, bearer, body_items, ingest_responses, produce_request
from rankflow.api.schemas import bounded
from rankflow.api.schemas_boards import ResultRefused, results_body
from rankflow.state.board_rules import FUTURE_MS
from rankflow.state.events import InvalidEvent
from rankflow.state.json_spans import WHITESPACE, object_members
from rankflow.state.score_events import MAX_ID_CHARS, check_score, loads_json

MAX_RESULTS_PER_REQUEST = 1000
MATCH_ID_MISMATCH = "match_id_mismatch"
IN_FUTURE = "in_future"
router = APIRouter(route_class=UsageErrorsAre400)


def check_results(body: bytes, match_id: str, key: bytes | None, received_at: int) -> Checked:
    """The records of a request's results, or the ``400`` body naming the first bad one."""
    results = body_items(body, MAX_RESULTS_PER_REQUEST)
    if results.problem is not None:
        return [], refusal(None, results.problem["reason"], results.problem["detail"])
    records: Records = []
    for index, raw in enumerate(results.items):
        try:
            records.append(stamped(raw, match_id, key, received_at))
        except InvalidEvent as exc:
            return [], refusal(results.problem_index(index, exc.reason), exc.reason, exc.detail)
    return records, None


def stamped(raw: bytes, match_id: str, key: bytes | None, received_at: int) -> tuple[bytes, bytes]:
    """One result as its ``(player_id, event JSON)`` record, or :class:`InvalidEvent`.

    The record is the result as the match server wrote it, the stamps spliced in
    (:func:`with_stamps`), and it passes the flow's own checks 1 to 6
    (``state.score_events.check_score``) as those very bytes: ingest accepts a result
    exactly when the flow would, before the checks that need the player's history."""
    result = loads_json(raw)  # check 1, as the flow reads it
    if type(result) is dict:
        if "match_id" in result and result["match_id"] != match_id:
            raise InvalidEvent(MATCH_ID_MISMATCH, f"the body's match_id {result['match_id']!r} is not the "
                                                  f"path's {match_id!r}")
        raw = with_stamps(raw, None if "match_id" in result else match_id, received_at)
    _, _, player, _, played_at, _ = check_score(raw, key)
    if played_at > received_at + FUTURE_MS:
        raise InvalidEvent(IN_FUTURE, f"played_at is more than {FUTURE_MS} ms after received_at {received_at}")
    return player.encode(), raw


def with_stamps(raw: bytes, match_id: str | None, received_at: int) -> bytes:
    """A result object's text with ``received_at`` (and ``match_id``, unless ``None``)
    at its end: every other member as written, never re-encoded, so an integer beyond
    64 bits or a deep extra field reaches the topic as sent. A ``received_at`` of the
    body is taken out (the stamp replaces it); otherwise the text is kept whole.

    >>> with_stamps(b'{"a": 18446744073709551617}', "m1", 5)
    b'{"a": 18446744073709551617,"match_id":"m1","received_at":5}'
    >>> with_stamps(b'{"received_at": 1, "a": [1]}', None, 5)
    b'{"a": [1],"received_at":5}'
    """
    stamps = [] if match_id is None else [b'"match_id":' + orjson.dumps(match_id)]
    stamps.append(b'"received_at":%d' % received_at)
    members = object_members(raw)
    kept = [raw[start:end] for name, start, end in members if name != "received_at"]
    if len(kept) == len(members):
        head = raw[:raw.rindex(b"}")].rstrip(WHITESPACE)
        return head + (b"," if members else b"") + b",".join(stamps) + b"}"
    return b"{" + b",".join(kept + stamps) + b"}"


def refusal(index: int | None, reason: str, detail: str) -> dict[str, Any]:
    return {"error": "invalid result; nothing was produced", "index": index, "reason": reason, "detail": detail}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@router.post("/matches/{match_id:rest}/result", status_code=202, summary="Hand a match's signed results to Kafka",
             responses=ingest_responses(ResultRefused, "an invalid result (the first is named), none produced"),
             openapi_extra=results_body(MAX_RESULTS_PER_REQUEST))
async def post_match_result(request: Request,
                            match_id: str = Path(description="the match (1 to 64 characters, '/' too): each result "
                                                             "gets it", examples=["m-20270101-0001"],
                                               **bounded(minLength=1, maxLength=MAX_ID_CHARS)),
                            credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> JSONResponse:
    key = request.app.state.settings.signing_key
    return await produce_request(request, credentials, request.app.state.score_producer,
                                 lambda body: check_results(body, match_id, key, now_ms()),
                                 "start the service with --score-kafka")
