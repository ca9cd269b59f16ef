"""The OpenAPI schema documents the cache validators on exactly the snapshot-backed reads."""

from __future__ import annotations

from rankflow.api.app import create_app
from rankflow.api.settings import Settings


def operations() -> dict[str, dict]:
    schema = create_app(Settings()).openapi()  # no lifespan: the schema needs no Redis
    return {path: ops["get"] for path, ops in schema["paths"].items() if "get" in ops}


def test_every_snapshot_backed_read_documents_its_validators_and_304() -> None:
    gets = operations()
    cached = [p for p in gets if p.startswith(("/rankings", "/songs/", "/boards", "/activity"))
              and not p.endswith("/stream")]
    assert {"/rankings", "/rankings/recent", "/songs/{song_id}"} <= set(cached)
    assert any(p.startswith("/boards/") for p in cached) and any(p.startswith("/activity") for p in cached)
    for path in cached:
        answers = gets[path]["responses"]
        assert set(answers["200"]["headers"]) == {"ETag", "Cache-Control", "Last-Modified"}, path
        assert set(answers["304"]["headers"]) == {"ETag", "Cache-Control", "Last-Modified"}, path
        assert "content" not in answers["304"], path
        assert all(answers[s]["headers"]["Cache-Control"]["description"].startswith("no-store")
                   for s in answers if s[0] in "45"), path
        assert any(p["name"] == "If-None-Match" and p["in"] == "header" for p in gets[path]["parameters"]), path


def test_streams_probes_and_metrics_document_no_validators() -> None:
    gets = operations()
    for path in [p for p in gets if p.endswith("/stream")] + ["/health", "/livez", "/readyz", "/metrics"]:
        assert "304" not in gets[path]["responses"], path
        assert "headers" not in gets[path]["responses"]["200"], path
