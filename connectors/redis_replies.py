"""The types of Redis replies as rankflow's clients read them, for ``typing.cast``.

redis-py hints every reply as ``bytes | str`` (a string, or a container of them) whatever
the client's ``decode_responses``, because it cannot tell the two kinds of client apart.
rankflow never sets ``decode_responses``, so its clients' replies hold bytes: a reader casts a reply to one of these where it reads it, once per reply, never per
item.
"""

from __future__ import annotations

Members = set[bytes]
"""``SMEMBERS``."""
Hash = dict[bytes, bytes]
"""``HGETALL``."""
Scored = list[tuple[bytes, float]]
"""``ZRANGE ... WITHSCORES``: (member, score) pairs."""
Entries = list[tuple[bytes, dict[bytes, bytes]]]
"""``XRANGE``: (id, fields) pairs."""
Values = list[bytes | None]
"""``MGET``."""
