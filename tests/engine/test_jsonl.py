"""The JSON Lines source: long lines in bounded memory and linear time, and a followed file that
must only grow (a truncated or replaced one stops the run instead of being miscounted)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc
import uuid
from pathlib import Path

import orjson
import pytest
import redis

from rankflow.cli import build_parser
from rankflow.connectors.jsonl import MAX_LINE_BYTES, JsonlSource
from rankflow.connectors.redis_read import read_latest
from rankflow.connectors.source_batch import ENDS, FAILED, STOP, InputChanged, SourceBatch
from tests.events import ev

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]


def partition(path: Path, follow: bool = False, chunk: int = 1 << 16, cap: int = MAX_LINE_BYTES):
    return JsonlSource([str(path)], follow=follow, chunk_bytes=chunk, max_line_bytes=cap).build_part("in", str(path), None)


def read_all(part) -> list[SourceBatch]:
    """Every batch up to the end of a file that is not followed."""
    batches = []
    while True:
        try:
            batches.extend(part.next_batch())
        except StopIteration:
            return batches


def lines_and_refused(batches: list[SourceBatch]) -> tuple[dict[int, bytes], dict[int, tuple[str, bytes]]]:
    lines = {o: r for b in batches for o, r in zip(b.offsets(), b.records)}
    refused = {o: (detail, raw) for b in batches for o, detail, raw in b.refused}
    return lines, refused


# -- long lines (issue 19 item 12) ----------------------------------------------------------

@pytest.mark.parametrize("chunk", [7, 64, 4096, 1 << 16])
def test_lines_over_the_cap_are_refused_and_the_others_read(tmp_path, chunk):
    """Whatever the chunk size against the cap: a line of the cap's length is read, a longer one
    refused with its offset and its beginning, and the positions count both."""
    cap = 100
    text = [b"a" * 100, b"b" * 101, b"", b"c" * 5000, b"d", b"e" * 99 + b"\r", b"f" * 300]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(text))  # the last line has no newline: still a line
    batches = read_all(partition(path, chunk=chunk, cap=cap))
    lines, refused = lines_and_refused(batches)
    assert lines == {0: text[0], 2: b"", 4: b"d", 5: text[5]}
    assert sorted(refused) == [1, 3, 6]
    assert refused[3] == ("the line is 5000 bytes long, more than --max-line-bytes (100): not read; raw holds its "
                          "first 100 bytes", b"c" * 100)
    assert refused[1][1] == b"b" * 100 and refused[6][1] == b"f" * 100
    assert max(b.end for b in batches) == 7
    assert all(set(b.offsets()) | {o for o, _, _ in b.refused} == set(range(b.start, b.end)) for b in batches)


def test_a_long_line_is_a_dead_letter_and_the_next_lines_count(flow):
    """5 MB in one line, 64 KiB allowed: one invalid_json dead letter at its line, the rest counted."""
    huge = orjson.dumps({"user_id": "u9", "note": "x" * 5_000_000})
    lines = [ev("u1", "p1", "song_a", "START", 1), huge, ev("u2", "p1", "song_a", "START", 1),
             ev("u3", "p1", "song_b", "START", 1)]
    out = flow.run(flow.write_log(lines), max_line_bytes=64 * 1024, read_chunk_bytes=16 * 1024)
    dead = [orjson.loads(d) for d in out["dead_letters"]]
    assert [(d["reason"], d["position"]["offset"]) for d in dead] == [("invalid_json", 1)]
    assert "more than --max-line-bytes (65536)" in dead[0]["detail"] and str(len(huge)) in dead[0]["detail"]
    assert dead[0]["raw"] == huge[:1024].decode()
    assert out["counts"] == {"song_a": 2, "song_b": 1}
    assert list(out["final"]["positions"].values()) == [4]


def test_the_buffer_stays_within_the_cap_and_one_chunk(tmp_path):
    """Skipping a line over the cap holds no more of it than the cap plus one chunk, at any time."""
    cap, chunk = 64 * 1024, 16 * 1024
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"1\n" + b"z" * 5_000_000 + b"\n2\n")
    part = partition(path, chunk=chunk, cap=cap)
    batches, largest = [], 0
    tracemalloc.start()
    try:
        while True:
            try:
                batches.extend(part.next_batch())
            except StopIteration:
                break
            largest = max(largest, part.buffered_bytes)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert largest <= cap + chunk
    assert peak < 4 * (cap + chunk), f"{peak} bytes at the peak while skipping a 5 MB line"
    lines, refused = lines_and_refused(batches)
    assert lines == {0: b"1", 2: b"2"} and list(refused) == [1]


def test_a_long_line_within_the_cap_is_not_copied_while_it_is_read(tmp_path):
    """Linear time: the pieces of an unfinished line are kept as they were read, never
    re-concatenated chunk by chunk (which copied a 100 MB line once per chunk: 26 s). The
    memory at the peak, before the newline arrives, is the line once, not twice."""
    size, chunk = 5_000_000, 16 * 1024
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"y" * size)  # followed: the line is not finished yet
    part = partition(path, follow=True, chunk=chunk, cap=8 << 20)
    tracemalloc.start()
    try:
        for _ in range(10 * size // chunk):
            if part.buffered_bytes == size:
                break
            assert all(not b.records for b in part.next_batch()), "no line has ended yet"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert part.buffered_bytes == size
    assert peak < size + 8 * chunk + 200_000, f"{peak} bytes at the peak for a {size}-byte line"
    with open(path, "ab") as out:
        out.write(b"\n{}\n")
    batches = [b for _ in range(3) for b in part.next_batch()]
    lines, _ = lines_and_refused(batches)
    assert lines == {0: b"y" * size, 1: b"{}"}


def test_max_line_bytes_is_a_positive_option():
    args = build_parser().parse_args(["run", "--input", "jsonl:x", "--max-line-bytes", "4096"])
    assert args.max_line_bytes == 4096
    assert build_parser().parse_args(["rebuild", "--input", "jsonl:x"]).max_line_bytes == MAX_LINE_BYTES == 1 << 20
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["run", "--input", "jsonl:x", "--max-line-bytes", "0"])
    assert exit_.value.code == 2


# -- a followed file only grows (issue 19 item 2) ----------------------------------------------

def _truncate_and_write_less(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(b"".join(ev(f"n{i}", "p", "s", "START", 1) + b"\n" for i in range(3)))


def _truncate_and_write_more(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(0)
        f.flush()
        f.write(b"".join(ev(f"n{i}", "p", "s", "START", 1) + b"\n" for i in range(100)))
        f.flush()
        f.write(b"".join(ev(f"m{i}", "p", "s", "START", 1) + b"\n" for i in range(3000)))


def _replace(path: Path) -> None:
    new = path.with_name("new.jsonl")
    new.write_bytes(b"".join(ev(f"r{i}", "p", "s", "START", 1) + b"\n" for i in range(3000)))
    os.replace(new, path)


def _remove(path: Path) -> None:
    path.unlink()


CHANGES = {"shrunk": _truncate_and_write_less, "rewritten longer": _truncate_and_write_more, "replaced": _replace,
           "removed": _remove}


@pytest.mark.parametrize("change", list(CHANGES))
def test_the_reader_refuses_a_followed_file_that_did_not_only_grow(tmp_path, change):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(ev(f"u{i}", "p", "s", "START", 1) + b"\n" for i in range(20)))
    part = partition(path, follow=True)
    assert [b.end for b in part.next_batch()] == [20]
    CHANGES[change](path)
    with pytest.raises(InputChanged, match=r"the run has read it up to line 20 \(byte \d+\), but .* \(was it "
                                           r"truncated or replaced\?\): a followed file may only grow"):
        part.read()
    FAILED.clear()
    ENDS.clear()
    try:  # through the barrier partition: the partition ends, stops the run and leaves the error for execute
        with pytest.raises(StopIteration):
            part.next_batch()
        assert STOP.is_set() and [type(e) for e in FAILED] == [InputChanged] and str(path) not in ENDS
    finally:
        STOP.clear()
        FAILED.clear()


def test_appending_is_fine(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"1\n2")
    part = partition(path, follow=True)
    assert [b.records for b in part.next_batch()] == [[b"1"]]
    with open(path, "ab") as out:
        out.write(b"3\n4\n")
    assert [b.records for b in part.next_batch()] == [[b"23", b"4"]]


@pytest.mark.parametrize("change", ["shrunk", "rewritten longer", "replaced"])
def test_a_live_run_stops_when_its_file_is_truncated_or_replaced(tmp_path, redis_url, change):
    """One line on stderr naming the file and the position, exit 1, no traceback; nothing of the
    new content is counted as if it continued the old."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(ev(f"u{i}", "p", "s", "START", 1) + b"\n" for i in range(50)))
    namespace = "t-" + uuid.uuid4().hex[:12]
    proc = subprocess.Popen([*RANKFLOW, "run", "--input", f"jsonl:{path}", "--redis", redis_url, "--namespace",
                             namespace, "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}", "--barrier-ms", "20"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = redis.Redis.from_url(redis_url)
    try:
        deadline = time.monotonic() + 120
        while (snap := read_latest(client, namespace)) is None or snap["positions"][str(path)] < 50:
            assert proc.poll() is None and time.monotonic() < deadline, "the run never read the file"
            time.sleep(0.01)
        CHANGES[change](path)
        _, stderr = proc.communicate(timeout=120)  # the run stops by itself
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        client.close()
    assert proc.returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr and "panicked" not in stderr, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"rankflow: jsonl {path}: the run has read it up to line 50 (byte ")
    assert "(was it truncated or replaced?)" in last
    client = redis.Redis.from_url(redis_url)
    try:
        assert read_latest(client, namespace)["positions"][str(path)] == 50, "nothing after the change was counted"
    finally:
        client.close()
