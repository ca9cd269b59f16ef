"""Every Lua script rankflow runs in Redis: its files, its ``KEYS`` and ``ARGV``, its replies.

The Lua is in ``connectors/lua/*.lua`` (package data, read with ``importlib.resources``);
a script is one or more of those files joined in the order its :class:`Script` names
(:func:`compose`, the only place pieces are put together). Each :class:`Script` also
names its ``KEYS`` and ``ARGV`` in order, and builds them from named values
(:meth:`Script.ordered` and the functions below), so no caller counts positions: the
one position a script computes itself, ``P`` of the publish scripts (the first argument
after the source positions), comes from the partition count the builder puts in
``ARGV[7]``. ``tests/engine/test_script_keys.py`` checks these names against the indices the
Lua reads, and loads every script of :data:`SCRIPTS` into Redis.

Every key a script touches is passed in ``KEYS``: Redis Cluster routes a script by
its keys and refuses one that reaches others. A script whose keys depend on the current
generation therefore gets the keys of the generation the caller read, checks that it is
still current, and otherwise answers ``MOVED`` with the current one so the caller calls
again (``connectors.script_query`` runs those calls).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property
from importlib.resources import files
from typing import Any, NamedTuple

from rankflow.connectors.board_layout import BUCKET_LOAD

LUA_DIR = files("rankflow.connectors").joinpath("lua")
"""Where the ``.lua`` files are, inside the installed package."""


class Local(NamedTuple):
    """A ``local NAME = value`` line between a script's pieces (a constant the next piece reads)."""

    name: str
    value: int

    def text(self) -> str:
        return f"local {self.name} = {self.value}\n"


def piece(name: str) -> str:
    """The code of ``lua/<name>.lua``: its leading ``--`` comment lines (for readers of
    the file) are not sent to Redis."""
    lines = LUA_DIR.joinpath(f"{name}.lua").read_text(encoding="utf-8").splitlines(keepends=True)
    start = 0
    while start < len(lines) and lines[start].startswith("--"):
        start += 1
    return "".join(lines[start:])


def compose(parts: Iterable[str | Local]) -> str:
    """One script from its pieces in order: each file's code on a new line after the text
    before it, each :class:`Local` as its line."""
    return "".join(part.text() if isinstance(part, Local) else "\n" + piece(part) for part in parts)


class Call(NamedTuple):
    """One call's ``KEYS`` and ``ARGV``."""

    keys: list[Any]
    args: list[Any]


def _ordered(names: tuple[str, ...], named: Mapping[str, Any], script: str, what: str) -> list[Any]:
    """``named``'s values in the order of ``names``, which must be exactly its names (cheap:
    readers build one per query)."""
    if len(named) == len(names):
        try:
            return [named[n] for n in names]
        except KeyError:
            pass
    raise TypeError(f"{script}'s {what} are {names}, got {sorted(named)}")


@dataclass(frozen=True)
class Script:
    """One script: its pieces (``lua/`` file names and :class:`Local` lines, in order),
    its fixed ``KEYS`` and ``ARGV`` by name, and what follows them.

    ``argv_at_p``: for the publish scripts, the fixed arguments from ``ARGV[P]`` on (``P
    = F + 1 + 2M``, after the N source positions and the M floor positions): ``full`` or ``delta``, then the product's."""

    name: str
    parts: tuple[str | Local, ...]
    keys: tuple[str, ...]
    argv: tuple[str, ...]
    more_keys: str = ""
    more_argv: str = ""
    argv_at_p: tuple[str, ...] = ()
    reads_only: bool = False

    @cached_property
    def source(self) -> str:
        """The text sent to Redis: a script that only reads declares it (:data:`NO_WRITES`)."""
        return (NO_WRITES if self.reads_only else "") + compose(self.parts)

    @cached_property
    def sha(self) -> str:
        """The SHA1 Redis knows the script by (``EVALSHA``, ``SCRIPT LOAD``'s reply)."""
        return hashlib.sha1(self.source.encode()).hexdigest()

    def key_index(self, name: str) -> int:
        """``name``'s index in ``KEYS`` (from 1, as Lua counts)."""
        return self.keys.index(name) + 1

    def ordered(self, keys: Mapping[str, Any], argv: Mapping[str, Any], more_keys: Iterable[Any] = (),
                more_argv: Iterable[Any] = ()) -> Call:
        """The call's lists: the fixed ``KEYS`` and ``ARGV`` in this script's order (every
        name given, no other), then the variable parts as the caller built them."""
        return Call(_ordered(self.keys, keys, self.name, "KEYS") + list(more_keys),
                    _ordered(self.argv, argv, self.name, "ARGV") + list(more_argv))

    def product_keys(self, **named: Any) -> list[Any]:
        """A publish script's fixed keys after the shared :data:`PUBLISH_KEYS`, in order."""
        return _ordered(self.keys[len(PUBLISH_KEYS):], named, self.name, "product KEYS")

    def at_p(self, **named: Any) -> list[Any]:
        """A publish script's fixed arguments from ``ARGV[P]`` (:attr:`argv_at_p`), in order."""
        return _ordered(self.argv_at_p, named, self.name, "ARGV from P")


