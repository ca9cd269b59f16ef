"""``GET /docs`` (Swagger UI) and ``GET /redoc`` (ReDoc) over ``/openapi.json``, their scripts
and styles served by the service itself, under ``/docs/assets/``.

FastAPI's own pages load them from a CDN: where the service runs without the internet
(an operator's network, a laptop on a train) they are blank. The assets are the files the
pinned PyPI package ``fastapi-offline`` ships (MIT; Swagger UI and ReDoc are Apache 2.0 and
MIT), read from its installed folder: nothing is fetched at run time, and a new version
comes with a new pin. Swagger UI's online validator badge is off (it would ask another host),
and both pages carry a Content-Security-Policy that lets them load nothing from another
host: ReDoc's side menu shows Redocly's logo from its CDN, which the browser then never asks
for (the menu shows the link's text alone).
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs/assets"
FOLDER = Path(fastapi_offline.__file__).parent / "static"
"""``swagger-ui-bundle.js``, ``swagger-ui.css``, ``redoc.standalone.js``, ``favicon.png``."""
POLICY = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
          "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:")
"""The pages' own files, their inline start-up script and styles, ReDoc's search worker: nothing else."""


def local(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = POLICY
    return page


def mount(app: FastAPI) -> None:
    """The two pages and their assets on ``app`` (made with ``docs_url=None, redoc_url=None``)."""
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    async def swagger() -> HTMLResponse:
        return local(get_swagger_ui_html(openapi_url=openapi_url, title=f"{app.title} - Swagger UI",
                                   swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{ASSETS}/favicon.png",
                                   swagger_ui_parameters={"validatorUrl": None}))

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return local(get_redoc_html(openapi_url=openapi_url, title=f"{app.title} - ReDoc",
                              redoc_js_url=f"{ASSETS}/redoc.standalone.js", redoc_favicon_url=f"{ASSETS}/favicon.png",
                              with_google_fonts=False))

    app.mount(ASSETS, StaticFiles(directory=FOLDER), name="docs-assets")
