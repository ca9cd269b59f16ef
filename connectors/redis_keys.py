"""Where snapshots live in Redis: the key layout of a namespace, and the connection.

Key layout for a namespace ``ns``; the ``{ns}`` hash tag keeps every key of a
namespace in one Redis Cluster slot, so one script may touch them all:

==============================  ==================================================
``{ns}:runs``                   run tokens: ``INCR``-ed by every run and rebuild
``{ns}:run:<run id>``           ``token:generation`` of a run's processes (a day)
``{ns}:generation``             the generation readers use (absent means 0); also the
                                pub/sub channel that announces its new snapshots
                                (``scripts.PUBLISH_ARGV``)
``{ns}:retired``                generations a switch replaced and whose keys are not
                                all removed yet (set; ``redis_generations``)
``{ns}:g<G>:owner``             the token of the run that owns generation G
``{ns}:g<G>:owner_run``         who that run is: token, run id, host, pid, since
                                (hash; ``redis_owner``, read by ``rankflow status``)
``{ns}:g<G>:snapshot``          G's latest snapshot (JSON)
``{ns}:g<G>:snapshot_id``       its id
``{ns}:g<G>:published_at``      when it was published (ms since the epoch, the
                                document's ``published_at``), written with it:
                                readers answer it with the id without reading the
                                document (``scripts.READ_BOARD``)
``{ns}:g<G>:positions``         its input positions (hash: partition -> offset)
``{ns}:g<G>:snapshots``         a stream of G's published snapshots (capped)
``{ns}:g<G>:counts``            every song's count in G's latest snapshot (sorted
                                set: ``ZREVRANK`` is the song's rank)
``{ns}:g<G>:changes``           per published snapshot, the counts that changed
                                (stream, capped): readers keep their own copy of
                                the count table with it (see ``api.store``)
==============================  ==================================================

Every key of generation G, whatever the flow, starts with ``{ns}:g<G>:``
(:attr:`Keys.prefix`; a flow's new keys must be built from it): removing a
generation removes that prefix (``redis_generations.drop_generation``), so it never
needs a list of what a flow keeps.

The boards flow publishes into the namespace ``<ns>:boards`` (:func:`boards_namespace`),
so one ``--namespace`` serves both products without their runs fencing each other.
Its generation holds, besides the keys above (without counts and changes):

=====================================  ===========================================
``{ns:boards}:g<G>:b:<game>:<board>``  the board's entries (sorted set; the order
                                       of docs/semantics/boards.md 4, see ``PUBLISH_BOARDS_LUA``)
``{ns:boards}:g<G>:r:<game>:<board>``  the number of the board's ``reached_at``
                                       buckets (absent: 1); bucket ``i``, a small
                                       hash player -> ``reached_at``, is this key
                                       followed by ``:<i>`` (``redis_boards``)
``{ns:boards}:g<G>:boards_layout``     the layout of the boards' keys
                                       (``redis_boards.LAYOUT``)
``{ns:boards}:g<G>:aliases``           per game its newest periods (hash: game ->
                                       JSON ``[daily, weekly]``)
``{ns:boards}:g<G>:boards``            every board there is (set of JSON ``[game,
                                       board]``)
``{ns:boards}:g<G>:board_changes``     per stored snapshot, what it changed (stream,
                                       capped, see ``PUBLISH_BOARDS_LUA``): the API's
                                       in-process mirror follows it (``api.board_mirror``)
``{ns:boards}:g<G>:rank_change``       the snapshot id from which a ``--rank-change`` run
                                       keeps the boards' moves (absent: none kept);
                                       each board's are its sorted set's key followed
                                       by ``:m``, ``:mt`` and ``:mn`` (``lua/rank_change.lua``),
                                       and since the day start ``:dm``, ``:dt``, ``:dn``
``{ns:boards}:g<G>:rank_change:day``   per game its day's first snapshot and the one
                                       before it, the day start (``lua/day_moves.lua``)
``{ns:boards}:g<G>:finals``            every final standings there is (hash: JSON
                                       ``[game, "final:<board>"]`` -> JSON
                                       ``{closed_by, positions, players}``); each
                                       is a board's two keys, named ``final:<board>``
=====================================  ===========================================

The activity flow publishes into ``<ns>:activity`` (:func:`activity_namespace`); its
generation holds, besides the shared keys (without counts and changes):

=====================================  ===========================================
``{ns:activity}:g<G>:w:<workspace>``   the workspace's channels with a count in the
                                       snapshot's window (sorted set, score = count:
                                       ``ZREVRANGE`` is docs/semantics/windows.md 4's order): its slot
                                       ``a``
``{ns:activity}:g<G>:v:<workspace>``   the same, slot ``b``: a large snapshot is written
                                       into the slot readers do not read, then one
                                       small script switches them (``redis_activity``)
``{ns:activity}:g<G>:slots``           the workspaces whose readers read slot ``b``
                                       (hash: workspace -> ``b``; absent: ``a``)
``{ns:activity}:g<G>:workspaces``      every workspace with a count (set)
``{ns:activity}:g<G>:staged``          the workspaces with a slot written but not yet
                                       freed after the switch (set)
=====================================  ===========================================
"""