NO_WRITES = "#!lua flags=no-writes\n"
"""The first line of a script that only reads (Redis 7 script flags): Redis then runs it on a
read-only replica whatever the replica's configuration, and on a primary over its memory
limit, and refuses any write it would try (readers on replicas: ``redis_replicas``)."""


def slots_at(keys: tuple[str, ...]) -> Local:
    """``SLOTS`` for ``lua/activity_slot.lua``: the index of the slots hash in ``keys``."""
    return Local("SLOTS", keys.index("workspace_slots") + 1)


MOVED = b"moved"
"""The first element of a reply asking the caller to call again with another
generation's keys."""

MOVES = 3
"""How often a caller follows ``MOVED`` before giving up: a generation changes once
per rebuild, so one more call is almost always enough."""

PUBLISHED = b"published"
"""The first element of :data:`JOIN`'s refusal of a fresh process."""


# -- publishing --------------------------------------------------------------------------

PUBLISH_KEYS = ("generation", "owner", "snapshot_id", "snapshot", "positions", "stream", "runs", "published_at")
"""``KEYS`` 1-8 of every publish script: the generation pointer, and of the run's
generation: owner, snapshot_id, snapshot, positions, snapshots stream; then the run-token
counter; then the generation's ``published_at`` (when its snapshot was published, a few
bytes a reader returns with the snapshot id without reading the snapshot's document)."""

PUBLISH_ARGV = ("token", "generation", "snapshot_id", "snapshot", "stream_cap", "mode", "partitions", "published_at")
"""``ARGV`` 1-8 of every publish script: run token, generation, snapshot id, snapshot JSON,
stream cap, ``live`` or ``build``, N source partitions, when the snapshot was published (ms
since the epoch: the document's ``published_at``); then N (partition, offset) pairs;
then at ``ARGV[F]`` (``F = 9 + 2N``) M, and M (partition, offset) pairs: the *floor*, the
positions Redis must hold for the changes to apply (empty when there is none); then at
``ARGV[P]`` (``P = F + 1 + 2M``) :attr:`Script.argv_at_p`.

``lua/publish_prelude.lua`` refuses, in this order:

* a live run whose generation is no longer current (a rebuild replaced it): error
  ``SWITCHED ...``;
* a run whose token is older than the generation's owner: error ``FENCED ...``;
* changes (``delta``) when the generation has no snapshot yet (a new generation, or
  Redis lost its data): ``NO_TABLE``, and the publisher sends its whole state;
* the stored snapshot itself, same id and same positions (a retry of a call whose
  answer was lost): ``ALREADY_STORED``; its changes are in Redis;
* any other snapshot whose id is not newer than the stored one (a run resumed from
  recovery state with its old token replays older epochs): ``OLDER``;
* a snapshot whose positions are behind the stored ones for any source partition
  (a restarted run still catching up): ``BEHIND``. Published positions never go
  backwards;
* changes (``delta``) whose floor is ahead of the stored positions for any partition:
  ``GAP``. Redis lacks changes they build on: it was restored from an older backup, or
  a run died (or stopped) after its recovery state had moved past snapshots Redis never
  stored. The publisher sends its whole state, or stops the run saying how to heal it
  (``rankflow.resume_point``).

Otherwise it stores the snapshot, its publication time (``published_at``, the same
number as the document's) and its positions, and the product's body (run
next, in the same script) stores its changes: ``STORED`` (replies: ``Published``).
Every call also re-creates the generation pointer (live), the owner and the run-token
counter (at least this token) if Redis lost them, so a run started later still gets a
newer token and takes over.

A snapshot stored into the generation readers use (the pointer's, or the run's own in
live mode) is announced on the pub/sub channel named like the pointer's key
(``{ns}:generation``), message ``generation:snapshot_id``: the service's readers wake on
it (``api.announce``) rather than polling. A rebuild's snapshots, into a generation no
reader uses yet, are not announced; its switch is (message ``generation:``). Both
publish with ``pcall``: an ACL user without the channel loses the announcement, never
the publish.

"Same positions" is what makes a retry safe to forget: the state of a cut is a
function of the input before it, so Redis's state is the one the caller has.
Within one run a replayed epoch may cut the input elsewhere under the same id.
"""

