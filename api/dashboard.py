"""``GET /``: a live dashboard of the top K, fed by ``GET /rankings/stream``.

One self-contained page (no CDN: the service may run where the internet is not): a
bar chart of the top K (K selectable), the snapshot id, its age and the listener
total, and a line of how fresh each snapshot was when it arrived; and a score-board
picker: a game and a board (or an alias) from ``GET /boards``, its top 10 kept live
by ``GET /boards/{game}/{board}/stream``; and an activity view: a workspace (typed, or
picked from those in the global top; empty for all workspaces), its top 10 channels
kept live by ``GET /activity/stream?workspace=`` (all workspaces: ``GET
/activity/global/top`` each second), and from ``GET /activity`` each second the
current window's bounds as UTC times, the watermark, and its lag behind now and
behind the snapshot's publication.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter()


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def dashboard() -> HTMLResponse:
    page = resources.files("rankflow.api").joinpath("static/dashboard.html").read_text(encoding="utf-8")
    return HTMLResponse(page)
