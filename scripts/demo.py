"""``make demo``: every product, live, until Ctrl-C.

A local Redis and broker; three topics fed with generated traffic whose event time is the
present (each generator starts ``now`` and ``rankflow.produce.produce_live`` sends each
line when the clock reaches its time): playback events, signed match results and chat
messages; the three flows following them live (``rankflow run``, ``--flow boards``,
``--flow activity``); and one ``rankflow serve`` mounting all three products, with the
dashboard. Prints the page's address once every product has published (``/readyz``).

    python scripts/demo.py [--port 8000] [--rate 500] [--score-rate 20] [--message-rate 100]

Small rates keep it light on a laptop (the local broker takes most of a core when it is
consumed live). The processes' logs and the dead letters are in the printed folder, which
stays after the demo (``rm -r`` it).
"""

from __future__ import annotations

import argparse
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rankflow.connectors.kafka import ensure_topic  # noqa: E402
from rankflow.generate import LogGenerator  # noqa: E402
from rankflow.generate_messages import MessageChaos, MessageLogGenerator  # noqa: E402
from rankflow.generate_scores import DAY_MS, ScoreChaos, ScoreLogGenerator  # noqa: E402
from rankflow.produce import field_key, produce_live, user_key  # noqa: E402
from rankflow.services import LocalRedis, LocalTansu, free_port, stop_processes  # noqa: E402

ENDLESS = 10**12
"""Lines a generator is asked for: more than a demo ever sends."""


