"""The cluster of hosts as network namespaces (``tests/cluster/netns.py``), made once per test
module and deleted after it, whatever happened."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.cluster.netns import Cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if os.geteuid() != 0:  # CI runs as root (.ci/run); elsewhere: sudo, or -m "not netns"
        pytest.fail("the cluster tests make network namespaces (ip netns): run them as root, or leave them out "
                    "with -m 'not netns'")
    made = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield made.up()
    finally:
        made.down()


@pytest.fixture
def hosts(cluster: Cluster) -> Iterator[Cluster]:
    """The cluster for one test: every link up again and every process it started gone after it."""
    try:
        yield cluster
    finally:
        cluster.stop_all()
        for host in cluster.hosts:
            cluster.mend(host)
