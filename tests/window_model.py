"""A small reference model of docs/semantics/windows.md sections 2 to 4, written from the text alone.

It processes events one at a time in a given arrival order (one interleaving of the
input partitions), exactly as section 2 says: take ``ts`` into ``W``, then place the
event. Nothing in it is shared with the flow, so it checks the flow's rules rather
than repeating them.
"""

from __future__ import annotations

from collections.abc import Iterable


class WindowModel:
    def __init__(self, bucket_ms: int, n: int, users: bool = False) -> None:
        self.bucket_ms, self.n, self.users = bucket_ms, n, users
        self.maxima: dict[str, int] = {}
        self.w: int | None = None
        self.kept: list[tuple[str, str, str, int]] = []  # events not expired
        self.expired: list[tuple[str, int]] = []  # (partition, offset)
        self.w_when_heard: dict[str, int | None] = {}  # W just before each partition's first event

    def feed(self, partition: str, offset: int, event: tuple[str, str, str, int]) -> None:
        ws, ch, user, ts = event
        if partition not in self.maxima:
            self.w_when_heard[partition] = self.w
        self.maxima[partition] = max(self.maxima.get(partition, ts), ts)
        least = min(self.maxima.values())
        self.w = least if self.w is None else max(self.w, least)
        if ts // self.bucket_ms < self.w // self.bucket_ms - self.n + 1:
            self.expired.append((partition, offset))
        else:
            self.kept.append(event)

    def proviso_holds(self) -> bool:
        """Section 2's condition for interleaving-free final counts: no partition was first
        heard from after ``W`` had passed the greatest ``ts`` it delivers."""
        return all(w is None or w <= self.maxima[p] for p, w in self.w_when_heard.items())

    def counts(self) -> dict[tuple[str, str], int]:
        """Every pair's count over the window of the current ``W`` (section 3)."""
        if self.w is None:
            return {}
        last = self.w // self.bucket_ms
        first = last - self.n + 1
        seen: dict[tuple[str, str], set | int] = {}
        for ws, ch, user, ts in self.kept:
            if first <= ts // self.bucket_ms <= last:
                if self.users:
                    seen.setdefault((ws, ch), set()).add(user)  # type: ignore[union-attr]
                else:
                    seen[(ws, ch)] = seen.get((ws, ch), 0) + 1  # type: ignore[operator]
        return {pair: (len(v) if self.users else v) for pair, v in seen.items()}  # type: ignore[arg-type]


def workspace_ranking(counts: dict[tuple[str, str], int], workspace: str) -> list[tuple[str, int]]:
    """Section 4: a workspace's channels by count desc, then channel_id desc (byte-wise)."""
    mine = [(ch, n) for (ws, ch), n in counts.items() if ws == workspace and n > 0]
    return sorted(mine, key=lambda cn: (cn[1], cn[0].encode()), reverse=True)


def global_ranking(counts: dict[tuple[str, str], int]) -> list[tuple[tuple[str, str], int]]:
    pairs = [(pair, n) for pair, n in counts.items() if n > 0]
    return sorted(pairs, key=lambda pn: (pn[1], pn[0][0].encode(), pn[0][1].encode()), reverse=True)


def run_model(events: Iterable[tuple[str, int, tuple[str, str, str, int]]], bucket_ms: int, n: int,
              users: bool = False) -> WindowModel:
    model = WindowModel(bucket_ms, n, users)
    for partition, offset, event in events:
        model.feed(partition, offset, event)
    return model
