"""``POST /matches/{match_id}/result``: match servers hand signed results to the score topic.

Contract (BOARDS.md section 1; the seed's API table):

* The body is one result ``{game_id, player_id, points, played_at, sig}`` or a JSON
  array of them (the players of one match, at most ``MAX_RESULTS_PER_REQUEST``). The
  path names the match: each result gets ``match_id`` from it, and one whose body
  holds another ``match_id`` is refused (``match_id_mismatch``). Every result is
  stamped with ``received_at``, the server's clock in ms when the request was
  checked (one value for the whole request; a ``received_at`` in the body is
  replaced). Other fields are kept and ignored, as the flow does.
* Each result passes BOARDS.md checks 1 to 6 (``invalid_json``, ``not_an_object``,
  ``missing_field``, ``wrong_type``, ``out_of_range``, ``bad_signature`` when the
  service has a signing key: ``--signing-key`` / ``$RANKFLOW_SIGNING_KEY``), and
  check 8 (``in_future``: played more than 60 s after this receipt), which needs
  nothing but the stamp: a result the flow would dead-letter for sure is refused
  while the match server can still hear about it. Check 7 and duplicates need the
  player's history: the flow decides them.
* ``400 {error, index, reason, detail}`` names the first bad result (``index`` null
  when the body as a whole is wrong: not JSON, empty, too many) and nothing of the
  request is produced. ``401``, ``413``, ``503`` and the ``202`` after the broker
  acknowledged every result are those of ``POST /events`` (``api.ingest``), with
  the score topic of ``--score-kafka``, keyed by ``player_id``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials

from rankflow.api.ingest import Checked, Records, as_batch, bearer, ingest_responses, produce_request
from rankflow.state.board_rules import FUTURE_MS
from rankflow.state.events import InvalidEvent
from rankflow.state.score_events import loads_json, validate_score

MAX_RESULTS_PER_REQUEST = 1000
MATCH_ID_MISMATCH = "match_id_mismatch"
IN_FUTURE = "in_future"
_LONG_DIGITS = 40  # an integer literal this long is out of range whatever its digits

router = APIRouter()


def check_results(body: bytes, match_id: str, key: bytes | None, received_at: int) -> Checked:
    """The records of a request's results, or the ``400`` body naming the first bad one."""
    try:
        parsed = loads_json(body)
    except InvalidEvent as exc:
        return [], refusal(None, exc.reason, exc.detail)
    if _rounded_integers(parsed):
        parsed = _exact_json(body)
    results, problem = as_batch(parsed, MAX_RESULTS_PER_REQUEST)
    if problem is not None:
        return [], refusal(None, problem["reason"], problem["detail"])
    records: Records = []
    for index, result in enumerate(results):
        try:
            records.append(stamped(result, match_id, key, received_at))
        except InvalidEvent as exc:
            return [], refusal(index, exc.reason, exc.detail)
    return records, None


def stamped(result: Any, match_id: str, key: bytes | None, received_at: int) -> tuple[bytes, bytes]:
    """One result as its ``(player_id, event JSON)`` record, or :class:`InvalidEvent`."""
    if type(result) is dict:
        if "match_id" in result and result["match_id"] != match_id:
            raise InvalidEvent(MATCH_ID_MISMATCH, f"the body's match_id {result['match_id']!r} is not the "
                                                  f"path's {match_id!r}")
        result = {**result, "match_id": match_id, "received_at": received_at}
    _, _, player, _, played_at, _ = validate_score(result, b"", key)
    if played_at > received_at + FUTURE_MS:
        raise InvalidEvent(IN_FUTURE, f"played_at is more than {FUTURE_MS} ms after received_at {received_at}")
    return player.encode(), orjson.dumps(result)


def refusal(index: int | None, reason: str, detail: str) -> dict[str, Any]:
    return {"error": "invalid result; nothing was produced", "index": index, "reason": reason, "detail": detail}


def _rounded_integers(parsed: Any) -> bool:
    """Whether a result holds a float where BOARDS.md wants an integer: orjson's reading
    of an integer beyond 64 bits (or a real float, which the exact reading keeps)."""
    results = parsed if isinstance(parsed, list) else [parsed]
    return any(type(r) is dict and (type(r.get("points")) is float or type(r.get("played_at")) is float)
               for r in results)


def _exact_json(body: bytes) -> Any:
    """The body read again with exact integers, so ``18446744073709551616`` points are
    ``out_of_range`` (an integer, too big), as in the flow, not ``wrong_type``. Only on
    that rare path; the body is JSON already (orjson read it)."""
    def exact_int(digits: str) -> int:
        if len(digits) <= _LONG_DIGITS:
            return int(digits)
        return -(10**_LONG_DIGITS) if digits[0] == "-" else 10**_LONG_DIGITS

    return json.loads(body, parse_int=exact_int)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@router.post("/matches/{match_id}/result", status_code=202, summary="Hand a match's signed results to Kafka",
             responses=ingest_responses("an invalid result (the first is named), none produced"))
async def post_match_result(request: Request, match_id: str,
                            credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> JSONResponse:
    key = request.app.state.settings.signing_key
    return await produce_request(request, credentials, request.app.state.score_producer,
                                 lambda body: check_results(body, match_id, key, now_ms()),
                                 "start the service with --score-kafka")
