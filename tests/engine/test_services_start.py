"""``python -m rankflow.services start`` on a port another process holds: one line, exit 2, and
nothing started (before, the other process's Redis answered the readiness check while ours
failed to bind, and the command printed its URL as if it were ours)."""
import subprocess
import sys

import pytest
import redis

from rankflow.services import LocalRedis, PortTaken


def test_a_taken_port_is_refused_with_one_line(tmp_path, redis_url):
    port = redis.Redis.from_url(redis_url).connection_pool.connection_kwargs["port"]
    done = subprocess.run([sys.executable, "-m", "rankflow.services", "start", "redis", "--port", str(port),
                           "--dir", str(tmp_path / "mine")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0] and "another process" in lines[0], lines
    assert not (tmp_path / "mine" / "redis.pid").exists(), "nothing was started"
    with pytest.raises(PortTaken):
        LocalRedis(port, tmp_path / "again").start()
    assert redis.Redis.from_url(redis_url).ping(), "the other process's server is untouched"
