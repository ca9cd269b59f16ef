"""``bench-activity`` part 6, profile (not in the default parts): py-spy of the flow on the backlog.

Plain and durable: the share of CPU samples of each part of the flow (and flame graphs,
``profile-activity-NAME.svg`` in ``--out``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rankflow.bench import rig
from rankflow.bench.activity.core import ActivityBench
from rankflow.bench.activity.results import ActivityBenchResult, Profile

PROFILE_PARTS = {  # a frame whose name contains a key counts for the part (innermost first, first match wins)
    "garbage collector": ("gc_collect_main",),
    "recovery: the counters' state and changes (WindowTable.state, _changes, _image)": (
        "WindowCounts.state", "WindowTable.state", "Watermark.state", "ActivityRanking.state", "CounterLogic.snapshot",
        "MergerLogic.snapshot", "WindowTable._changes", "WindowTable._image", "_nested", "take_dirty",
        "_summary_json", "_merge_bucket"),
    "changelog (write, fdatasync)": ("ShardChangelog", "changelog", "fdatasync"),
    "parse and routing (the kernel's MessageParser)": ("MessageParser", "parse_message_records", "parse_message",
                                                       "ParsedBatch"),
    "routing to counter partitions (route_messages)": ("route_messages",),
    "window counter: place and count (WindowTable, WindowCounts)": ("_place", "WindowCounts", "Watermark",
                                                                    "_summarize", "MisraGries"),
    "window counter: local top (RetakenTop)": ("RetakenTop", "set_counts", "ranking_index", "SortedList"),
    "window counter: report (changes by workspace)": ("by_workspace", "WindowTable", "take_changed"),
    "merger (global top, snapshot)": ("ActivityRanking", "MergerLogic", "merge_local_tops", "ActivitySnapshot",
                                      "merger"),
    "publisher: changes to script args (ActivityState)": ("ActivityState",),
    "publisher: redis-py (pack, send, wait)": ("Publisher", "hiredis"),
    "Bytewax recovery store (pickle, SQLite)": ("sqlite", "rusqlite", "pickle", "Pickler", "snapshot"),
    "Kafka read": ("_KafkaPartition", "rd_kafka"),
    "start-up (imports)": ("_find_and_load", "_compile_bytecode"),
}
PROFILE_GENERIC: dict[str, tuple[str, ...]] = {"parse and routing (the kernel's MessageParser)": ("orjson",), "publisher: redis-py (pack, send, wait)": ("redis/",)}


def profile(bench: ActivityBench, result: ActivityBenchResult) -> None:
    out = result.profile = Profile()
    topic = bench.backlog_topic()
    dest = Path(bench.cfg.out)
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("plain", "durable"):
        extra = ["--recovery-dir", str(bench.work / "profile.recovery")] if name == "durable" else []
        if name == "durable" and not bench.cfg.durable:
            continue
        for fmt, suffix in (("flamegraph", "svg"), ("raw", "txt")):
            bench.flush()
            shutil.rmtree(bench.work / "profile.recovery", ignore_errors=True)
            cmd = bench.flow_cmd(topic, f"prof-{name}-{fmt}", "--until-eof", *extra)
            timed = rig.py_spy(cmd, dest / f"profile-activity-{name}.{suffix}", fmt)
            out.seconds[name], out.cpu_s[name] = timed.seconds, timed.cpu_s
        shares = rig.profile_shares(dest / f"profile-activity-{name}.txt", PROFILE_PARTS, PROFILE_GENERIC)
        out.shares[name] = {part: round(share, 4) for part, share in shares.items()}
        bench.log(f"profile {name} ({out.seconds[name]:.1f} s under py-spy): " +
                  ", ".join(f"{p} {s:.0%}" for p, s in out.shares[name].items()))