PUBLISH_LISTENERS = Script(
    "publish_listeners", ("publish_prelude", "publish_listeners"),
    keys=PUBLISH_KEYS + ("counts", "changes"), argv=PUBLISH_ARGV, more_argv="the source positions",
    argv_at_p=("full", "counts", "changes_cap"))
"""Stores one snapshot of the listener flow, atomically (``redis_listeners.CountTable``).

The prelude, then ``KEYS`` 9-10: the generation's counts and changes; from ``ARGV[P]``:
``full`` or ``delta``, the count changes (JSON), the changes stream's cap. A ``full``
table replaces the counts; the changes go to the changes stream, naming the snapshot
before them (readers follow it, ``api.store``)."""

_PUBLISH_BOARDS_KEYS = PUBLISH_KEYS + ("aliases", "boards", "board_changes", "boards_layout")
PUBLISH_BOARDS = Script(
    "publish_boards",
    (Local("LAYOUT", _PUBLISH_BOARDS_KEYS.index("boards_layout") + 1), "board_layout", "publish_prelude",
     "board_buckets", Local("LOAD", BUCKET_LOAD), "finals", "day_moves", "publish_boards"),
    keys=_PUBLISH_BOARDS_KEYS,
    more_keys="per changed board its sorted set and its reached_at buckets' count key, then the same two keys "
              "of every dropped board, then per closed period its two and its final's two, per expired final "
              "its two (lua/finals.lua), then the finals hash, then the rank change marker",
    argv=PUBLISH_ARGV, more_argv="the source positions",
    argv_at_p=("full", "layout", "changes_cap", "entry_bytes", "changed", "dropped", "rank_change", "closed",
               "expired", "aliases"))
