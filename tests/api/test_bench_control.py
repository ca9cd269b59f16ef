"""The capacity benchmark's control route (``api.bench_control``): mounted only when asked for,
answered by the same server path as the hot reads, counted like them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx

from rankflow.api import bench_control
from rankflow.api.prepared import PreparedAnswers
from rankflow.services import free_port
from tests.api.test_prepared import Metrics


def test_the_control_is_mounted_only_when_asked_for():
    assert bench_control.control_routes({}) == []
    assert bench_control.control_routes({bench_control.ENV: "0"}) == []
    routes = bench_control.control_routes({bench_control.ENV: "1"})
    prepared = PreparedAnswers(object(), routes, {}, Metrics())
    assert prepared.answer(bench_control.PATH, b"") == b"{}"
    assert prepared.answer(bench_control.PATH, b"k=1") is None and prepared.answer(bench_control.PATH + "/x", b"") is None


def serve(redis_url: str, namespace: str, **env: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "serve", "--port", str(port), "--redis", redis_url,
                               "--namespace", namespace, "--products", "listeners"],
                              env={**{k: v for k, v in os.environ.items() if k != bench_control.ENV}, **env},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(base + "/livez")
            return server, base
        except httpx.ConnectError:
            assert time.monotonic() < deadline and server.poll() is None, "the service did not start"
            time.sleep(0.1)


def test_a_service_answers_the_control_only_when_the_benchmark_asks(redis_url, namespace):
    for asked in (True, False):
        server, base = serve(redis_url, namespace, **({bench_control.ENV: "1"} if asked else {}))
        try:
            with httpx.Client(base_url=base) as client:  # keep-alive HTTP/1.1 GETs: the protocol's own path
                answers = [client.get(bench_control.PATH) for _ in range(3)]
                metrics = client.get("/metrics").text
            if asked:
                assert [(r.status_code, r.content, r.headers["content-type"]) for r in answers] == \
                    [(200, b"{}", "application/json")] * 3
                assert f'rankflow_api_requests_total{{route="{bench_control.PATH}",status="200"}} 3.0' in metrics
            else:
                assert {r.status_code for r in answers} == {404}
                assert bench_control.PATH not in metrics
        finally:
            server.terminate()
            server.wait(15)
