"""Prometheus metrics of a run, served on ``--metrics-port``.

The flow's steps update plain per-process counters (a dict increment costs far
less than a Prometheus client call, and some run once per event); a collector
turns them into metrics when Prometheus scrapes. With ``--processes N`` each
process serves its own metrics on ``port + process index``; the snapshot metrics
come from the process that runs the merger. They listen on 127.0.0.1 unless the run
is given another address (``--metrics-host``): metrics tell anyone who can read them
about the input and its traffic, so exposing them is a choice.

==========================================  ===========================================
metric                                      meaning
==========================================  ===========================================
``rankflow_input_records_total{partition}``  records read per source partition
``rankflow_input_lag{partition}``            records (Kafka) or bytes (JSONL) not yet read
``rankflow_events_per_second``               input rate between the last two snapshots
``rankflow_events_total{verdict}``           what valid events did: ``repeated`` counts
                                             duplicates, ``superseded`` old devices and
                                             late retries, ``conflict_*`` invalid ones;
                                             ``timed_out`` playbacks a ``TIMEOUT`` removed,
                                             ``stale_timeout`` / ``early_timeout`` timers
                                             that changed nothing (docs/semantics/listeners.md 6)
``rankflow_dead_letters_total{reason}``      invalid events by reason (shape errors)
``rankflow_snapshot_age_seconds``            time since the last snapshot was published
``rankflow_publish_latency_seconds``         time of the Redis publish script (histogram)
``rankflow_timeouts_fired_total``            ``TIMEOUT`` events the sweeper wrote
                                             (``--idle-timeout-ms``, docs/semantics/listeners.md 6; the
                                             playbacks they removed are ``timed_out``)
``rankflow_timers_pending``                  sweeper timers armed (candidates, some
                                             stale: a heartbeat moves no timer)
``rankflow_timer_lag_seconds``               wall clock now - the oldest armed
                                             deadline (>= 0): how late the sweeper is
==========================================  ===========================================

The gauges of the last published snapshot are the flow's own: its snapshot type lists
them (``gauges()`` of ``state.snapshot.Snapshot``, ``state.board_snapshot.BoardsSnapshot``,
``state.activity_snapshot.ActivitySnapshot``) and this module exports what it is given.
Every flow has ``rankflow_snapshot_id`` and ``rankflow_partition_lag_seconds{partition}``
(how far each partition's counts trailed the input: the snapshot's ``partition_lag_ms``).

The same port answers an orchestrator's probes (docs/operations.md, health probes): ``GET
/livez`` is ``200`` while the process answers, ``GET /readyz`` ``200`` once the run has caught
up with its input the first time (``operators.catch_up``), else ``503`` with the reason. Every
other path is the metrics, as before.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Histogram, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from rankflow.operators.catch_up import CatchUp
from rankflow.state.snapshot import Gauge


class RunMetrics:
    """Plain counters the flow updates; read by :class:`_Collector` at scrape time."""

    def __init__(self) -> None:
        self.input_records: dict[str, int] = defaultdict(int)
        self.input_lag: dict[str, int] = {}
        self.dead_letters: dict[str, int] = defaultdict(int)
        self.verdicts: dict[str, int] | None = None
        self.last: tuple[dict[str, int], list[Gauge], float] | None = None
        """The last published snapshot's positions and gauges, and when (one attribute: a
        scrape reads them together)."""
        self.events_per_second = 0.0
        self.publishes: dict[str, int] = defaultdict(int)  # activity: "direct", "staged", "hurried", "spaced"
        self.timeouts_fired = 0  # the sweeper's TIMEOUT events (docs/semantics/listeners.md 6)
        self.timer_wheels: weakref.WeakSet[Any] = weakref.WeakSet()  # the user shards' state.timers.Timers
        self.registry = CollectorRegistry()
        self.publish_latency = Histogram(
            "rankflow_publish_latency_seconds", "Time of the Redis publish script",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=self.registry)
        self.registry.register(_Collector(self))
        self.catch_up = CatchUp()  # GET /readyz
        self._server_started = False
        self._lock = threading.Lock()

    def published(self, positions: dict[str, int], gauges: list[Gauge], seconds: float) -> None:
        """A snapshot at ``positions`` was stored in ``seconds``; ``gauges``: its own (its type's ``gauges()``)."""
        self.publish_latency.observe(seconds)
        now = time.time()
        if self.last is not None and now > self.last[2]:
            read = sum(positions.values()) - sum(self.last[0].values())
            self.events_per_second = max(0, read) / (now - self.last[2])
        self.last = positions, gauges, now
        self.catch_up.stored(positions)

    def serve(self, port: int, host: str) -> None:
        """Serve the metrics and the probes on ``host:port``, in a daemon thread (once per process)."""
        with self._lock:
            if not self._server_started:
                class Server(_Server):  # of the address's family (IPv6 too)
                    address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]

                server = make_server(host, port, _probes(make_wsgi_app(self.registry), self.catch_up), Server,
                                     handler_class=_QuietHandler)
                threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
                self._server_started = True


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _probes(metrics: WsgiApp, catch_up: CatchUp) -> WsgiApp:
    """``GET /livez`` and ``GET /readyz`` in front of prometheus-client's metrics application."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path not in ("/livez", "/readyz"):
            return metrics(environ, start_response)
        ready, body = (True, {"status": "live"}) if path == "/livez" else catch_up.verdict()
        data = json.dumps(body).encode()
        start_response("200 OK" if ready else "503 Service Unavailable",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    """A thread per request (a slow scrape never holds a probe), as prometheus-client's own server."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """No line per request on standard error: probes come every few seconds."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


