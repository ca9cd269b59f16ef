"""Who may publish where: run tokens, and the generations they own.

Every run takes a token (``INCR {ns}:runs``) and claims a generation with it; the
publish script refuses a run whose token is older than the generation's owner, so
two runs never interleave their rankings. A live run publishes into the current
generation. ``rankflow rebuild`` builds a new generation beside it, checks it, then
switches ``{ns}:generation`` and removes the old generation in one script: readers
see the old ranking or the new one, never a half-built one.
"""

from __future__ import annotations

import redis

from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_scripts import CLAIM_LUA, JOIN_LUA, MOVED, MOVES, SWITCH_LUA


class FencedError(RuntimeError):
    """A newer run owns the generation; this one must stop publishing."""


class GenerationSwitched(RuntimeError):
    """A rebuild replaced this run's generation; restart the run to follow it."""


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
    client.eval(CLAIM_LUA, 1, keys.owner, token)


def join_run(client: redis.Redis, namespace: str, run_id: str, fresh: bool = False,
             ttl_s: int = 86_400) -> tuple[int, int]:
    """The token and generation of run ``run_id``, taking them if this is its first process.

    Every process of a multi-process run calls this with the same ``run_id``: the
    first one takes a new token and claims the current generation for it, the others
    get the same answer, so they publish as one run. A ``fresh`` run (one that does
    not resume from recovery state) starts its input over on purpose, so it also
    forgets the generation's published positions: "never back in time" holds within
    one lineage of state, and a new computation replaces the old one.
    """
    keys = Keys(namespace)
    generation = current_generation(client, namespace)
    for _ in range(MOVES):
        g = keys.of_generation(generation)
        reply = client.eval(JOIN_LUA, 5, keys.run(run_id), keys.runs, keys.generation, g.owner, g.positions,
                            ttl_s, "1" if fresh else "0", generation)
        if reply[0] != MOVED:
            token, joined_generation = reply[1].decode().split(":")
            return int(token), int(joined_generation)
        generation = int(reply[1])
    raise GenerationMoving(namespace)


def switch_generation(client: redis.Redis, namespace: str, old: int, new: int) -> None:
    """Point readers at ``new`` and remove ``old``, atomically."""
    keys = Keys(namespace)
    old_keys = keys.of_generation(old).generation_keys()
    try:
        client.eval(SWITCH_LUA, 1 + len(old_keys), keys.generation, *old_keys, old, new)
    except redis.ResponseError as exc:
        raise GenerationSwitched(str(exc).replace("SWITCHED ", "")) from None


def drop_generation(client: redis.Redis, namespace: str, generation: int) -> None:
    client.unlink(*Keys(namespace, generation).generation_keys())
