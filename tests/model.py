"""A small reference model of docs/semantics/listeners.md, written independently of the flow.

It reads a whole log line by line with the standard library's ``json`` and applies
the rules in the most direct form, with no batching, epochs or partitions. The
flow must produce exactly what this produces.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _is_event(obj: object) -> bool:
    if not isinstance(obj, dict):
        return False
    for f in ("user_id", "playback_id", "song_id"):
        v = obj.get(f)
        if not isinstance(v, str) or not 1 <= len(v) <= 256:
            return False
    if obj.get("type") not in ("START", "STOP", "HEARTBEAT", "TIMEOUT"):
        return False
    for f in ("version", "ts"):
        v = obj.get(f)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            return False
    if obj["type"] == "TIMEOUT":  # section 6: the sweeper's timers carry their timeout
        v = obj.get("idle_ms")
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            return False
    return True


def parse(raw: bytes) -> dict | None:
    """The event, or None when it is invalid by shape."""
    try:
        text = raw.decode("utf-8")
        obj = json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return None
    if isinstance(obj, dict):
        for v in obj.values():
            if isinstance(v, str):
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError:  # a lone surrogate escape
                    return None
    return obj if _is_event(obj) else None


@dataclass
class Model:
    users: dict[str, dict] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    conflicts: int = 0
    timed_out: int = 0  # TIMEOUT events that removed a playback (docs/semantics/listeners.md 6)
    lines: int = 0
    dead: list[tuple[int, str]] = field(default_factory=list)  # (line, "shape" or the conflict's reason)
    # Recent plays (docs/semantics/windows.md 7), for the input partitions interleaved in this arrival order:
    maxima: dict[str, int] = field(default_factory=dict)  # per partition, its greatest ts of valid events
    w: int | None = None  # the watermark: the least of those, never going back
    starts: list[tuple[str, int, int]] = field(default_factory=list)  # accepted starts (song, ts, W after it)

    def apply_line(self, raw: bytes, partition: str = "") -> None:
        self.lines += 1
        ev = parse(raw)
        if ev is None:
            self._dead("shape")
            return
        ts = ev["ts"]  # every type valid by shape moves W, conflicts too
        self.maxima[partition] = max(self.maxima.get(partition, ts), ts)
        least = min(self.maxima.values())
        self.w = least if self.w is None else max(self.w, least)
        self.apply(ev)

    def _dead(self, reason: str) -> None:
        self.dead_letters += 1
        self.dead.append((self.lines - 1, reason))
        if reason != "shape":
            self.conflicts += 1

    def _add(self, song: str, n: int) -> None:
        self.counts[song] = self.counts.get(song, 0) + n
        if self.counts[song] == 0:
            del self.counts[song]

    def apply(self, ev: dict) -> None:
        u = self.users.get(ev["user_id"])
        p, s, v, t = ev["playback_id"], ev["song_id"], ev["version"], ev["type"]
        if t == "TIMEOUT":
            self.timeout(u, ev)
            return
        if u is not None and p == u["playback_id"]:
            if s != u["song_id"]:
                self._dead("conflict_song")
            elif v != u["version"]:
                self._dead("conflict_version")
            elif t == "STOP" and u["playing"]:
                self._add(s, -1)
                u["playing"] = False
            elif t == "HEARTBEAT" and u["playing"]:
                u["last_active"] = max(u["last_active"], ev["ts"])
            return
        if u is not None and v == u["version"]:
            self._dead("version_reused")
            return
        if u is not None and v < u["version"]:
            return
        if t == "HEARTBEAT":
            return
        if u is not None and u["playing"]:
            self._add(u["song_id"], -1)
        self.users[ev["user_id"]] = {"version": v, "playback_id": p, "song_id": s, "playing": t == "START",
                                     "last_active": ev["ts"]}
        if t == "START":
            self._add(s, 1)
            self.starts.append((s, ev["ts"], self.w if self.w is not None else ev["ts"]))

    def timeout(self, u: dict | None, ev: dict) -> None:
        """Section 6: the timer removes the counted playback it names (``playback_id`` and
        ``version``) once it was idle for ``idle_ms``, from the song the user counts on;
        anything else changes nothing, and is never a dead letter."""
        if (u is not None and u["playing"] and (ev["playback_id"], ev["version"])
                == (u["playback_id"], u["version"])
                and u["last_active"] + ev["idle_ms"] <= ev["ts"]):
            self._add(u["song_id"], -1)
            u["playing"] = False
            self.timed_out += 1

    def ranking(self, k: int) -> list[tuple[str, int]]:
        ordered = sorted(
            ((s, c) for s, c in self.counts.items() if c > 0),
            key=lambda sc: (sc[1], sc[0].encode("utf-8")),
            reverse=True,
        )
        return ordered[:k]

    def recent(self, minutes: int, w: int | None = None) -> dict[str, int]:
        """Accepted starts per song in the window of ``minutes`` one-minute buckets.

        In the arrival order the model was fed (``w`` None): each start is placed when it
        arrives, by the watermark then (``W`` takes its ``ts`` first): before that window it
        is left out for good; otherwise (in it, or held) it counts while its bucket is in
        the window of the current ``W``. For several partitions read in an unknown order,
        pass the final ``W``: with section 2's proviso every start counts exactly when its
        bucket is in that window."""
        final = self.w if w is None else w
        if final is None:
            return {}
        last = final // 60_000
        out: dict[str, int] = {}
        for song, ts, at in self.starts:
            b = ts // 60_000
            if w is None and b < at // 60_000 - minutes + 1:
                continue  # before the window when it arrived
            if last - minutes + 1 <= b <= last:
                out[song] = out.get(song, 0) + 1
        return out

    def recent_ranking(self, minutes: int, k: int, w: int | None = None) -> list[tuple[str, int]]:
        """docs/semantics/windows.md 7's order: plays descending, then song_id descending, byte-wise."""
        ordered = sorted(self.recent(minutes, w).items(), key=lambda sc: (sc[1], sc[0].encode("utf-8")),
                         reverse=True)
        return ordered[:k]

    def recent_window(self, minutes: int, w: int | None = None) -> tuple[int | None, int | None, int | None]:
        """``(window_start, window_end, watermark)``, all None before the first valid event."""
        final = self.w if w is None else w
        if final is None:
            return None, None, None
        last = final // 60_000
        return (last - minutes + 1) * 60_000, (last + 1) * 60_000, final

    @property
    def counted_users(self) -> int:
        return sum(1 for u in self.users.values() if u["playing"])

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def model_of_lines(lines: list[bytes]) -> Model:
    m = Model()
    for line in lines:
        m.apply_line(line)
    return m


def read_lines(path: str) -> list[bytes]:
    """Lines as the JSONL source sees them (a trailing newline ends the last one)."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines
