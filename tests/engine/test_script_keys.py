"""Every Lua script names every key it touches in ``KEYS``, as Redis Cluster requires.

A standalone Redis runs a script that builds key names itself without complaint; a
cluster refuses it (or routes it to the wrong node). One kind of built key is allowed: a
declared key followed by ``:`` and digits (a board's ``reached_at`` bucket,
``connectors.board_layout``). It has the declared key's hash tag, so it lives in the
same slot, which Redis Cluster accepts from a script (it refuses a key of another
slot); its number depends on the board's size, which only Redis knows. So each script rankflow sends
gets a prelude here that asks Redis which arguments of every command it runs are
keys (``COMMAND GETKEYS``, Redis's own answer) and records any key not in ``KEYS``.
The scripts then run their real paths: joins, claims, the owner's record, publishes (whole table,
changes, Redis lost its data), a reader following snapshots across a rebuild's
switch.

The registry (``connectors.scripts.SCRIPTS``) is checked too, script by script, so a new
one is covered once it is listed: Redis compiles it (``SCRIPT LOAD``), its named ``KEYS``
and ``ARGV`` are the indices its Lua reads, and the query runner calls it again where
it says.
"""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest
import redis
import redis.asyncio as aioredis

from rankflow.api.board_mirror import BoardMirror
from rankflow.api.store import SnapshotCache
from rankflow.connectors import redis_generations, script_query, scripts
from rankflow.connectors.redis_generations import (
    claim_generation,
    join_run,
    new_run_token,
    switch_generation,
)
from rankflow.connectors.board_read import BoardReader
from rankflow.connectors.redis_boards import BoardsState, RedisLostBoards
from rankflow.connectors.activity_read import ActivityReader
from rankflow.connectors.redis_activity import ActivityState, RedisLostActivity
from rankflow.connectors.redis_keys import Keys, activity_namespace, boards_namespace
from rankflow.connectors.redis_owner import record_owner
from rankflow.state.activity_snapshot import ActivitySnapshot
from rankflow.connectors.redis_listeners import CountTable
from rankflow.connectors.redis_publish import Publisher
from rankflow.state.board_snapshot import BoardsSnapshot
from rankflow.connectors.redis_read import read_counts
from rankflow.state.snapshot import Snapshot, snapshot_id

SCRIPTS = {script.source: script.name for script in scripts.SCRIPTS}

PRELUDE = """
local declared = {}
for _, key in ipairs(KEYS) do declared[key] = true end
local function checked(call)
  return function(command, ...)
    local found, keys = pcall(redis.call, 'COMMAND', 'GETKEYS', command, ...)
    for _, key in ipairs(found and keys or {}) do
      -- built from a declared key: buckets, moves, the moves since the day start, the day's marker
      local base = string.match(key, '^(.*):%%d+$') or string.match(key, '^(.*):m[tn]?$')
        or string.match(key, '^(.*):d[mtn]$') or string.match(key, '^(.*):day$')
      if not declared[key] and not (base and declared[base]) then
        redis.call('RPUSH', '%(log)s', '%(script)s: ' .. command .. ' ' .. key)
      end
    end
    return call(command, ...)
  end
end
local redis = setmetatable({call = checked(redis.call), pcall = checked(redis.pcall)}, {__index = redis})
"""


@pytest.fixture
def undeclared(monkeypatch, redis_client):
    """Every script sent through redis-py gets the prelude; yields the log of keys
    touched outside ``KEYS`` and the names of the scripts that ran."""
    log = f"undeclared-keys:{uuid.uuid4().hex}"
    sent: set[str] = set()

    def checked(script: str) -> str:
        name = SCRIPTS.get(script, "unknown script")
        sent.add(name)
        # a reader's script is declared read-only (scripts.NO_WRITES, its first line): the check
        # writes its log, so it runs the script's body without the flag (the keys are the same)
        return PRELUDE % {"log": log, "script": name} + script.removeprefix(scripts.NO_WRITES)

    for cls in (redis.Redis, aioredis.Redis):
        register, evaluate = cls.register_script, cls.eval
        monkeypatch.setattr(cls, "register_script",
                            lambda self, script, register=register: register(self, checked(script)))
        monkeypatch.setattr(cls, "eval", lambda self, script, numkeys, *rest, evaluate=evaluate:
                            evaluate(self, checked(script), numkeys, *rest))
    yield lambda: [entry.decode() for entry in redis_client.lrange(log, 0, -1)], sent
    redis_client.delete(log)