from __future__ import annotations

from typing import Any, overload

import redis

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_NAMESPACE = "rankflow"


class InGeneration:
    """A key of one generation that a fixed suffix names: ``Keys.prefix + suffix``, read
    as an attribute of :class:`Keys` and built when read (most users of a :class:`Keys`
    need none of a given product's keys).

    >>> Keys("ns", 3).aliases
    '{ns}:g3:aliases'
    """

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix

    @overload
    def __get__(self, keys: None, owner: Any = None) -> InGeneration: ...
    @overload
    def __get__(self, keys: Keys, owner: Any = None) -> str: ...

    def __get__(self, keys: Keys | None, owner: Any = None) -> str | InGeneration:
        return self if keys is None else keys.prefix + self.suffix


class Keys:
    """Key names of one namespace (and one generation of it)."""

    def __init__(self, namespace: str, generation: int = 0) -> None:
        if not namespace or "}" in namespace or "{" in namespace:
            raise ValueError(f"invalid namespace {namespace!r}: non-empty, without braces")
        self.namespace = namespace
        self.tag = "{" + namespace + "}"
        self.runs = f"{self.tag}:runs"
        self.generation = f"{self.tag}:generation"
        self.retired = f"{self.tag}:retired"
        self.prefix = f"{self.tag}:g{generation}:"
        """What every key of the generation starts with, and no key of another one."""
        g = self.prefix
        self.owner = f"{g}owner"
        self.owner_run = f"{g}owner_run"
        self.snapshot = f"{g}snapshot"
        self.snapshot_id = f"{g}snapshot_id"
        self.published_at = f"{g}published_at"
        self.positions = f"{g}positions"
        self.stream = f"{g}snapshots"
        self.counts = f"{g}counts"
        self.changes = f"{g}changes"
        self.boards_layout = f"{g}boards_layout"

    def of_generation(self, generation: int) -> Keys:
        return Keys(self.namespace, generation)

    def run(self, run_id: str) -> str:
        """The key where the processes of run ``run_id`` find its token and generation."""
        return f"{self.tag}:run:{run_id}"

    def board(self, game: str, board: str) -> tuple[str, str]:
        """A board's sorted set and its ``reached_at`` buckets' count key (each bucket's key is
        that key, ``:`` and the bucket's number). Board names have a fixed form (``all``,
        ``best``, ``daily:D``, ``weekly:W``: none ends in ``:`` and digits), so
        ``<game>:<board>`` names one board whatever characters the game id holds, and no
        bucket's key is another board's."""
        return f"{self.prefix}b:{game}:{board}", f"{self.prefix}r:{game}:{board}"

    def workspace(self, workspace: str, slot: str = "a") -> str:
        """A workspace's channels ranked (activity flow) in one of its two slots (``a``,
        ``b``; :attr:`workspace_slots` says which one readers read): a fixed prefix and the
        id, which is last, so any characters may follow the prefix."""
        return f"{self.prefix}{'w' if slot == 'a' else 'v'}:{workspace}"

    def workspace_both(self, workspace: str) -> tuple[str, str]:
        """Both slots of a workspace: a script that picks one by :attr:`workspace_slots`
        must declare both (Redis Cluster)."""
        return self.workspace(workspace, "a"), self.workspace(workspace, "b")

    # A product's keys of the generation named by their suffix alone (the layout above).
    workspaces_staged = InGeneration("staged")
    workspace_slots = InGeneration("slots")
    workspaces = InGeneration("workspaces")
    aliases = InGeneration("aliases")
    boards = InGeneration("boards")
    board_changes = InGeneration("board_changes")
    rank_change = InGeneration("rank_change")
    finals = InGeneration("finals")

    def generation_keys(self) -> list[str]:
        return [self.owner, self.snapshot, self.snapshot_id, self.published_at, self.positions, self.stream, self.counts, self.changes]


def activity_namespace(namespace: str) -> str:
    """Where the activity flow of ``namespace`` publishes."""
    return f"{namespace}:activity"


def boards_namespace(namespace: str) -> str:
    """Where the boards flow of ``namespace`` publishes."""
    return f"{namespace}:boards"


def connect(url: str) -> redis.Redis:
    """A client with bounded waits, so a stalled Redis raises instead of hanging.

    The timeouts here are defaults: redis-py lets the URL's query options
    (``?socket_timeout=SECONDS``, ``?socket_connect_timeout=SECONDS``) override them.
    """
    return redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=10)
