"""``GET /rankings``: the latest consistent ranking, or an honest answer why not.

Reads come from Redis only, never from the flow. When Redis has no usable ranking
(it lost its data, it is unreachable) the answer is ``503`` with the reason and, if
this process has seen one, the last ranking marked ``stale`` with its age.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from rankflow.reader import RankingReader, Reading

router = APIRouter()


def ranking_body(reading: Reading, k: int) -> dict[str, Any]:
    snap = reading.snapshot
    assert snap is not None
    return {
        "snapshot_id": snap["snapshot_id"],
        "published_at": snap["published_at"],
        "age_ms": reading.age_ms,
        "stale": reading.stale,
        "positions": snap["positions"],
        "total_listeners": snap["total_listeners"],
        "items": snap["items"][:k],
    }


@router.get("/rankings", summary="The top K songs of the latest snapshot",
            responses={400: {"description": "k outside 1..K_max"},
                       503: {"description": "no usable ranking (the last one, if any, comes marked stale)"}})
def get_rankings(request: Request, k: int = Query(10, description="how many songs, 1..K_max")) -> JSONResponse:
    reader: RankingReader = request.app.state.reader
    reading = reader.read()
    if reading.snapshot is None:
        return JSONResponse({"error": reading.problem}, status_code=503)
    k_max = reading.snapshot["k_max"]
    if not 1 <= k <= k_max:
        return JSONResponse({"error": f"k must be between 1 and {k_max}, got {k}"}, status_code=400)
    body = ranking_body(reading, k)
    if reading.stale:
        return JSONResponse({"error": reading.problem, **body}, status_code=503)
    return JSONResponse(body)
