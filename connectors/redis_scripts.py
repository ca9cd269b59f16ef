"""The scripts' texts under the names tools and benchmarks look them up by (``*_LUA``).

The scripts themselves, their ``KEYS`` and ``ARGV`` and their replies are in
``connectors.scripts`` (the Lua in ``connectors/lua/``); this module only names their
composed texts, e.g. to tell them apart in Redis's slow log by their SHA1.
"""

from __future__ import annotations

from rankflow.connectors.scripts import (
    BOARD_CHUNK,
    CLAIM,
    DROP_ACTIVITY,
    JOIN,
    MOVED,
    MOVES,
    PUBLISH_ACTIVITY,
    PUBLISH_BOARDS,
    PUBLISH_LISTENERS,
    PUBLISHED,
    READ_ACTIVITY,
    READ_BOARD,
    READ_LISTENERS,
    STAGE_ACTIVITY,
    SWITCH,
    Published,
)

__all__ = ["MOVED", "MOVES", "PUBLISHED", "Published", "PUBLISH_LUA", "PUBLISH_BOARDS_LUA", "PUBLISH_ACTIVITY_LUA",
           "STAGE_ACTIVITY_LUA", "DROP_ACTIVITY_LUA", "CLAIM_LUA", "JOIN_LUA", "READ_LUA", "SWITCH_LUA",
           "BOARD_READ_LUA", "ACTIVITY_READ_LUA", "BOARD_CHUNK_LUA"]

PUBLISH_LUA = PUBLISH_LISTENERS.source
PUBLISH_BOARDS_LUA = PUBLISH_BOARDS.source
PUBLISH_ACTIVITY_LUA = PUBLISH_ACTIVITY.source
STAGE_ACTIVITY_LUA = STAGE_ACTIVITY.source
DROP_ACTIVITY_LUA = DROP_ACTIVITY.source
CLAIM_LUA = CLAIM.source
JOIN_LUA = JOIN.source
READ_LUA = READ_LISTENERS.source
SWITCH_LUA = SWITCH.source
BOARD_READ_LUA = READ_BOARD.source
ACTIVITY_READ_LUA = READ_ACTIVITY.source
BOARD_CHUNK_LUA = BOARD_CHUNK.source
