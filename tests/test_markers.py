"""The service markers hold (``tests/markers.py``): a test that uses a service carries its
marker, and a test without one cannot start the service, so a missing mark fails."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from rankflow import services
from rankflow.services import LocalRedis, LocalTansu, free_port


def test_a_service_fixture_marks_its_test(request, redis_client, kafka_brokers):
    """``redis_client`` uses ``redis_url`` (not named here): the closure of fixtures counts."""
    assert request.node.get_closest_marker("redis") is not None
    assert request.node.get_closest_marker("broker") is not None
    assert redis_client.ping()


def test_an_unmarked_test_cannot_start_a_service(tmp_path):
    for command in ("redis-server", "chromium", "ip"):
        refused = subprocess.run([shutil.which(command) or command], capture_output=True, text=True)
        assert refused.returncode == 97 and "not marked" in refused.stderr, command
    with pytest.raises(RuntimeError, match="did not start"):
        LocalRedis(free_port(), tmp_path / "redis").start(timeout=5)
    with pytest.raises(RuntimeError, match="not marked broker"):
        services.tansu_binary()
    with pytest.raises(RuntimeError, match="not marked broker"):
        LocalTansu(free_port(), tmp_path / "tansu").start(timeout=5)


@pytest.mark.redis
def test_a_marked_test_finds_the_real_redis_server():
    path = shutil.which("redis-server")
    assert path is not None and "refusing" not in path