def snap(run: int, epoch: int, counts: dict[str, int], full: bool = False) -> Snapshot:
    items = sorted(((song, n) for song, n in counts.items() if n > 0), key=lambda sn: (-sn[1], sn[0]))
    total = sum(n for _, n in items)
    return Snapshot(snapshot_id(run, epoch), run, epoch, {"f": epoch}, total, total, len(items), 0, 10,
                    items, {}, [], [], counts, full)


def test_the_check_sees_a_key_outside_keys(undeclared, redis_client, namespace):
    log, _ = undeclared
    redis_client.eval("return redis.call('GET', KEYS[1] .. ':built')", 1, f"{{{namespace}}}:declared")
    assert log() == [f"unknown script: GET {{{namespace}}}:declared:built"]


def test_every_script_touches_only_keys_it_declares(undeclared, monkeypatch, redis_client, redis_url, namespace):
    log, sent = undeclared
    run_id = uuid.uuid4().hex
    token, generation = join_run(redis_client, namespace, run_id, fresh=True)
    assert join_run(redis_client, namespace, run_id) == (token, generation), "a second process joins the run"
    assert record_owner(redis_client, namespace, generation, token, run_id, "run")  # for `rankflow status`
    live = Publisher(redis_url, namespace, token, generation, state=CountTable())
    loop = asyncio.new_event_loop()
    cache = SnapshotCache(redis_url, namespace)

    def follow() -> None:
        loop.run_until_complete(cache.refresh())

    try:
        assert live.publish(snap(token, 1, {"a": 2, "b": 1}, full=True)) == 1
        follow()  # the whole table
        assert live.publish(snap(token, 2, {"b": 3})) == 1
        follow()  # the changes since
        follow()  # nothing new
        redis_client.delete(*redis_client.keys(f"{{{namespace}}}:g*"))  # Redis lost the generation
        assert live.publish(snap(token, 3, {"c": 1})) == 1  # the whole table again
        assert read_counts(redis_client, namespace) == {"a": 2, "b": 3, "c": 1}

        rebuild = new_run_token(redis_client, namespace)
        claim_generation(redis_client, namespace, rebuild, rebuild)
        Publisher(redis_url, namespace, rebuild, rebuild, live=False, state=CountTable()).publish(snap(rebuild, 1, {"z": 1}, full=True))
        switch_generation(redis_client, namespace, generation, rebuild)
        follow()  # a reader of the old generation follows the switch
        assert cache.snapshot["run"] == rebuild and cache.table.count("z") == 1
        monkeypatch.setattr(redis_generations, "current_generation", lambda *_: generation)  # a stale view
        assert join_run(redis_client, namespace, uuid.uuid4().hex)[1] == rebuild, "the join follows the switch"
    finally:
        live.close()
        loop.run_until_complete(cache.client.aclose())
        loop.close()
    boards_publish_and_read(redis_client, redis_url, namespace)
    activity_publish_and_read(redis_client, redis_url, namespace)
    assert sent == set(SCRIPTS.values()), "every script ran through the check"
    outside = log()
    assert not outside, "keys touched outside KEYS:\n" + "\n".join(outside)


JAN1, JAN9 = 1798761600000, 1799452800000
"""The first ms of 2027-01-01 and 2027-01-09: a daily board's ``reached_at`` is a time of its day."""


def boards_snap(run: int, epoch: int, entries: list, dropped: list = (), aliases: dict | None = None) -> BoardsSnapshot:
    grouped: dict = {}
    for player, changes in entries:
        for game, board, score, reached_at, _ in changes:
            grouped.setdefault((game, board), {})[player] = (score, reached_at)
    return BoardsSnapshot(snapshot_id(run, epoch), run, epoch, {"f": epoch}, 0, 10, {}, grouped,
                          list(dropped), aliases or {}, {}, [])


def load_the_mirror(url: str, namespace: str) -> None:
    """The API's board mirror loads in one-entry chunks: every chunk after the first is anchored."""
    loop = asyncio.new_event_loop()
    client = aioredis.Redis.from_url(url)
    try:
        mirror = BoardMirror(client, namespace, load_chunk=1)
        loop.run_until_complete(mirror.load())
        assert mirror.top("g", "all", 5)["items"][0]["score"] == 10
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()


def boards_publish_and_read(client: redis.Redis, url: str, namespace: str) -> None:
    """The boards flow's scripts: publish (entries, aliases, a dropped board, the whole
    state again after Redis lost it), every query, a rebuild's switch."""
    ns = boards_namespace(namespace)
    token, generation = join_run(client, ns, uuid.uuid4().hex, fresh=True)
    pub = Publisher(url, ns, token, generation, state=BoardsState())
    try:
        assert pub.publish(boards_snap(token, 1, [("a", (("g", "all", 5, 1, True), ("g", "daily:2027-01-01", 5, JAN1 + 1, True)))],
                                       aliases={"g": ("2027-01-01", "2026-W53")})) == 1
        assert pub.publish(boards_snap(token, 2, [("a", (("g", "all", 9, 2, False),)), ("b", (("g", "daily:2027-01-09", 1, JAN9 + 3, True),))],
                                       dropped=[("g", "daily:2027-01-01")], aliases={"g": ("2027-01-09", "2027-W01")})) == 1
        client.delete(Keys(ns, generation).snapshot_id)  # Redis "lost" the snapshot
        with pytest.raises(RedisLostBoards):
            pub.publish(boards_snap(token, 3, []))
    finally:
        pub.close()
    # a run republishing it all, keeping the moves (--rank-change): c is new, a moves down past it
    again = Publisher(url, ns, token, generation, state=BoardsState(complete=True, rank_change=True))
    try:
        assert again.publish(boards_snap(token, 4, [("a", (("g", "all", 9, 2, False),)), ("b", (("g", "daily:2027-01-09", 1, JAN9 + 3, False),)),
                                                    ("c", (("g", "all", 10, 4, True),))],
                                         aliases={"g": ("2027-01-09", "2027-W01")})) == 1
    finally:
        again.close()
    reader = BoardReader(client, namespace)
    assert [(i["score"], i.get("rank_change")) for i in reader.top("g", "all", 5)["items"]] == [(10, None), (9, -1)]
    load_the_mirror(url, namespace)
    assert reader.player("g", "daily", "b")["rank"] == 1
    assert reader.around("g", "all", "a", 1)["items"][1]["player_id"] == "a"
    rebuild = new_run_token(client, ns)
    claim_generation(client, ns, rebuild, rebuild)
    Publisher(url, ns, rebuild, rebuild, live=False, state=BoardsState()).publish(
        boards_snap(rebuild, 1, [("z", (("g", "best", 1, 1, True),))]))
    switch_generation(client, ns, generation, rebuild)
    assert reader.top("g", "best", 5)["items"][0]["player_id"] == "z"
    assert not client.exists(*Keys(ns, generation).board("g", "all")), "the old generation's boards are gone"


def activity_snap(run: int, epoch: int, changed: dict[str, dict[str, int]], full: bool = False) -> ActivitySnapshot:
    return ActivitySnapshot(snapshot_id(run, epoch), run, epoch, {"f": epoch}, 0, {}, 100, 600_000 + epoch,
                            60_000, 60, "messages", [], 0, changed, full, {}, [])


