"""GET /rankings: fresh from Redis, 400 for a bad k, 503 (with the last ranking, stale) without one."""

from __future__ import annotations

from fastapi.testclient import TestClient

from api.app import Settings, create_app
from tests.events import ev


def test_rankings_fresh_then_stale_then_fresh(flow, redis_url, redis_client, namespace):
    lines = [ev("u1", "p1", "song_a", "START", 1), ev("u2", "p2", "song_b", "START", 1),
             ev("u3", "p3", "song_b", "START", 1)]
    path = flow.write_log(lines)
    with TestClient(create_app(Settings(redis_url=redis_url, namespace=namespace))) as client:
        assert client.get("/rankings").status_code == 503  # nothing published yet, nothing seen
        flow.run(path, namespace=namespace, k_max=5)
        r = client.get("/rankings", params={"k": 1})
        assert r.status_code == 200
        body = r.json()
        assert body["items"] == [{"rank": 1, "song_id": "song_b", "listeners": 2}]
        assert body["stale"] is False and body["total_listeners"] == 3 and body["age_ms"] >= 0
        assert client.get("/rankings", params={"k": 6}).status_code == 400
        assert client.get("/rankings", params={"k": 0}).status_code == 400

        redis_client.delete(*redis_client.keys(f"{{{namespace}}}:*"))  # Redis lost its data
        r = client.get("/rankings", params={"k": 2})
        assert r.status_code == 503
        assert r.json()["stale"] is True and r.json()["snapshot_id"] == body["snapshot_id"]
        assert "no usable ranking" in r.json()["error"]

        flow.run(path, namespace=namespace, k_max=5)  # a rebuild or the live run restores it
        r = client.get("/rankings", params={"k": 2})
        assert r.status_code == 200 and r.json()["stale"] is False
