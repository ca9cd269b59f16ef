"""Hosts as Linux network namespaces, for the tests of one run over several machines.

A cluster is a services namespace holding a bridge (``10.40.0.1``), Redis and the broker
(Tansu), and one namespace per host, each joined to the bridge by a veth pair and given its
own address (``10.40.0.11``, ``.12``, ...). The bridge lives in the services namespace, not in
the machine's own, so nothing of a cluster is visible outside its namespaces: two test runs
side by side use the same addresses without meeting. Names carry the test process's pid and a
random tag; :meth:`Cluster.down` kills whatever runs inside and deletes every namespace, and
:func:`sweep_stale` deletes the namespaces of test processes that died without doing so.

The test process itself stays in the machine's namespace and reaches Redis and the broker
through :func:`rankflow.services.in_netns` (a thread that enters the services namespace). A
host's link is cut on the bridge's side (``ip link set vN down``): the host and the others then
see nothing at all from one another, as with a pulled cable.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import redis
from confluent_kafka import Consumer, KafkaError, TopicPartition

from rankflow.connectors.kafka import KafkaEndpoint, topic_partitions
from rankflow.produce import produce_file
from rankflow.services import LocalRedis, LocalTansu, in_netns

T = TypeVar("T")
SUBNET = "10.40.0"
SERVICES_IP = f"{SUBNET}.1"
REDIS_PORT, KAFKA_PORT, FLOW_PORT = 6379, 9092, 7000
RANKFLOW = [sys.executable, "-m", "rankflow.cli"]
_OURS = re.compile(r"^rf(\d+)-[0-9a-f]{4}-")


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def netns_names() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], check=True, capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def delete_netns(name: str) -> None:
    """Kill every process inside ``name``, then delete it."""
    pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    subprocess.run(["ip", "netns", "del", name], capture_output=True)


def sweep_stale() -> None:
    """Delete the namespaces left by test processes that no longer exist (killed outright)."""
    for name in netns_names():
        match = _OURS.match(name)
        if match is None:
            continue
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            delete_netns(name)
        except PermissionError:
            pass


@dataclass(frozen=True)
class Host:
    name: str  # its network namespace
    ip: str
    link: str  # its veth's end on the bridge, in the services namespace


@dataclass
class Process:
    """A ``rankflow`` command started on a host; its standard error goes to a file."""

    proc: subprocess.Popen
    stderr: Path
    stdout: Path

    def lines(self) -> list[str]:
        return self.stderr.read_text().splitlines() if self.stderr.exists() else []

    def errors(self) -> list[str]:
        """The lines a person is told why it stopped by: errors, refusals, tracebacks."""
        return [line for line in self.lines() if " ERROR " in line or line.startswith(("rankflow:", "Traceback"))
                or "Error" in line.split(" ", 1)[0]]


class Cluster:
    def __init__(self, tmp: Path, hosts: int = 3) -> None:
        self.tmp = tmp
        self.tag = f"rf{os.getpid()}-{uuid.uuid4().hex[:4]}"
        self.services = f"{self.tag}-svc"
        self.hosts = [Host(f"{self.tag}-h{i}", f"{SUBNET}.{10 + i}", f"v{i}") for i in range(1, hosts + 1)]
        self.redis_url = f"redis://{SERVICES_IP}:{REDIS_PORT}/0"
        self.kafka = f"{SERVICES_IP}:{KAFKA_PORT}"
        self._services: list[LocalRedis | LocalTansu] = []
        self.started: list[Process] = []
        self._made: list[str] = []

    def up(self) -> Cluster:
        sweep_stale()
        self._netns(self.services)
        ip("-n", self.services, "link", "add", "br0", "type", "bridge")
        ip("-n", self.services, "addr", "add", f"{SERVICES_IP}/24", "dev", "br0")
        ip("-n", self.services, "link", "set", "br0", "up")
        for host in self.hosts:
            self._netns(host.name)
            ip("-n", self.services, "link", "add", host.link, "type", "veth", "peer", "name", "eth0", "netns", host.name)
            ip("-n", self.services, "link", "set", host.link, "master", "br0", "up")
            ip("-n", host.name, "addr", "add", f"{host.ip}/24", "dev", "eth0")
            ip("-n", host.name, "link", "set", "eth0", "up")
        self._services = [LocalRedis(REDIS_PORT, self.tmp / "redis", host=SERVICES_IP, netns=self.services).start(),
                          LocalTansu(KAFKA_PORT, self.tmp / "tansu", host=SERVICES_IP, netns=self.services).start()]
        return self

    def _netns(self, name: str) -> None:
        ip("netns", "add", name)
        self._made.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    def down(self) -> None:
        self.stop_all()
        for service in self._services:
            service.stop()
        for name in reversed(self._made):
            delete_netns(name)

    def stop_all(self) -> None:
        for started in self.started:
            if started.proc.poll() is None:
                started.proc.kill()
                started.proc.wait()
        self.started = []

    def start(self, host: Host, args: list[str], name: str) -> Process:
        """``rankflow ARGS`` on ``host``."""
        stderr, stdout = self.tmp / f"{name}.stderr", self.tmp / f"{name}.stdout"
        with open(stderr, "w") as err, open(stdout, "w") as out:
            proc = subprocess.Popen(["ip", "netns", "exec", host.name, *RANKFLOW, *args], stdout=out, stderr=err,
                                    text=True)
        started = Process(proc, stderr, stdout)
        self.started.append(started)
        return started

    def start_run(self, places: list[tuple[Host, int]], args: list[str], run_id: str) -> list[Process]:
        """One run as one process per place (a host and a port), process ``i`` at ``places[i]``."""
        addresses = ",".join(f"{host.ip}:{port}" for host, port in places)
        return [self.start(host, ["run", *args, "--redis", self.redis_url, "--addresses", addresses, "--process-id",
                                  str(i), "--run-id", run_id], f"{run_id}-{i}")
                for i, (host, _) in enumerate(places)]

    def places(self, count: int | None = None) -> list[tuple[Host, int]]:
        """``count`` processes over the hosts in turn (more than one on a host: other ports)."""
        count = count or len(self.hosts)
        return [(self.hosts[i % len(self.hosts)], FLOW_PORT + i // len(self.hosts)) for i in range(count)]

    def cut(self, host: Host) -> None:
        ip("-n", self.services, "link", "set", host.link, "down")

    def mend(self, host: Host) -> None:
        ip("-n", self.services, "link", "set", host.link, "up")

    def with_redis(self, call: Callable[[redis.Redis], T]) -> T:
        """``call(client)`` with a client of the cluster's Redis (from inside its namespace)."""
        def inside() -> T:
            client = redis.Redis.from_url(self.redis_url)
            try:
                return call(client)
            finally:
                client.close()
        return in_netns(self.services, inside)

    def produce(self, path: Path, topic: str, partitions: int, key_field: str) -> None:
        in_netns(self.services, lambda: produce_file(str(path), KafkaEndpoint(self.kafka, topic), partitions,
                                                      progress=False, key_field=key_field))

    def read_partitions(self, topic: str) -> dict[str, list[bytes]]:
        """Every message of ``topic`` by partition (named as snapshots name them: ``TOPIC/N``), in order."""
        return in_netns(self.services, lambda: _read_partitions(self.kafka, topic))


def _read_partitions(brokers: str, topic: str) -> dict[str, list[bytes]]:
    parts = topic_partitions(brokers, topic)
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "tests", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    out: dict[str, list[bytes]] = {f"{topic}/{p}": [] for p in parts}
    done: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(done) < len(parts):
            assert time.monotonic() < deadline, f"{topic} not read to its end"
            for m in consumer.consume(1000, 0.2):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        done.add(m.partition())
                        continue
                    raise RuntimeError(m.error())
                out[f"{topic}/{m.partition()}"].append(m.value())
    finally:
        consumer.close()
    return out