class _Collector(Collector):
    def __init__(self, m: RunMetrics) -> None:
        self.m = m

    def collect(self) -> Iterator[Any]:
        m = self.m
        records = CounterMetricFamily("rankflow_input_records", "Records read", labels=["partition"])
        for part, n in list(m.input_records.items()):
            records.add_metric([part], n)
        yield records
        lag = GaugeMetricFamily("rankflow_input_lag", "Records (Kafka) or bytes (JSONL) not yet read",
                                labels=["partition"])
        for part, n in list(m.input_lag.items()):
            lag.add_metric([part], n)
        yield lag
        yield GaugeMetricFamily("rankflow_events_per_second", "Input rate between the last two snapshots",
                                value=m.events_per_second)
        verdicts = CounterMetricFamily("rankflow_events", "What valid events did", labels=["verdict"])
        for verdict, n in list((m.verdicts or {}).items()):
            verdicts.add_metric([verdict], n)
        yield verdicts
        dead = CounterMetricFamily("rankflow_dead_letters", "Invalid events by reason", labels=["reason"])
        for reason, n in list(m.dead_letters.items()):
            dead.add_metric([reason], n)
        yield dead
        publishes = CounterMetricFamily("rankflow_publishes", "Activity snapshots stored, by how: small in one "
                                        "script (direct), staged in short calls, or large in one script because "
                                        "the publisher was behind (hurried) or staged less than 10 s ago (spaced)",
                                        labels=["how"])
        for how, n in list(m.publishes.items()):
            publishes.add_metric([how], n)
        yield publishes
        yield from self._sweeper_metrics()
        yield from self._snapshot_metrics()

    def _sweeper_metrics(self) -> Iterator[Any]:
        m = self.m
        wheels = list(m.timer_wheels)
        if not wheels and not m.timeouts_fired:
            return
        yield CounterMetricFamily("rankflow_timeouts_fired", "TIMEOUT events written by the sweeper",
                                  value=m.timeouts_fired)
        yield GaugeMetricFamily("rankflow_timers_pending", "Sweeper timers armed",
                                value=sum(len(w) for w in wheels))
        oldest = [o for o in (w.oldest() for w in wheels) if o is not None]
        lag = max(0.0, time.time() - min(oldest) / 1000) if oldest else 0.0
        yield GaugeMetricFamily("rankflow_timer_lag_seconds", "Wall clock now - the oldest armed deadline",
                                value=lag)

    def _snapshot_metrics(self) -> Iterator[Any]:
        if self.m.last is None:
            return
        _, gauges, at = self.m.last
        yield from (_family(g) for g in gauges)
        yield GaugeMetricFamily("rankflow_snapshot_age_seconds", "Time since the last publish",
                                value=time.time() - at)


def _family(gauge: Gauge) -> GaugeMetricFamily:
    name = f"rankflow_{gauge.name}"
    if not isinstance(gauge.value, Mapping):
        return GaugeMetricFamily(name, gauge.doc, value=gauge.value)
    assert gauge.label is not None, f"{gauge.name}: a gauge of many values names its label"
    family = GaugeMetricFamily(name, gauge.doc, labels=[gauge.label])
    for label, value in gauge.value.items():
        family.add_metric([label], value)
    return family


METRICS = RunMetrics()
"""This process's metrics."""