"""Stores one snapshot of the boards flow, atomically (``redis_boards.BoardsState``).

First ``lua/board_layout.lua``: a generation whose boards are in another layout than
``ARGV[P + 1]`` (``board_layout.LAYOUT``) while it has a snapshot is refused with error
``LAYOUT ...`` before anything is written; a generation without a snapshot takes this
layout. Then the prelude, then ``KEYS``: 9 the games' aliases (hash: game -> JSON
``[daily, weekly]``), 10 the set of boards (members: JSON ``[game, board]``), 11 the
``board_changes`` stream, 12 the layout key, then per changed board its sorted set and
its ``reached_at`` buckets' count key, then the same two keys of every dropped board, then
last the generation's ``rank_change`` marker.
``ARGV`` from ``ARGV[P]``: ``full`` or ``delta``, the layout, the changes stream's cap
(entries), the most bytes of entries one stream entry copies, the number of changed
boards B, of dropped boards D, ``1`` to keep the boards' moves (``--rank-change``, below) or
'', the number of alias updates A; then A (game, JSON) pairs; one JSON object ``{player: h}``, ``h`` the CRC-32 of every
player of the changed ``all`` boards (``board_layout.player_hash``, once per player whatever the
boards); per changed board its JSON name, its entries as one JSON object ``{player:
[score, reached_at]}`` (one argument per board: packing it is orjson's work in C,
unpacking it Redis's, on the core the flow is not using), their number, and for a keyed
board (``best``, a period) one JSON object ``{player: its sorted-set score}``, '' for ``all``;
per dropped board its JSON name.

A board's sorted set orders its entries as docs/semantics/boards.md section 4 does with
Redis's own order. On a keyed board the member is the player id and the score the double
whose bit pattern is the entry's order key (``board_layout.KeyedBoard``): one ``ZADD`` an
entry, and ``lua/board_scores.lua`` reads a score's points group. On ``all`` the score is
``-score`` (ascending = score descending) and the member
is ``reached_at`` as 6 big-endian bytes followed by the player id
(``board_layout.member``), so equal scores order by ``reached_at`` then by the id's
bytes. ``ZRANK`` is then the exact rank - 1, and ``ZCOUNT key -inf (s`` (on a keyed board
``s`` the least score of the entry's points group) the number of
players with a strictly greater score. On ``all`` a player's member is found from their id in one
of the board's ``reached_at`` buckets (``lua/board_buckets.lua``): before a board takes
a snapshot's entries, it takes buckets (splitting one at a time, ``LOAD`` players per
bucket on average at most) as if all of them were new. A bucket's key is the count key
followed by ``:`` and its number, built in the script, in the declared key's slot.

Every stored snapshot also adds one entry to the ``board_changes`` stream (capped with
``MAXLEN ~``), for the API's in-process mirror (``api.board_mirror``): ``snapshot_id``,
``published_at`` (as the prelude stored it), ``previous`` (the snapshot id stored before it, '' if none: entries chain), ``full``
(``delta``, ``full`` or ``large``), and for a ``delta`` the snapshot's changes as the
script received them, joined without re-encoding: ``aliases`` a JSON array ``[game,
periods JSON, ...]``, ``boards`` a JSON array ``[[game, board], {player: [score,
reached_at]}, ...]``, ``dropped`` a JSON array of ``[game, board]``. Entries are
absolute (the new score and ``reached_at``), so replaying them over any older state
converges. A ``full`` entry carries nothing: the publisher sent its whole state (Redis
had lost it, or a new generation), and a mirror reloads the boards. Nor does a
``large`` one, whose entries exceed the byte bound (a backlog's catch-up, not steady
traffic): the stream's memory stays bounded by cap x bound, and a mirror reloads rather
than replays it.

Rank change (docs/semantics/boards.md 5.5): with ``rank_change`` ``1`` the script keeps, per
board whose keys the snapshot changed, the entries that moved (``lua/rank_change.lua`` reads
them), replacing those of the board's previous change: the hash ``<board>:m`` (player -> its
score before, after its member's 6 ``reached_at`` bytes on ``all``; '' for an entry new on the board) and
the sorted sets ``<board>:mt`` and ``<board>:mn`` of the moved entries' keys before and now,
the board's key followed by those suffixes (built in the script, as the buckets' are); the
hash's field '' (no player's id) holds the snapshot id they were kept at. The marker holds the
snapshot id from which they are kept (set once): moves older than it are an earlier run's,
whose board may have changed since without them, and readers ignore them. Without it the
script deletes the marker (readers then answer no ``rank_change``) and does the boards' work
as before; a dropped board's moves go with it."""

_PUBLISH_ACTIVITY_KEYS = PUBLISH_KEYS + ("workspaces", "workspace_slots")
PUBLISH_ACTIVITY = Script(
    "publish_activity",
    ("publish_prelude", slots_at(_PUBLISH_ACTIVITY_KEYS), "activity_slot", "publish_activity"),
    keys=_PUBLISH_ACTIVITY_KEYS,
    more_keys="both slots of the W workspaces, then of the G ones, then (full only) of the stale ones",
    argv=PUBLISH_ARGV, more_argv="the source positions", argv_at_p=("full", "direct"))
"""Stores one snapshot of the activity flow, atomically (``redis_activity.ActivityState``).

The prelude, then ``KEYS`` 9: the set of workspaces with a count, 10: the slots hash
(``redis_keys``: which of its two sorted sets a workspace's readers read). A snapshot's
changed workspaces come in two ways, and ``ARGV`` after ``ARGV[P]`` (``full`` or
``delta``) holds three lists, each its length first:

* W workspaces whose changes the script applies to the slot readers read (all of a
  small snapshot's): their ids, then their changes as one JSON object ``{workspace:
  {channel: count}}`` (0 removes the channel; one document, decoded once, costs Redis
  less than one per workspace);
* S workspaces :data:`STAGE_ACTIVITY` already wrote into the slot readers do not read
  (a large snapshot's, in calls short enough not to hold readers up), still with a
  count: pairs (workspace id, the slot it was written in); the script switches them;
* G workspaces staged that are left without a count: their ids.

``KEYS`` from 11: both slots of the W workspaces, then of the G ones and (``full`` only)
of the workspaces Redis holds that the snapshot does not name, all of which it removes
(``UNLINK``: Redis frees them off its main thread). A ``full`` snapshot (an execution's
first: every count) starts from no workspaces and no slots.

``lua/activity_slot.lua`` (shared with the staging scripts): a workspace's slot
(``SLOTS``, set before it, is the index of the slots hash in ``KEYS``), a command over a
long list in pieces (Lua's ``unpack`` stops at about 8,000 values), and applying one
workspace's changes to a sorted set with one ``ZADD`` and one ``ZREM`` for many
channels, not one call each (a call from Lua costs about as much as the command itself).

A workspace's sorted set holds its channels with a positive count, score = count:
``ZREVRANGE`` then orders them count descending, then channel id descending byte-wise
(Redis orders equal scores by the member's bytes), which is docs/semantics/windows.md 4,
and ``ZREVRANK`` is the rank - 1."""

FENCE_KEYS = ("generation", "owner")
FENCE_ARGV = ("token", "generation", "mode")
"""``lua/activity_fence.lua``: the checks of the publish prelude that concern a writer, for
the activity scripts that write only what readers do not read: ``KEYS`` the generation
pointer and the generation's owner; ``ARGV`` run token, generation, ``live`` or
``build`` (``redis_generations.Fence``). They claim nothing: the publish script that
follows does."""

_STAGING_KEYS = FENCE_KEYS + ("workspace_slots", "workspaces_staged")
STAGE_ACTIVITY = Script(
    "stage_activity", (slots_at(_STAGING_KEYS), "activity_slot", "activity_fence", "stage_activity"),
    keys=_STAGING_KEYS, more_keys="both slots of each item's workspace",
    argv=FENCE_ARGV + ("budget",), more_argv="items of three: workspace id, copy/fresh/more, changes JSON")
"""Writes part of a large activity snapshot where readers do not look (``activity_staging``).

The fence, then ``KEYS`` 3: the slots hash, 4: the set of workspaces with a staged slot
(so that a crash before the switch leaks nothing: the next full snapshot removes them),
then both slots of each item's workspace. ``ARGV`` after the fence's: a budget, then
items of three (workspace id, how, changes): ``copy`` starts the slot readers do not
read from the one they read, ``fresh`` from nothing (a ``full`` snapshot), ``more`` goes
on with a workspace an earlier item started (a workspace with many changes comes in
several items); then its changes, as in :data:`PUBLISH_ACTIVITY`. Items are done in
order while the members copied and changed, and 16 for each item (its own calls), stay
within the budget (the first always), so one call holds Redis about as long as the
budget's worth of ``ZADD``. Replies the number of items done, then per item done the
slot it wrote and whether that sorted set has members (1) or not (0): the caller sends
the rest in another call. Nothing here is visible to a reader until
:data:`PUBLISH_ACTIVITY` switches the slots."""