def activity_publish_and_read(client: redis.Redis, url: str, namespace: str) -> None:
    """The activity flow's scripts: a full publish, changes, Redis losing its data, a resumed
    run's full publish replacing workspaces it no longer has, every query."""
    ns = activity_namespace(namespace)
    token, generation = join_run(client, ns, uuid.uuid4().hex, fresh=True)

    pub = Publisher(url, ns, token, generation, state=ActivityState())
    try:
        assert pub.publish(activity_snap(token, 1, {"A": {"x": 2, "y": 1}, "B": {"z": 1}}, full=True)) == 1
        assert pub.publish(activity_snap(token, 2, {"A": {"y": 0, "w": 5}, "B": {"z": 0}})) == 1
        client.delete(Keys(ns, generation).snapshot_id)  # Redis "lost" the snapshot
        with pytest.raises(RedisLostActivity):
            pub.publish(activity_snap(token, 3, {"A": {"x": 3}}))
    finally:
        pub.close()
    client.sadd(Keys(ns, generation).workspaces, "C")
    client.zadd(Keys(ns, generation).workspace("C"), {"old": 7})
    again = Publisher(url, ns, token, generation, state=ActivityState())  # a resumed run: its first snapshot is full
    try:
        assert again.publish(activity_snap(token, 4, {"A": {"x": 3}}, full=True)) == 1
    finally:
        again.close()
    reader = ActivityReader(client, namespace)
    assert reader.top("A", 5)["items"] == [{"rank": 1, "channel_id": "x", "count": 3}]
    assert reader.top("C", 5)["items"] == [], "a workspace the full snapshot does not name is gone"
    assert reader.channel("A", "x")["rank"] == 1
    assert reader.global_top(5)["snapshot_id"] == snapshot_id(token, 4)
    assert {m.decode() for m in client.smembers(Keys(ns, generation).workspaces)} == {"A"}

    staged = Publisher(url, ns, token, generation, state=ActivityState(stage_at=1, stage_every_s=0))  # every snapshot staged
    try:
        assert staged.publish(activity_snap(token, 5, {"A": {"x": 4}, "D": {"d": 1, "e": 2}}, full=True)) == 1
        assert staged.publish(activity_snap(token, 6, {"A": {"x": 0}, "D": {"f": 3}})) == 1  # A left empty
    finally:
        staged.close()
    assert reader.top("D", 5)["items"][0] == {"rank": 1, "channel_id": "f", "count": 3}
    assert reader.top("A", 5)["items"] == []
    assert {m.decode() for m in client.smembers(Keys(ns, generation).workspaces)} == {"D"}


@pytest.mark.parametrize("script", scripts.SCRIPTS, ids=lambda script: script.name)
def test_every_script_loads_into_redis(redis_client, script):
    """``SCRIPT LOAD`` compiles the script: a syntax error in any ``.lua`` piece fails here,
    not in the first run that calls it. The SHA1 Redis answers is the one callers send."""
    assert redis_client.script_load(script.source) == script.sha


def test_every_lua_file_is_part_of_a_script():
    used = {part for script in scripts.SCRIPTS for part in script.parts if isinstance(part, str)}
    files = {path.name.removesuffix(".lua") for path in scripts.LUA_DIR.iterdir() if path.name.endswith(".lua")}
    assert files == used


def indices(source: str, table: str) -> tuple[set[int], set[str]]:
    """The literal indices a script reads of ``KEYS`` or ``ARGV``, and the other index expressions."""
    found = re.findall(rf"\b{table}\[([^\]]+)\]", source)
    return {int(i) for i in found if i.isdigit()}, {i for i in found if not i.isdigit()}


@pytest.mark.parametrize("script", scripts.SCRIPTS, ids=lambda script: script.name)
def test_the_named_keys_and_argv_are_the_ones_the_lua_reads(script):
    """Every fixed ``KEYS`` and ``ARGV`` name of the registry is read by its number (a
    ``local`` constant such as ``SLOTS`` counts), no number beyond them; a script reads
    past them (an index computed, ``#KEYS``) only if its registry entry says what follows;
    and a publish script's ``P`` starts right after the positions, its ``ARGV[P + n]``
    reaching exactly the named arguments from ``ARGV[P]``."""
    source = script.source
    constants = {part.name: part.value for part in script.parts if isinstance(part, scripts.Local)}
    for table, names, more in (("KEYS", script.keys, script.more_keys),
                               ("ARGV", script.argv, script.more_argv or script.argv_at_p)):
        literal, computed = indices(source, table)
        literal |= {constants[i] for i in computed if i in constants}
        computed -= constants.keys()
        assert literal == set(range(1, len(names) + 1)), f"{script.name} reads {table} {sorted(literal)}: {names}"
        if not more:
            assert not computed and f"#{table}" not in source, f"{script.name} reads more {table}: {computed}"
    f = re.search(r"local F = (\d+) \+ 2 \* tonumber\(ARGV\[(\d+)\]\)", source)
    if not script.argv_at_p:
        assert f is None
        return
    assert f is not None and int(f[1]) == len(script.argv) + 1
    assert int(f[2]) == script.argv.index("partitions") + 1
    assert re.search(r"local P = F \+ 1 \+ 2 \* tonumber\(ARGV\[F\]\)", source)  # the floor's pairs
    assert "ARGV[P]" in source
    assert max(int(n) for n in re.findall(r"\bP \+ (\d+)", source)) == len(script.argv_at_p) - 1


