"""Who owns a generation: the run's token, id, host, process and since when.

The fencing keys (``redis_generations``) hold only the owner's token, which is all the
publish scripts need; an operator asking "which run is this, where, since when?"
(``rankflow status``) needs the rest. A run or rebuild records it once it has claimed its
generation, in the small hash ``{ns}:g<G>:owner_run`` (``Keys.owner_run``): inside the
generation, so it goes with it when a rebuild replaces it. The script
(:data:`scripts.RECORD_OWNER`) writes only for a token not older than the owner and newer
than the one recorded, so the first process of a multi-process run records it, and a run a
newer one fenced never overwrites the newer one's record.

Only a claim is recorded: whether the owner still runs is not (a stopped run keeps its
record until another claims the generation); the age of the last snapshot tells.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any, cast

import redis

from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.script_query import bind
from rankflow.connectors.scripts import RECORD_OWNER


def record_owner(client: redis.Redis, namespace: str, generation: int, token: int, run_id: str,
                 command: str, dead_letter: str = "") -> bool:
    """Record this process as run ``token`` (``run_id``; a rebuild has none: ``""``) of ``command``
    owning ``generation``, writing its dead letters to ``dead_letter`` (the ``--dead-letter`` URI,
    which ``status`` names beside the count);
    whether it was recorded (False: an older token, or the run's record is there already)."""
    keys = Keys(namespace, generation)
    written = bind(client, RECORD_OWNER)(*RECORD_OWNER.ordered(
        {"owner": keys.owner, "owner_run": keys.owner_run},
        {"token": token, "run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(),
         "since": int(time.time() * 1000), "command": command, "dead_letter": dead_letter}))
    return bool(written)


def read_owner(client: redis.Redis, namespace: str, generation: int) -> dict[str, Any] | None:
    """The owner of ``generation``: ``{"token", "run_id", "host", "pid", "since", "command", "dead_letter"}``
    (``since`` in ms since the epoch); the fields other than ``token`` are None when the owner
    did not record them (a rankflow before this record, or a newer run that has not yet);
    None when no run owns it."""
    keys = Keys(namespace, generation)
    pipe = client.pipeline(transaction=False)
    pipe.get(keys.owner)
    pipe.hgetall(keys.owner_run)
    raw_owner, raw_run = cast(tuple[bytes | None, dict[bytes, bytes]], tuple(pipe.execute()))
    if raw_owner is None:
        return None
    token = int(raw_owner)
    run = {k.decode(): v.decode() for k, v in raw_run.items()}
    known = run.get("token") == str(token)
    return {"token": token,
            "run_id": run["run_id"] or None if known else None,
            "host": run["host"] if known else None,
            "pid": int(run["pid"]) if known else None,
            "since": int(run["since"]) if known else None,
            "command": run["command"] if known else None,
            "dead_letter": run.get("dead_letter") or None if known else None}