DROP_ACTIVITY = Script(
    "drop_activity", (slots_at(_STAGING_KEYS), "activity_slot", "activity_fence", "drop_activity"),
    keys=_STAGING_KEYS, more_keys="both slots of each workspace", argv=FENCE_ARGV, more_argv="the workspace ids")
"""Frees the slot readers do not read of each workspace (the previous ranking after a
switch, or a staged one a refused snapshot left). The fence, then ``KEYS`` 3: the slots
hash, 4: the set of staged workspaces, then both slots of each workspace; ``ARGV`` after
the fence's: the workspace ids."""


# -- runs and generations ------------------------------------------------------------------

CLAIM = Script("claim", ("claim",), keys=("owner",), argv=("token",))
"""Makes ``token`` the owner of a generation unless a newer token owns it. ``KEYS``: the
generation's owner. Replies the owner after the call."""

JOIN = Script("join", ("join",), keys=("run", "runs", "generation", "owner", "positions", "snapshot_id"),
              argv=("ttl_s", "fresh", "generation", "run_factor"))
"""The token and generation of one run, the same for every process of it.

``KEYS``: the run's key, the run-token counter, the generation pointer, then of
generation G (the run's, or the current one for a new run, as the caller read it):
owner, positions, snapshot_id. ``ARGV``: how long the run's key lives (seconds), ``1``
for a fresh run (one without recovery state), G, the snapshot-id run factor.
Replies ``{'moved', generation}`` when the run's generation is not G: call again
with that generation's keys. Else ``{'joined', 'token:generation'}``: the run's
stored answer, or a new token that now owns G (a fresh run's first process also
forgets G's positions, as its input starts over). Refuses a fresh process joining
a run whose token has published G's latest snapshot, ``{'published',
'token:generation'}``: that process starts its input over, so its snapshot ids
would restart below the stored one and be ignored. Within one start of a run every
process joins before any publishes (Bytewax connects them all first)."""

RECORD_OWNER = Script("record_owner", ("record_owner",), keys=("owner", "owner_run"),
                      argv=("token", "run_id", "host", "pid", "since", "command", "dead_letter"))
"""Records who the run owning a generation is, for ``rankflow status`` (``redis_owner``).
``KEYS``: the generation's owner, its ``owner_run`` hash. ``ARGV``: the run's token, its run
id, host name, process id, when it claimed the generation (ms since the epoch) and the
command (``run``, ``rebuild``) and its dead-letter output (``--dead-letter``, where ``status`` says
its dead letters are). Writes the hash only for a token that is not older than the
owner and newer than the one recorded: the first process of a run records it, a fenced run
never does. Replies 1 when it wrote, else 0."""

SWITCH = Script("switch", ("switch",), keys=("generation", "retired"), argv=("old", "new"))
"""Points readers at a new generation and retires the old one, atomically.

``KEYS``: the generation pointer, the set of retired generations. ``ARGV``: the old and
the new generation. Errors ``SWITCHED ...`` if the pointer is not the old generation
(someone switched already); else announces the new generation (``generation:`` on the
pointer's channel, as the publish prelude does) and replies 1. The caller then removes the retired
generation's keys by their prefix (``redis_generations.drop_generation``)."""


# -- reading -------------------------------------------------------------------------------

# Every read script starts with ``lua/moved.lua``: ``{'moved', current}`` unless ``ARGV[1]`` is
# the current generation (``KEYS[1]`` its pointer); the caller calls again in that one.

READ_LISTENERS = Script(
    "read_listeners", ("moved", "read_listeners"),
    keys=("generation", "snapshot_id", "snapshot", "changes", "counts"),
    argv=("generation", "held_snapshot_id", "held_generation", "changes_at"), reads_only=True)
"""What a reader needs to follow the latest snapshot, atomically (``api.store``).

``KEYS``: the generation pointer, then of generation G (the one the reader expects to be
current): snapshot_id, snapshot, changes, counts. ``ARGV``: G, the snapshot id and
generation the reader holds, the id of the last ``changes`` entry it applied ('' for
none). Replies ``{'moved', current}`` when G is not the current generation (call again
with that generation's keys); ``{G}`` when there is no snapshot; ``{G, id}`` when the
reader is current; else ``{G, id, snapshot, 'table', changes_at, [song, count, ...]}``
(the whole count table, for a reader without one or of another generation) or ``{G, id,
snapshot, 'changes', entries}`` (the ``changes`` entries after the reader's)."""

