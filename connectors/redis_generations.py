"""Who may publish where: run tokens, and the generations they own.

Every run takes a token (``INCR {ns}:runs``) and claims a generation with it; the
publish script refuses a run whose token is older than the generation's owner, so
two runs never interleave their rankings. A live run publishes into the current
generation. ``rankflow rebuild`` builds a new generation beside it, checks it, then
switches ``{ns}:generation`` and removes the old generation in one script: readers
see the old ranking or the new one, never a half-built one.
"""

from __future__ import annotations

from typing import NamedTuple

import orjson
import redis

from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_scripts import CLAIM_LUA, JOIN_LUA, MOVED, MOVES, PUBLISHED, SWITCH_LUA
from rankflow.state.snapshot import SNAPSHOT_ID_RUN_FACTOR


class FencedError(RuntimeError):
    """A newer run owns the generation; this one must stop publishing."""


class GenerationSwitched(RuntimeError):
    """A rebuild replaced this run's generation; restart the run to follow it."""


class Fence(NamedTuple):
    """What a script writing for a run checks before anything else (the publish scripts'
    prelude, ``redis_scripts.ACTIVITY_FENCE``): the run's token, the generation it
    writes, and ``live`` (a run: the generation must stay current) or ``build`` (a
    rebuild's generation)."""

    token: int
    generation: int
    mode: str

    def args(self) -> list[int | str]:
        return [self.token, self.generation, self.mode]


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
    client.eval(CLAIM_LUA, 1, keys.owner, token)


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
    keys = Keys(namespace)
    generation = current_generation(client, namespace)
    for _ in range(MOVES):
        g = keys.of_generation(generation)
        reply = client.eval(JOIN_LUA, 6, keys.run(run_id), keys.runs, keys.generation, g.owner, g.positions,
                            g.snapshot_id, ttl_s, "1" if fresh else "0", generation, SNAPSHOT_ID_RUN_FACTOR)
        if reply[0] != MOVED:
            token, joined_generation = (int(x) for x in reply[1].decode().split(":"))
            if reply[0] == PUBLISHED:
                raise RunAlreadyPublished(namespace, run_id, token)
            return token, joined_generation
        generation = int(reply[1])
    raise GenerationMoving(namespace)


def switch_generation(client: redis.Redis, namespace: str, old: int, new: int) -> None:
    """Point readers at ``new`` and remove ``old``, atomically."""
    keys = Keys(namespace)
    old_keys = all_keys(client, keys.of_generation(old))
    try:
        client.eval(SWITCH_LUA, 1 + len(old_keys), keys.generation, *old_keys, old, new)
    except redis.ResponseError as exc:
        raise GenerationSwitched(str(exc).replace("SWITCHED ", "")) from None


def drop_generation(client: redis.Redis, namespace: str, generation: int) -> None:
    client.unlink(*all_keys(client, Keys(namespace, generation)))


def all_keys(client: redis.Redis, keys: Keys) -> list[str]:
    """Every key of a generation: the fixed ones, and each board's two (boards flow).

    Boards are listed from the generation's set of boards; a board a live run adds
    between this read and the switch is left behind (a leak, never a wrong answer:
    no reader looks at a generation that is not current).
    """
    boards = [orjson.loads(name) for name in client.smembers(keys.boards)]
    extra = [key for game, board in boards for key in keys.board(game, board)]
    return [*keys.generation_keys(), keys.aliases, keys.boards, keys.board_changes, *extra]
