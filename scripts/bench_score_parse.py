"""CPU seconds of the boards' parse step alone (checks 1 to 6) over a JSON Lines log, in batches.

    .venv/bin/python scripts/bench_score_parse.py --log data/boards.jsonl --base OTHER/.venv/bin/python

Runs ``state.score_events.parse_score_records`` of this checkout and of ``--base``'s (each
in its own interpreter, alternating, ``--reps`` times) over the log's lines in batches of
``--batch``, unsigned and, with every line signed again under a fixed key, signed; prints
one JSON line a run (process CPU seconds of the parse calls only) and the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

ONE = r"""
import sys, time, orjson
from rankflow.state.score_events import parse_score_records
from rankflow.state.signatures import sign
log, batch, signed = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
key = bytes(range(32)) if signed else None
lines = open(log, "rb").read().splitlines()
if signed:
    out = []
    for raw in lines:
        try:
            o = orjson.loads(raw)
            o["sig"] = sign(key, o["game_id"], o["match_id"], o["player_id"], o["points"], o["played_at"])
            raw = orjson.dumps(o)
        except Exception:
            pass
        out.append(raw)
    lines = out
batches = [lines[i:i + batch] for i in range(0, len(lines), batch)]
start = time.process_time()
ok = 0
for i, b in enumerate(batches):
    events, dead = parse_score_records(b, range(i * batch, i * batch + len(b)), "p", 1, key)
    ok += len(events)
print(time.process_time() - start, ok, len(lines))
"""


def run(python: str, log: str, batch: int, signed: bool) -> tuple[float, int, int]:
    out = subprocess.run([python, "-c", ONE, log, str(batch), "1" if signed else "0"], check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1]), int(out[2])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--log", required=True)
    parser.add_argument("--base", required=True, help="the other checkout's python")
    parser.add_argument("--new", default=sys.executable)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    for signed in (False, True):
        cpu: dict[str, list[float]] = {"base": [], "new": []}
        for rep in range(args.reps):
            order = [("base", args.base), ("new", args.new)]
            for name, python in order if rep % 2 == 0 else order[::-1]:
                seconds, ok, lines = run(python, args.log, args.batch, signed)
                cpu[name].append(seconds)
                print(json.dumps({"rep": rep, "signed": signed, "system": name, "cpu_s": round(seconds, 3), "valid": ok,
                                  "lines": lines, "at": time.strftime("%H:%M:%S")}), flush=True)
        base, new = statistics.median(cpu["base"]), statistics.median(cpu["new"])
        print(json.dumps({"signed": signed, "base_median": round(base, 3), "new_median": round(new, 3),
                          "ratio": round(new / base, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
