"""What one prepared answer costs `rankflow serve`, by its size: user and system CPU per request.

    .venv/bin/python scripts/bench_prepared_top.py [--players 50000] [--rate 1000] [--seconds 8] [--reps 2]

Starts a Redis of its own, publishes a board with ``rankflow run --flow boards`` on a
generated log (``--players`` players, two results each), starts ``rankflow serve
--board-index redis`` and loads ``GET /boards/arena/all/top?n=N`` for N = 1, 10 and 100
at ``--rate`` requests a second over 8 keep-alive connections (``rankflow.bench.api_load``).
Nothing is published meanwhile, so every answer is a prepared one (``api.prepared``):
what is measured is the server writing bytes it already has. Prints the body's size and the
server's user and system CPU per request (``/proc/PID/stat``).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from rankflow.bench.api_load import run_load
from rankflow.bench.rig import cpu_times
from rankflow.services import LocalRedis, free_port

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--players", type=int, default=50_000)
    p.add_argument("--rate", type=float, default=1000)
    p.add_argument("--seconds", type=float, default=8)
    p.add_argument("--reps", type=int, default=2)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        local = LocalRedis(free_port(), work / "redis").start()
        server = None
        try:
            log = work / "scores.jsonl"
            subprocess.run([*RANKFLOW, "generate", "--kind", "scores", "--players", str(args.players), "--games", "1",
                            "--events", str(2 * args.players), "--clean", "--out", str(log)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            subprocess.run([*RANKFLOW, "run", "--flow", "boards", "--input", f"jsonl:{log}", "--until-eof", "--redis",
                            local.url, "--namespace", "top", "--dead-letter", f"jsonl:{work / 'dead.jsonl'}"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            port = free_port()
            server = subprocess.Popen([*RANKFLOW, "serve", "--port", str(port), "--redis", local.url, "--namespace",
                                       "top"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            client = httpx.Client(base_url=f"http://127.0.0.1:{port}")
            while True:
                try:
                    if client.get("/boards/arena/all/top?n=100").status_code == 200:
                        break
                except httpx.HTTPError:
                    assert server.poll() is None, "serve exited"
                time.sleep(0.1)
            for rep in range(args.reps):
                for n in (1, 10, 100):
                    path = f"/boards/arena/all/top?n={n}"
                    size = len(client.get(path).content)
                    (u0, s0) = cpu_times(server.pid)
                    load = asyncio.run(run_load("127.0.0.1", port, lambda _, path=path: path, args.rate, args.seconds,
                                                connections=8))
                    (u1, s1) = cpu_times(server.pid)
                    per = 1e6 / max(1, load.requests)
                    print(f"rep {rep} n={n:>3}, body {size:>5} B: user {(u1 - u0) * per:5.1f} + system "
                          f"{(s1 - s0) * per:5.1f} us per request ({load.requests} requests, {load.errors} errors)")
            client.close()
        finally:
            if server is not None:
                server.terminate()
                server.wait()
            local.stop()


if __name__ == "__main__":
    main()
