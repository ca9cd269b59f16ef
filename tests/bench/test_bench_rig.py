"""The benchmarks' shared rig (``bench/rig.py``): the measures every benchmark takes."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field

import pytest

from rankflow.bench import rig
from rankflow.bench.activity.results import ActivityBenchResult, Latency, Queries, Throughput, Run
from rankflow.bench.boards.results import BoardsBenchResult, Reads


def test_the_peak_memory_of_a_child_is_its_own(tmp_path):
    """A small child of a big parent: its peak is its own ``VmHWM``, not the parent's RSS
    (``ru_maxrss`` of a forked child holds the parent's from before the ``exec``)."""
    ballast = bytearray(400 * 2**20)  # this process: 400 MiB more resident
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    small = rig.timed([sys.executable, "-c", "import time; time.sleep(0.5)"], tmp_path / "small.stderr")
    big = rig.timed([sys.executable, "-c", "import time; b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096]); "
                     "time.sleep(0.5)"], tmp_path / "big.stderr")
    del ballast
    assert small.peak_rss_bytes < 100 * 2**20, small
    assert big.peak_rss_bytes > 300 * 2**20, big
    assert small.seconds >= 0.5 and small.cpu_s >= 0


def test_a_failed_command_says_why(tmp_path):
    with pytest.raises(RuntimeError, match="no such thing"):
        rig.timed([sys.executable, "-c", "import sys; sys.exit('no such thing')"], tmp_path / "e.stderr")


def test_percentile_is_the_nearest_rank():
    assert rig.percentile([], 0.5) is None
    assert rig.percentile([3.0], 0.99) == 3.0
    values = [float(x) for x in range(1, 101)]
    assert rig.percentile(reversed(values), 0.5) == 51.0  # round(0.5 * 99) = 50 (banker's): the 51st
    assert rig.percentile(values, 0.99) == 99.0
    assert rig.percentile(values, 1.0) == 100.0


def test_a_result_comes_back_from_its_json_as_it_was_written():
    result = ActivityBenchResult(config={"events": 5}, machine={"cpus": 2},
                                 throughput=Throughput(runs=[Run("flow", 0, 1.0, 5.0, 10, 0.1, 0.2, 0, 3, 0.5,
                                                                 {"expired": 1})]),
                                 queries=Queries(phases={"idle": {"flow top": Latency(requests=3, p99_ms=1.5)}}))
    back = rig.load_result(ActivityBenchResult, json.loads(json.dumps(asdict(result))))
    assert back == result
    assert isinstance(back.throughput.runs[0], Run) and isinstance(back.queries.phases["idle"]["flow top"], Latency)
    boards = BoardsBenchResult(config={}, machine={}, reads=Reads(http={"traffic": {"top": {"p99_ms": 1.0}}}))
    assert rig.load_result(BoardsBenchResult, json.loads(json.dumps(asdict(boards)))) == boards


@dataclass
class _Part:
    value: int = 0


@dataclass
class _Result:
    config: dict
    machine: dict
    one: _Part | None = None
    two: _Part | None = None
    targets: dict = field(default_factory=dict)
    measured: dict = field(default_factory=dict)


def test_the_parts_a_run_did_not_measure_are_kept_from_the_previous_file(tmp_path):
    drawn = []
    first = _Result({}, {}, one=_Part(1), two=_Part(2), measured={"one": {"at": "a"}, "two": {"at": "b"}})
    rig.write_results(first, tmp_path, "x", lambda r, path: drawn.append(path))
    second = _Result({}, {}, one=_Part(10), measured={"one": {"at": "c"}})
    second = rig.keep_previous(second, tmp_path / "x.json", ("one", "two"), lambda r: {"two": r.two.value})
    assert (second.one, second.two, second.measured) == (_Part(10), _Part(2), {"one": {"at": "c"}, "two": {"at": "b"}})
    assert second.targets == {"two": 2}
    assert drawn == [tmp_path / "x.png"]


def test_first_covering_is_the_first_state_past_each_sample():
    seen = [(10.0, {"t/0": 5}), (11.0, {"t/0": 5, "t/1": 3}), (12.5, {"t/0": 9, "t/1": 3})]
    samples = {(0, 4): 9.0, (0, 5): 9.5, (1, 2): 10.0, (1, 3): 10.0}
    assert rig.first_covering(seen, "t", samples) == {(0, 4): 1.0, (0, 5): 3.0, (1, 2): 1.0}


def test_profile_shares_count_busy_samples_by_part(tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_text("process 1;main;parse_records;orjson 6\nprocess 1;main;Queue.get 50\nprocess 1;main;other 2\n"
                   "process 1;main;lib;orjson 2\n")
    shares = rig.profile_shares(raw, {"parse": ("parse_records",)}, {"json": ("orjson",)}, rest="rest")
    assert shares == {"parse": 0.6, "json": 0.2, "rest": 0.2}


@pytest.mark.redis  # the rig starts its own Redis and broker
@pytest.mark.broker
def test_the_rig_runs_a_flow_and_leaves_nothing_behind(tmp_path):
    """Its own Redis and broker, a produced topic, a timed flow; after it, no service and no work folder."""
    from rankflow.bench.listeners import ListenersRig

    log = tmp_path / "events.jsonl"
    log.write_bytes(b'{"user_id":"u","playback_id":"p","song_id":"s","type":"START","version":1,"ts":1}\n')
    with ListenersRig() as bench:
        bench.produce(log, "t", 2)
        run = bench.timed(bench.rankflow_cmd("t", "ns", "--until-eof"), "ns")
        assert bench.top("rankflow", "ns", 10) == [("s", 1)]
        pids = [bench.redis.pid(), bench.broker.pid()]
    assert run.peak_rss_bytes > 0 and run.cpu_s > 0
    assert not bench.work.exists()
    for pid in pids:
        assert pid is not None and rig.proc_status(pid, "VmRSS") == 0  # gone


def test_every_result_is_a_rig_result_and_its_file_keeps_its_layout(tmp_path):
    """The results share their configuration, machine and targets (``rig.Result``; the ones measured
    part by part, ``measured`` too): their files still list the parts first and the summary last,
    and a file of the earlier layout loads."""
    from rankflow.bench.listeners import BenchResult, SweepResult

    assert all(issubclass(c, rig.Result) for c in (BenchResult, SweepResult, ActivityBenchResult, BoardsBenchResult))
    assert issubclass(ActivityBenchResult, rig.PartsResult) and issubclass(BoardsBenchResult, rig.PartsResult)
    boards = BoardsBenchResult(config={"n": 1}, machine={"cpus": 2}, reads=Reads(http={}), targets={"top_met": True},
                               measured={"reads": {"at": "now"}})
    path, _ = rig.write_results(boards, tmp_path, "boards", lambda r, p: None)
    keys = list(json.loads(path.read_text()))
    assert keys[:2] == ["config", "machine"] and keys[-2:] == ["targets", "measured"] and "reads" in keys
    listeners = BenchResult(config={}, machine={}, ratio=2.5, targets={"ratio_met": True})
    path, _ = rig.write_results(listeners, tmp_path, "listeners", lambda r, p: None)
    keys = list(json.loads(path.read_text()))
    assert keys[:3] == ["config", "machine", "rankflow"] and keys[-1] == "targets"
    earlier = {"config": {}, "machine": {}, "rankflow": {"events_per_s": 9.0}, "ratio": 2.5, "targets": {"a": 1}}
    back = rig.load_result(BenchResult, earlier)
    assert back.rankflow.events_per_s == 9.0 and back.ratio == 2.5 and back.targets == {"a": 1}


def test_without_matplotlib_the_results_are_written_and_the_chart_is_left_out(tmp_path, capsys):
    def draw(result, path):
        raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")

    json_path, png_path = rig.write_results(_Result({}, {}, one=_Part(1)), tmp_path, "x", draw)
    assert json.loads(json_path.read_text())["one"] == {"value": 1} and not png_path.exists()
    assert "no x.png: matplotlib is not installed" in capsys.readouterr().err
    assert rig.wrote(json_path, png_path) == f"wrote {json_path}"

    def broken(result, path):
        raise ModuleNotFoundError("No module named 'nope'", name="nope")

    with pytest.raises(ModuleNotFoundError):  # any other missing module is a bug, not a missing extra
        rig.write_results(_Result({}, {}, one=_Part(1)), tmp_path, "y", broken)


def test_the_positions_poller_outlives_a_busy_redis_and_reports_other_failures(redis_url):
    """``BUSY`` while a long publish script runs is a read to try again, not the poller's end
    (it was: the reads part then waited ten minutes for a board it could no longer see)."""
    import redis

    replies: list[object] = [redis.ResponseError("BUSY Redis is busy running a script"), ("s1", {"p/0": 5})]
    reads = []

    def read(client: redis.Redis) -> tuple[object, dict[str, int]]:
        reads.append(1)
        reply = replies[0] if len(replies) == 1 else replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply  # type: ignore[return-value]

    poller = rig.PositionsPoller(redis_url, read, interval=0.001)
    poller.start()
    rig.wait_until(lambda: bool(poller.seen), 30)
    poller.finish()
    assert poller.redis_errors == 1 and "BUSY" in (poller.last_redis_error or "")
    assert [positions for _, positions in poller.seen] == [{"p/0": 5}] and poller.total() == 5

    def broken(client: redis.Redis) -> tuple[object, dict[str, int]]:
        raise KeyError("a bench bug")

    failing = rig.PositionsPoller(redis_url, broken, interval=0.001)
    failing.start()
    failing.join(timeout=30)
    with pytest.raises(RuntimeError, match="the positions poller stopped: KeyError"):
        failing.finish()
