"""Who owns a generation, as ``rankflow status`` reads it: recorded once per run, never by a fenced one."""

from __future__ import annotations

import os
import socket

from rankflow.connectors.redis_generations import claim_generation, join_run
from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_owner import read_owner, record_owner


def test_a_run_records_itself_once_and_a_fenced_run_never(redis_client, namespace):
    assert read_owner(redis_client, namespace, 0) is None
    token, generation = join_run(redis_client, namespace, "first")
    assert record_owner(redis_client, namespace, generation, token, "first", "run")
    owner = read_owner(redis_client, namespace, generation)
    assert owner is not None and owner.pop("since") > 0
    assert owner == {"token": token, "run_id": "first", "host": socket.gethostname(), "pid": os.getpid(),
                     "command": "run", "dead_letter": None}

    # another process of the same run: the first one's record stays
    redis_client.hset(Keys(namespace, generation).owner_run, "host", "the-first-process")
    assert not record_owner(redis_client, namespace, generation, token, "first", "run")
    assert read_owner(redis_client, namespace, generation)["host"] == "the-first-process"

    # a newer run claims the generation: until it records itself, only its token is known
    newer, _ = join_run(redis_client, namespace, "second")
    assert read_owner(redis_client, namespace, generation) == {
        "token": newer, "run_id": None, "host": None, "pid": None, "since": None, "command": None, "dead_letter": None}
    assert not record_owner(redis_client, namespace, generation, token, "first", "run"), "fenced: never recorded"
    assert record_owner(redis_client, namespace, generation, newer, "second", "run")
    assert read_owner(redis_client, namespace, generation)["run_id"] == "second"


def test_a_rebuild_records_itself_without_a_run_id(redis_client, namespace):
    claim_generation(redis_client, namespace, 7, 7)
    assert record_owner(redis_client, namespace, 7, 7, "", "rebuild")
    owner = read_owner(redis_client, namespace, 7)
    assert owner is not None and (owner["token"], owner["run_id"], owner["command"]) == (7, None, "rebuild")


def test_runs_and_rebuilds_record_themselves(flow, redis_client, tmp_path):
    from rankflow.connectors.redis_generations import current_generation
    from rankflow.options import RunOptions
    from rankflow.rebuild import rebuild

    path = flow.write_log([b'{"not": "an event"}'] * 3)
    done = flow.run(path)
    namespace = done["namespace"]
    owner = read_owner(redis_client, namespace, current_generation(redis_client, namespace))
    assert owner is not None and (owner["token"], owner["command"]) == (done["final"]["run"], "run")
    assert owner["run_id"] and owner["pid"] == os.getpid()
    assert owner["dead_letter"].startswith("jsonl:/"), "where its dead letters are, from any folder"

    final = rebuild(RunOptions(input=f"jsonl:{path}", redis_url=flow.redis_url, namespace=namespace,
                               dead_letter=f"jsonl:{tmp_path / 'rebuild-dead.jsonl'}"))
    generation = current_generation(redis_client, namespace)
    owner = read_owner(redis_client, namespace, generation)
    assert owner is not None and (owner["token"], owner["command"], owner["run_id"]) == (final["run"], "rebuild", None)
    assert owner["dead_letter"] == f"jsonl:{tmp_path / 'rebuild-dead.jsonl'}"
