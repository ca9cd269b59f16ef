"""Following a publisher's change stream: the one protocol of ``changes`` and ``board_changes``.

Contract: each entry of a change stream (the listeners' ``changes``, written by
``PUBLISH_LUA``; the boards' ``board_changes``, by ``PUBLISH_BOARDS_LUA``) names the
snapshot it leads to (``snapshot_id``), the one before it (``previous``) and its kind
(``full``): ``delta`` carries the changes since ``previous``; any other kind (``full``,
and the boards' ``large``) does not continue a chain. A reader that applied the
changes up to snapshot ``at`` may apply the next entries only if they form an unbroken
chain from ``at`` (a capped stream trims old entries: a gap means that it missed some).

Where a ``full`` entry carries the whole state (the listeners': the whole count
table), it starts a new chain (``full_starts_over``); where it carries nothing (the
boards': the publisher sent its whole state to the boards' keys), the reader must load
everything again, as after a gap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

DELTA = b"delta"
FULL = b"full"


class FeedGap(RuntimeError):
    """The entries do not continue from the reader's snapshot: load everything again."""


def chain_end(at: bytes, entries: Iterable[Mapping[bytes, bytes]], full_starts_over: bool = False) -> bytes:
    """The snapshot id the entries lead to from ``at``; :class:`FeedGap` if they break the chain.

    >>> chain_end(b"1", [{b"full": b"delta", b"previous": b"1", b"snapshot_id": b"2"}])
    b'2'
    >>> chain_end(b"1", [{b"full": b"full", b"previous": b"", b"snapshot_id": b"7"}], full_starts_over=True)
    b'7'
    >>> chain_end(b"1", [{b"full": b"delta", b"previous": b"2", b"snapshot_id": b"3"}])
    Traceback (most recent call last):
    ...
    rankflow.api.change_feed.FeedGap: the changes after snapshot 1 left the stream
    """
    for fields in entries:
        kind = fields[b"full"]
        if kind == FULL and full_starts_over:
            pass
        elif kind != DELTA:
            raise FeedGap(f"snapshot {fields[b'snapshot_id'].decode()} is not in the stream ({kind.decode()})")
        elif fields[b"previous"] != at:
            raise FeedGap(f"the changes after snapshot {at.decode()} left the stream")
        at = fields[b"snapshot_id"]
    return at