READ_BOARD = Script(
    "read_board", ("moved", "board_buckets", "board_scores", "board_pages", "rank_change", "read_board"),
    keys=("generation", "snapshot_id", "aliases", "board", "reached_at", "boards_layout", "published_at",
          "rank_change"),
    argv=("generation", "alias", "guess", "query", "n", "player", "game", "layout", "player_hash", "ties",
          "cursor_score", "cursor_member", "since"),
    more_argv="for ranks: each player asked for, then its CRC-32", reads_only=True)
"""One board query, atomically (``board_read``). ``KEYS``: the generation pointer, then of
generation G: snapshot_id, aliases, the board's sorted set, its ``reached_at`` buckets'
count key, the layout key, ``published_at``. ``ARGV``: G, the alias asked for (``daily``, ``weekly`` or
''), the board it resolved to, the query (``top``, ``player``, ``around``), n or r, the
player, the game, the layout the reader reads, the player's CRC-32. Replies
``{'moved', current}`` (call again in that generation), ``{'layout', found}`` (the
generation's boards are in another layout), ``{'alias', board}`` (the alias
names another board now), or ``{'board', snapshot id, published_at, players, answer}``
(``published_at`` '' for a snapshot an older rankflow stored, which did not keep it): for ``top`` the
first n ``member, score`` pairs; for ``player`` ``{score, rank - 1, players with a better
score}`` or false; for ``around`` ``{first rank - 1, the first item's players with a
better score, member, score ...}`` or false; for ``ranks`` (the players after the fixed ``ARGV``) a
``{score, rank - 1, players with a better score}`` (with ties ``dense`` also the distinct better scores)
or false per player, in the order asked.

Pages, tie styles and percentiles (``connectors.board_pages``, ``lua/board_pages.lua``): ``ARGV``
ties ``dense`` appends to a player's and an around's answer the distinct scores better than
the player's (an around's first item's); ``after`` (n, the cursor's sorted-set score and member)
and ``page`` (n, the player) answer as ``around`` does, for the n entries after the cursor's
place and the page of n the player is on; ``at`` (n: a percentile in hundredths of a percent)
answers ``{r, score}``, r the last rank inside it and the score there (the r-th distinct score
with ``dense``), or false when no entry is.

Rank change (docs/semantics/boards.md 5.5, ``lua/rank_change.lua``): the replies of ``top``,
``after``, ``page``, ``around``, ``player`` and ``ranks`` carry a sixth element, per item (the player for
``player``, each player on the board in the order asked for ``ranks``) the positions gained since the board's previous change as a decimal string, ''
for an entry new then; or false when the generation keeps no moves (``KEYS`` 8, the
``rank_change`` marker, absent: a run without ``--rank-change``) or the board has not changed
since they are kept. ``ARGV`` ``since`` (5.6): '' for that, ``day`` for the change since the
game's day start (the hash ``<marker>:day``, ``lua/day_moves.lua``), or a snapshot id, which must
be one still retained: the one stored before the board's last change or the day start; the
seventh element is then the basis's snapshot id ('' for the day start of a first snapshot).
Else the reply is ``{'since', the basis of the board's previous change, 'day ' and the day
start's id, the marker}``, each '' when not retained (``board_read.SinceNotRetained``).

The publish script's ``<board>:m`` field '' holds ``'C B'``: the snapshot id of the change and
the one stored before it (its basis, '' if none); with ``rank_change`` ``1`` it also keeps per game
the snapshot where its newest daily period became current and per board the moves since the day
start (``lua/day_moves.lua``, docs/redis-keys.md)."""

READ_ACTIVITY = Script(
    "read_activity", ("moved", "read_activity"),
    keys=("generation", "snapshot_id", "snapshot", "workspace_slots", "slot_a", "slot_b"),
    argv=("generation", "held_snapshot_id", "query", "k", "channel", "workspace"), reads_only=True)
