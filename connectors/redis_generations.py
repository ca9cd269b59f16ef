"""Who may publish where: run tokens, and the generations they own.

Every run takes a token (``INCR {ns}:runs``) and claims a generation with it; the
publish script refuses a run whose token is older than the generation's owner, so
two runs never interleave their rankings. A live run publishes into the current
generation. ``rankflow rebuild`` builds a new generation beside it, checks it, then
switches ``{ns}:generation`` in one script: readers see the old ranking or the new
one, never a half-built one. The old generation's keys are removed after the switch,
by their common prefix (``Keys.prefix``) in batches, so Redis never holds one long
call whatever the flow keeps, and a flow's new keys need no list here.
"""

from __future__ import annotations

import re
from itertools import islice
from typing import NamedTuple

import redis

from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.script_query import bind, run
from rankflow.connectors.scripts import CLAIM, JOIN, MOVED, MOVES, PUBLISHED, SWITCH, Call
from rankflow.state.snapshot import SNAPSHOT_ID_RUN_FACTOR


class FencedError(RuntimeError):
    """A newer run owns the generation; this one must stop publishing."""


class GenerationSwitched(RuntimeError):
    """A rebuild replaced this run's generation; restart the run to follow it."""


class Fence(NamedTuple):
    """What a script writing for a run checks before anything else (the publish scripts'
    prelude, ``lua/activity_fence.lua``): the run's token, the generation it
    writes, and ``live`` (a run: the generation must stay current) or ``build`` (a
    rebuild's generation). Its fields are the fence's ``ARGV`` by name (``scripts.FENCE_ARGV``)."""

    token: int
    generation: int
    mode: str


class RunAlreadyPublished(RuntimeError):
    """A run started over without recovery state under the run id of a run that published."""

    def __init__(self, namespace: str, run_id: str, token: int) -> None:
        super().__init__(f"run id {run_id!r} belongs to run {token}, which already published snapshots in "
                         f"namespace {namespace!r}; a run without recovery state starts its input over, so "
                         "give it a new --run-id (or resume it with its --recovery-dir)")


class GenerationMoving(RuntimeError):
    """The current generation changed every time a script was called: give up."""

    def __init__(self, namespace: str) -> None:
        super().__init__(f"the generation of namespace {namespace!r} changed {MOVES} times during one "
                         "call; is something switching generations in a loop?")


def current_generation(client: redis.Redis, namespace: str) -> int:
    raw = client.get(Keys(namespace).generation)
    return int(raw) if raw is not None else 0


def new_run_token(client: redis.Redis, namespace: str) -> int:
    return int(client.incr(Keys(namespace).runs))


def claim_generation(client: redis.Redis, namespace: str, generation: int, token: int) -> None:
    """Make ``token`` the owner of ``generation``: older runs are fenced from now on."""
    keys = Keys(namespace, generation)
    bind(client, CLAIM)(*CLAIM.ordered({"owner": keys.owner}, {"token": token}))


def join_run(client: redis.Redis, namespace: str, run_id: str, fresh: bool = False,
             ttl_s: int = 86_400) -> tuple[int, int]:
    """The token and generation of run ``run_id``, taking them if this is its first process.

    Every process of a multi-process run calls this with the same ``run_id``: the
    first one takes a new token and claims the current generation for it, the others
    get the same answer, so they publish as one run. A ``fresh`` run (one that does
    not resume from recovery state) starts its input over on purpose, so it also
    forgets the generation's published positions: "never back in time" holds within
    one lineage of state, and a new computation replaces the old one. A fresh process
    joining a run that already published is refused (:class:`RunAlreadyPublished`):
    with the run's token its epochs, so its snapshot ids, would start over below the
    stored ones and never be published.
    """
    join = run(bind(client, JOIN), Join(Keys(namespace), run_id, fresh, ttl_s, current_generation(client, namespace)))
    token, joined_generation = (int(x) for x in join.reply[1].decode().split(":"))
    if join.reply[0] == PUBLISHED:
        raise RunAlreadyPublished(namespace, run_id, token)
    return token, joined_generation


class Join:
    """The calls of :data:`scripts.JOIN` of one process (a ``script_query.Query``): in the
    generation it read, then in the one the script says the run is in."""

    attempts = MOVES

    def __init__(self, keys: Keys, run_id: str, fresh: bool, ttl_s: int, generation: int) -> None:
        self.keys, self.run_id, self.fresh, self.ttl_s, self.generation = keys, run_id, fresh, ttl_s, generation
        self.reply: list[bytes] = []

    def call(self) -> Call:
        keys, g = self.keys, self.keys.of_generation(self.generation)
        return JOIN.ordered({"run": keys.run(self.run_id), "runs": keys.runs, "generation": keys.generation,
                             "owner": g.owner, "positions": g.positions, "snapshot_id": g.snapshot_id},
                            {"ttl_s": self.ttl_s, "fresh": "1" if self.fresh else "0", "generation": self.generation,
                             "run_factor": SNAPSHOT_ID_RUN_FACTOR})

    def settle(self, reply: list[bytes]) -> bool:
        if reply[0] == MOVED:
            self.generation = int(reply[1])
            return False
        self.reply = reply
        return True

    def gave_up(self) -> Exception:
        return GenerationMoving(self.keys.namespace)


def switch_generation(client: redis.Redis, namespace: str, old: int, new: int) -> None:
    """Point readers at ``new`` (atomically: the switch script), then remove ``old``.

    The script also records ``old`` as retired, and the removal forgets it only once done:
    a switch interrupted before the end leaves its old generation for the next switch to remove.
    A live run of ``old`` writes nothing more: its scripts find it replaced (``SWITCHED``)."""
    keys = Keys(namespace)
    try:
        bind(client, SWITCH)(*SWITCH.ordered({"generation": keys.generation, "retired": keys.retired},
                                             {"old": old, "new": new}))
    except redis.ResponseError as exc:
        raise GenerationSwitched(str(exc).replace("SWITCHED ", "")) from None
    remove_retired(client, namespace, new)


def remove_retired(client: redis.Redis, namespace: str, current: int) -> None:
    """Remove every retired generation but ``current``: the one a switch just replaced, and any
    an interrupted switch left."""
    keys = Keys(namespace)
    for member in client.smembers(keys.retired):
        if int(member) != current:
            drop_generation(client, namespace, int(member))
        client.srem(keys.retired, member)


DROP_BATCH = 1_000
"""Keys one ``SCAN`` step reads and one ``UNLINK`` frees (off Redis's main thread): short calls."""


def drop_generation(client: redis.Redis, namespace: str, generation: int) -> None:
    """Remove every key of ``generation``, whatever flow wrote it: all start with its prefix.

    ``SCAN`` returns every key that exists during the whole scan, and nothing creates keys in a
    generation being dropped (a rebuild's own, after its run; a replaced one, whose writers are
    refused), so none is missed. One namespace is one hash tag, so each batch is in one
    Redis Cluster slot."""
    pattern = glob_escape(Keys(namespace, generation).prefix) + "*"
    keys = client.scan_iter(match=pattern, count=DROP_BATCH)
    while batch := list(islice(keys, DROP_BATCH)):
        client.unlink(*batch)


def glob_escape(text: str) -> str:
    """``text`` as a Redis ``MATCH`` pattern that matches only itself: a namespace may hold
    ``*``, ``?``, ``[`` or ``\\``.

    >>> glob_escape("{a*b}:g1:")
    '{a\\\\*b}:g1:'
    """
    return re.sub(r"([\\*?\[\]])", r"\\\1", text)
