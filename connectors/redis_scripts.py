"""The scripts' texts under the names tools and benchmarks look them up by (``*_LUA``).

The scripts themselves, their ``KEYS`` and ``ARGV`` and their replies are in
``connectors.scripts`` (the Lua in ``connectors/lua/``); this module only names their
composed texts, e.g. to tell them apart in Redis's slow log by their SHA1.
"""

from __future__ import annotations

from rankflow.connectors import scripts as _s
from rankflow.connectors.scripts import MOVED, MOVES, PUBLISHED, Published

__all__ = ["MOVED", "MOVES", "PUBLISHED", "Published", "BY_NAME"]

BY_NAME = {
    "PUBLISH_LUA": _s.PUBLISH_LISTENERS, "PUBLISH_BOARDS_LUA": _s.PUBLISH_BOARDS,
    "PUBLISH_ACTIVITY_LUA": _s.PUBLISH_ACTIVITY, "STAGE_ACTIVITY_LUA": _s.STAGE_ACTIVITY,
    "DROP_ACTIVITY_LUA": _s.DROP_ACTIVITY, "CLAIM_LUA": _s.CLAIM, "JOIN_LUA": _s.JOIN, "SWITCH_LUA": _s.SWITCH,
    "READ_LUA": _s.READ_LISTENERS, "BOARD_READ_LUA": _s.READ_BOARD, "ACTIVITY_READ_LUA": _s.READ_ACTIVITY,
    "BOARD_CHUNK_LUA": _s.BOARD_CHUNK,
}
"""Each ``*_LUA`` name and its script."""


def __getattr__(name: str) -> str:
    """``PUBLISH_LUA`` and the others of :data:`BY_NAME`: the script's text."""
    script = BY_NAME.get(name)
    if script is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return script.source