"""One activity query, atomically (``activity_read``). ``KEYS``: the generation pointer,
then of generation G: snapshot_id, snapshot, the slots hash and both slots of the
workspace (any keys for ``global``). ``ARGV``: G, the snapshot id whose document the
reader holds ('' for none), the query (``top``, ``channel``, ``global``), k, the channel,
the workspace. Replies ``{'moved', current}``, ``{'none'}`` (nothing published yet) or
``{'snapshot', id, document or false (the reader holds it), answer}``: for ``top`` the
first k ``channel, count`` pairs, for ``channel`` ``{count, rank - 1}`` or false."""

BOARD_CHUNK = Script("board_chunk", ("board_chunk",), keys=("board",), argv=("size",),
                     more_argv="anchors: (member, score) pairs the reader read last, oldest first", reads_only=True)
"""The next chunk of a board for a reader loading it in pieces (``api.board_mirror``).

``KEYS``: the board's sorted set. ``ARGV``: the chunk's size, then anchors, ``member,
score`` pairs as a chunk replied them. Replies the ``member, score`` pairs after the
newest anchor still in its place, the same member with the same score (from the start
without anchors), or false when every anchor has left its place (their players
changed): start the board over. Entries that did not change keep their order among
themselves, so every one of them after an unchanged anchor is still after it: a load in
chunks misses none, whatever is published meanwhile (the changed ones come back from the
changes stream). A member whose score changed has moved, so it is no anchor: after its
new place a load would skip the unchanged entries between the two."""


SCRIPTS: tuple[Script, ...] = (PUBLISH_LISTENERS, PUBLISH_BOARDS, PUBLISH_ACTIVITY, STAGE_ACTIVITY, DROP_ACTIVITY,
                               CLAIM, JOIN, RECORD_OWNER, SWITCH, READ_LISTENERS, READ_BOARD, READ_ACTIVITY, BOARD_CHUNK)
"""Every script rankflow sends (a new one goes here, and so into the tests that load them all)."""


def publish_call(script: Script, fence: tuple[int, int, str], snapshot_id: int, snapshot: bytes, published_at: int,
                 stream_cap: int, positions: Mapping[Any, int], keys: Mapping[str, Any], product_keys: list[Any],
                 product_args: list[Any], floor: Mapping[Any, int] | None = None) -> Call:
    """A publish script's call: the shared keys (``keys``, by :data:`PUBLISH_KEYS` name)
    and arguments (``published_at``: the document's, ms since the epoch), the source positions
    in partition order (their count in ``ARGV[7]``
    tells the script where ``F`` is), the floor's count and positions (``floor``: what
    Redis must hold for the changes to apply; its count tells the script where ``P`` is),
    then the product's keys and arguments (:meth:`Script.product_keys`,
    :meth:`Script.at_p` and its variable parts)."""
    token, generation, mode = fence
    pairs = [x for part, offset in sorted(positions.items()) for x in (part, offset)]
    floors = [x for part, offset in sorted((floor or {}).items()) for x in (part, offset)]
    return Call(_ordered(PUBLISH_KEYS, keys, script.name, "KEYS") + product_keys,
                _ordered(PUBLISH_ARGV, {"token": token, "generation": generation, "snapshot_id": snapshot_id,
                                        "snapshot": snapshot, "stream_cap": stream_cap, "mode": mode,
                                        "partitions": len(pairs) // 2, "published_at": published_at},
                         script.name, "ARGV")
                + pairs + [len(floors) // 2] + floors + product_args)


class Published(IntEnum):
    """The publish scripts' replies (:data:`PUBLISH_ARGV`). After ``OLDER``, ``BEHIND``,
    ``NO_TABLE`` and ``GAP`` the changes are not in Redis: they must go with the next snapshot
    it stores."""

    STORED = 1
    ALREADY_STORED = 0
    BEHIND = -1
    NO_TABLE = -2
    OLDER = -3
    GAP = -4