def test_the_builders_order_by_name_and_refuse_a_wrong_name():
    call = scripts.SWITCH.ordered({"retired": "r", "generation": "g"}, {"new": 2, "old": 1})
    assert call == (["g", "r"], [1, 2])
    with pytest.raises(TypeError, match="switch's ARGV"):
        scripts.SWITCH.ordered({"retired": "r", "generation": "g"}, {"new": 2})
    with pytest.raises(TypeError, match="switch's KEYS"):
        scripts.SWITCH.ordered({"retired": "r", "generation": "g", "owner": "o"}, {"new": 2, "old": 1})


def test_a_publish_call_puts_the_products_arguments_at_p():
    """``F = 9 + 2 * ARGV[7]`` and ``P = F + 1 + 2 * ARGV[F]`` (the prelude) are where the
    builder put the floor and ``full``, whatever the number of source partitions and floors."""
    shared = {name: f"key:{name}" for name in scripts.PUBLISH_KEYS}
    for positions, floor in (({}, None), ({"f": 3}, {"f": 2}), ({"b": 1, "a": 7, "c": 0}, {"b": 1, "a": 5})):
        product = scripts.PUBLISH_LISTENERS
        keys, args = scripts.publish_call(product, (5, 2, "live"), 17, b"{}", 1234, 100, positions, shared,
                                          product.product_keys(counts="c", changes="ch"),
                                          product.at_p(full="full", counts=b"{}", changes_cap=9), floor)
        assert keys == [f"key:{name}" for name in scripts.PUBLISH_KEYS] + ["c", "ch"]
        assert len(keys) == len(product.keys)
        f = 9 + 2 * args[6]
        p = f + 1 + 2 * args[f - 1]
        assert args[:8] == [5, 2, 17, b"{}", 100, "live", len(positions), 1234]
        assert args[8:f - 1] == [x for part in sorted(positions) for x in (part, positions[part])]
        assert args[f:p - 1] == [x for part in sorted(floor or {}) for x in (part, (floor or {})[part])]
        assert args[p - 1:] == ["full", b"{}", 9]


class Probe:
    """A ``script_query.Query`` of ``READ_LISTENERS`` following the generation, counting its calls."""

    def __init__(self, namespace: str, attempts: int) -> None:
        self.keys, self.attempts, self.generation, self.calls = Keys(namespace), attempts, "0", 0
        self.reply: list = []

    def call(self) -> scripts.Call:
        self.calls += 1
        k = self.keys.of_generation(int(self.generation))
        return scripts.READ_LISTENERS.ordered(
            {"generation": k.generation, "snapshot_id": k.snapshot_id, "snapshot": k.snapshot, "changes": k.changes,
             "counts": k.counts},
            {"generation": self.generation, "held_snapshot_id": "", "held_generation": "", "changes_at": ""})

    def settle(self, reply: list) -> bool:
        if reply[0] == scripts.MOVED:
            self.generation = reply[1].decode()
            return False
        self.reply = reply
        return True

    def gave_up(self) -> Exception:
        return RuntimeError(f"gave up after {self.calls} calls")


def test_the_runner_follows_moves_loads_forgotten_scripts_and_gives_up(redis_client, redis_url, namespace):
    """Sync and async alike: a query calls again where the script says (here generation 5),
    a Redis that forgot its scripts (``SCRIPT FLUSH``: restarted) gets them again, and a
    query still moving after its attempts raises its own error."""
    redis_client.set(Keys(namespace).generation, 5)
    sync = script_query.bind(redis_client, scripts.READ_LISTENERS)
    redis_client.script_flush()
    probe = script_query.run(sync, Probe(namespace, attempts=2))
    assert (probe.calls, probe.reply) == (2, [b"5"])
    with pytest.raises(RuntimeError, match="gave up after 1 calls"):
        script_query.run(sync, Probe(namespace, attempts=1))

    async def both() -> None:
        client = aioredis.Redis.from_url(redis_url)
        try:
            bound = script_query.bind(client, scripts.READ_LISTENERS)
            await client.script_flush()
            probe = await script_query.arun(bound, Probe(namespace, attempts=2))
            assert (probe.calls, probe.reply) == (2, [b"5"])
            with pytest.raises(RuntimeError, match="gave up after 1 calls"):
                await script_query.arun(bound, Probe(namespace, attempts=1))
        finally:
            await client.aclose()

    asyncio.run(both())
