"""How the listener flow keys a song's changes before they reach the counters.

Shared by the user stage, which salts a user's contribution to a hot song and buckets
its accepted starts, and the combine step (``operators.routing``), which watches how
fast songs change and routes the salted changes: so it sits upstream of both.

* **Hot songs**: :class:`HotSongs`, the process-wide :data:`HOT_SONGS`, and
  :func:`user_salt`, the partial counter ``1 + crc32(user_id) % S`` a user's contribution
  to a split song goes to (``operators.routing`` explains splitting).
* **Recent plays' buckets**: :data:`BUCKET_MS`.
"""

from __future__ import annotations

import threading
import time
import zlib

BUCKET_MS = 60_000
"""docs/semantics/windows.md 7: recent plays are counted in buckets of one minute; the window is
``--recent-minutes`` of them (``operators.recent_plays``)."""


def user_salt(user_id: str, salts: int) -> int:
    """The partial counter of a split song that ``user_id``'s contribution goes to (1 .. ``salts``)."""
    return 1 + zlib.crc32(user_id.encode()) % salts


class HotSongs:
    """Songs this process routes to salted partial counters (sticky once hot).

    Fed by ``operators.routing.combine_song_deltas`` with the number of changes per song; every
    ``window_s`` the songs that changed at least ``threshold`` times per second
    join the set. The set is only a routing hint: counts are exact whatever it
    holds, and different processes may disagree.
    """

    def __init__(self, threshold_per_s: float = 0.0, salts: int = 4, window_s: float = 1.0,
                 always: frozenset[str] = frozenset()) -> None:
        self.configure(threshold_per_s, salts, window_s, always)

    def configure(self, threshold_per_s: float, salts: int, window_s: float = 1.0,
                  always: frozenset[str] = frozenset()) -> None:
        """``always``: songs split at their first change whatever their rate (``--split-songs``):
        a deterministic trigger for songs known to be hot, and for tests."""
        if salts < 1:
            raise ValueError("salts must be >= 1")
        self.threshold_per_s = threshold_per_s
        self.salts = salts
        self.window_s = window_s
        self.always = frozenset(always)
        self.hot: set[str] = set()
        self._window: dict[str, int] = {}
        self._window_start = time.monotonic()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.threshold_per_s > 0 or bool(self.always)

    def observe(self, changes: dict[str, int]) -> None:
        if not self.enabled:
            return
        if self.always:
            self.hot.update(song for song in changes if song in self.always)
        if self.threshold_per_s <= 0:
            return
        with self._lock:
            window = self._window
            for song, n in changes.items():
                window[song] = window.get(song, 0) + n
            elapsed = time.monotonic() - self._window_start
            if elapsed >= self.window_s:
                limit = self.threshold_per_s * elapsed
                self.hot.update(s for s, n in window.items() if n >= limit)
                self._window = {}
                self._window_start = time.monotonic()


HOT_SONGS = HotSongs()
"""The process-wide hot-song set, configured by the runner."""