def rate(text: str) -> float:
    value = float(text)
    if not 0 < value <= 2000:
        raise argparse.ArgumentTypeError(f"expected a rate in (0, 2000] events a second, got {text}")
    return value


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="demo", description="every product live: traffic, flows, service, dashboard")
    p.add_argument("--port", type=int, default=8000, help="the service's port (default: %(default)s)")
    p.add_argument("--rate", type=rate, default=500, help="playback events a second (default: %(default)s)")
    p.add_argument("--score-rate", type=rate, default=20, help="match results a second (default: %(default)s)")
    p.add_argument("--message-rate", type=rate, default=100, help="chat messages a second (default: %(default)s)")
    p.add_argument("--users", type=int, default=20_000, help="listeners (default: %(default)s)")
    p.add_argument("--songs", type=int, default=2_000, help="songs (default: %(default)s)")
    p.add_argument("--players", type=int, default=5_000, help="players (default: %(default)s)")
    p.add_argument("--workspaces", type=int, default=50, help="chat workspaces (default: %(default)s)")
    p.add_argument("--partitions", type=int, default=2, help="partitions of each topic (default: %(default)s)")
    p.add_argument("--seed", type=int, default=int(time.time()), help="the generators' seed (default: the clock)")
    p.add_argument("--stale-after-ms", type=int, default=10_000,
                   help="the service marks an answer older than this stale (default: %(default)s)")
    a = p.parse_args(argv)
    for name in ("users", "songs", "players", "workspaces", "partitions", "stale_after_ms"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return a


def traffic(a: argparse.Namespace, key: bytes, now: int) -> dict[str, tuple[Iterable[bytes], str, str]]:
    """Each topic's endless lines from ``now`` on, with their key field and time field.

    Every generator's pace of event time is the rate asked for: playback events move event
    time 0..step_ms a step (2000 / step_ms a second), match results are spread over ``days``
    that hold ``ENDLESS`` of them at ``--score-rate``, messages come ``--message-rate`` a
    second of event time. Chaos stays on (the dead letters are part of the demo), fewer
    of the late and invalid lines than in a test log.
    """
    playback = LogGenerator(a.users, a.songs, a.seed, start_ms=now, step_ms=max(1, round(2000 / a.rate)))
    days = ENDLESS * 1000 / (a.score_rate * DAY_MS)
    scores = ScoreLogGenerator(a.players, 4, ENDLESS, a.seed, start_ms=now, days=days, key=key,
                               chaos=ScoreChaos().scaled(0.3))
    messages = MessageLogGenerator(a.workspaces, 60, 300, a.seed, start_ms=now, rate=a.message_rate,
                                   chaos=MessageChaos().scaled(0.3))
    return {"playback-events": (playback.lines(ENDLESS), "user_id", "ts"),
            "score-events": (scores.lines(ENDLESS), "player_id", "received_at"),
            "messages": (messages.lines(ENDLESS), "workspace_id", "ts")}


def feed(brokers: str, topic: str, lines: Iterable[bytes], key_field: str, time_field: str,
         stop: threading.Event) -> None:
    key = user_key if key_field == "user_id" else (lambda line: field_key(line, key_field))
    try:
        produce_live(brokers, topic, lines, key, time_field, stop)
    except Exception as exc:  # the demo goes on without this topic's traffic; say why
        print(f"demo: traffic to {topic} stopped: {exc}", file=sys.stderr, flush=True)


def wait_ready(url: str, procs: list[subprocess.Popen], timeout: float = 120.0) -> bool:
    """Until every product has a usable snapshot (``/readyz``), a process exits, or ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and all(proc.poll() is None for proc in procs):
        try:
            if httpx.get(url + "readyz", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop cleanly on SIGTERM as on Ctrl-C
    work = Path(tempfile.mkdtemp(prefix="rankflow-demo-"))
    signing_key = secrets.token_bytes(32)
    stop, procs, logs = threading.Event(), [], []
    rds = broker = None
    try:
        rds = LocalRedis(free_port(), work / "redis").start()
        broker = LocalTansu(free_port(), work / "tansu").start()
        lines = traffic(a, signing_key, int(time.time() * 1000))
        for topic in lines:
            ensure_topic(broker.url, topic, a.partitions)

        def start(name: str, *args: str) -> None:
            log: IO[bytes] = open(work / f"{name}.log", "wb")
            logs.append(log)
            procs.append(subprocess.Popen([sys.executable, "-m", "rankflow.cli", *args, "--redis", rds.url],
                                          stdout=log, stderr=subprocess.STDOUT))

        kafka = f"kafka:{broker.url}"
        start("listeners", "run", "--input", f"{kafka}/playback-events",
              "--dead-letter", f"jsonl:{work / 'dead-letters-playback.jsonl'}")
        start("boards", "run", "--flow", "boards", "--input", f"{kafka}/score-events",
              "--signing-key", signing_key.hex(), "--dead-letter", f"jsonl:{work / 'dead-letters-scores.jsonl'}")
        start("activity", "run", "--flow", "activity", "--input", f"{kafka}/messages",
              "--dead-letter", f"jsonl:{work / 'dead-letters-messages.jsonl'}")
        start("serve", "serve", "--host", "127.0.0.1", "--port", str(a.port), "--stale-after-ms",
              str(a.stale_after_ms), "--kafka", f"{kafka}/playback-events", "--score-kafka",
              f"{kafka}/score-events", "--signing-key", signing_key.hex())
        for topic, (topic_lines, key_field, time_field) in lines.items():
            threading.Thread(target=feed, args=(broker.url, topic, topic_lines, key_field, time_field, stop),
                             name=f"traffic-{topic}", daemon=True).start()
        url = f"http://127.0.0.1:{a.port}/"
        if not wait_ready(url, procs):
            print(f"demo: the products did not all publish; the logs are in {work}", file=sys.stderr, flush=True)
            return 1
        print(f"\n  rankflow demo: open {url}  (API: {url}docs, metrics: {url}metrics)\n"
              f"  live traffic, stamped now: {a.rate:g} playback events/s, {a.score_rate:g} match results/s, "
              f"{a.message_rate:g} messages/s\n"
              f"  logs and dead letters: {work}\n  Ctrl-C to stop\n", flush=True)
        while all(proc.poll() is None for proc in procs):
            time.sleep(0.5)
        print(f"demo: a process of the demo exited; stopping (its log is in {work})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stop.set()
        stop_processes(procs)
        for log in logs:
            log.close()
        if broker is not None:
            broker.stop()
        if rds is not None:
            rds.stop()


if __name__ == "__main__":
    sys.exit(main())
