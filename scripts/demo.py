"""``make demo``: the whole thing, live, until Ctrl-C.

A local Redis and broker, generated playback traffic at a steady rate, the flow
following the topic, and ``rankflow serve`` with the dashboard. Prints the page's
address.

    python scripts/demo.py [--port 8000] [--rate 500] [--users 20000] [--songs 2000]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rankflow.connectors.kafka import ensure_topic  # noqa: E402
from rankflow.produce import produce_steady  # noqa: E402
from rankflow.services import LocalRedis, LocalTansu, free_port, stop_processes  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--rate", type=int, default=500, help="playback events per second")
    p.add_argument("--users", type=int, default=20_000)
    p.add_argument("--songs", type=int, default=2_000)
    a = p.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop cleanly on SIGTERM as on Ctrl-C
    work = Path(tempfile.mkdtemp(prefix="rankflow-demo-"))
    rds = LocalRedis(free_port(), work / "redis").start()
    broker = LocalTansu(free_port(), work / "tansu").start()
    topic, stop, procs = "playback-events", threading.Event(), []
    try:
        ensure_topic(broker.url, topic, 4)
        procs.append(subprocess.Popen([sys.executable, "-m", "rankflow.cli", "run", "--input",
                                       f"kafka:{broker.url}/{topic}", "--redis", rds.url,
                                       "--dead-letter", f"jsonl:{work / 'dead-letters.jsonl'}"]))
        procs.append(subprocess.Popen([sys.executable, "-m", "rankflow.cli", "serve", "--host", "127.0.0.1",
                                       "--port", str(a.port), "--redis", rds.url,
                                       "--kafka", f"kafka:{broker.url}/{topic}"]))
        threading.Thread(target=produce_steady, args=(broker.url, topic, a.rate, a.users, a.songs,
                                                      int(time.time()), stop), daemon=True).start()
        url = f"http://127.0.0.1:{a.port}/"
        for _ in range(300):
            try:
                if httpx.get(url + "health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        print(f"\n  rankflow demo: open {url}  (API: {url}docs, metrics: {url}metrics)\n"
              f"  {a.rate} playback events/s from {a.users} listeners; Ctrl-C to stop\n", flush=True)
        while all(proc.poll() is None for proc in procs):
            time.sleep(0.5)
        print("a process of the demo exited; stopping", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stop.set()
        stop_processes(procs)
        broker.stop()
        rds.stop()


if __name__ == "__main__":
    sys.exit(main())
