"""``GET /``: a live dashboard of every product mounted, and ``GET /dashboard/settings``.

One self-contained page (no CDN, no library: the service may run where the internet is
not; its charts are SVG the page draws, each with axes and units). Each panel shows one
answer of the API at a time, asked again every second, and says what that answer says:
its ``snapshot_id``, its ``age_ms`` (the server's clock, not the browser's) and whether it
is live or stale:

* listeners: ``GET /rankings?k=K``, a bar chart of the top K (K selectable), the listener
  total, and a chart of each new snapshot's age when first seen; live or stale is the
  answer's own ``stale`` (a ``503`` with the last ranking seen is stale, with its error);
* recent plays: ``GET /rankings/recent``, a bar chart of plays in the window, its bounds;
* boards: a game and a board (or an alias) from ``GET /boards``, the board's top
  (``GET /boards/{game}/{board}/top``), and a player's rank and neighbours
  (``.../players/{player}`` and ``.../around``);
* activity: ``GET /activity`` (the window, the watermark and its lag, as they are, in
  days if they are days), and a workspace's top (``GET /activity/top?workspace=``) or the
  global top.

Every answer a panel shows carries ``stale`` (the listeners', the boards' and the
activity's: ``age_ms`` above ``--stale-after-ms``, decided by the service per request), and
the page takes it at its word: it has no rule of its own. ``GET /dashboard/settings`` gives
it the products mounted (whose panels it shows) and the bound, which it only shows.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from rankflow.api.responses import json_response

router = APIRouter()


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def dashboard() -> HTMLResponse:
    page = resources.files("rankflow.api").joinpath("static/dashboard.html").read_text(encoding="utf-8")
    return HTMLResponse(page)


@router.get("/dashboard/settings", include_in_schema=False)
async def dashboard_settings(request: Request) -> Response:
    """What the page needs of the service's configuration: the stale bound and the products."""
    settings = request.app.state.settings
    return json_response({"stale_after_ms": settings.stale_after_ms, "products": list(settings.products)})
