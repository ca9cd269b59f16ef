"""``/docs`` and ``/redoc`` render in a real headless browser (Debian's chromium, as the
dashboard's test) with every request to another host refused: the pages work offline, and
ask no other host for anything (their Content-Security-Policy keeps ReDoc from asking for
Redocly's logo).

The service runs with a Redis that does not answer (the schema needs none); screenshots
are kept in ``test-artifacts/``.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Route, sync_playwright

from rankflow.api.app import Settings, create_app
from rankflow.services import free_port
from tests.api.raw_http import served
from tests.api.test_dashboard import CHROMIUM_ARGS, chromium

pytestmark = pytest.mark.browser
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
SUMMARY = "The top K songs of the latest snapshot"  # GET /rankings, as both pages show it


def test_swagger_ui_and_redoc_render_with_no_other_host():
    app = create_app(Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0"))
    refused: list[str] = []

    def local_only(route: Route) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    ARTIFACTS.mkdir(exist_ok=True)
    with served(app) as port, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.route("**/*", local_only)
            page.goto(f"http://127.0.0.1:{port}/docs")
            page.wait_for_selector(".opblock-summary-path", timeout=30_000)
            operations = sum(len(methods) for methods in app.openapi()["paths"].values())
            assert page.locator(".opblock").count() == operations  # one block per operation, all listed
            page.get_by_text(SUMMARY).first.wait_for(timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "docs.png"))
            page.goto(f"http://127.0.0.1:{port}/redoc")
            page.get_by_text(SUMMARY).first.wait_for(timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "redoc.png"))
        finally:
            browser.close()
    assert refused == [], refused
