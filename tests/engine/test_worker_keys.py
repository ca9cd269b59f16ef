"""Keys chosen for a worker land on it in a real Bytewax run (``operators.worker_keys``)."""

from __future__ import annotations

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink, TestingSource, cluster_main

from rankflow.operators.worker_keys import local_key, worker_of


def _landed(keys: list[str], workers: int) -> dict[str, int]:
    """Each key's worker in a keyed step of a run with ``workers`` workers (threads of one process:
    keys are routed over every worker of every process alike)."""
    out: list[tuple[str, int]] = []
    flow = Dataflow("worker_keys")
    items = op.input("in", flow, TestingSource(keys))
    keyed = op.key_on("key", items, lambda k: k)
    counted = op.stateful_map("state", keyed, lambda s, _: (None, 1))
    op.inspect_debug("where", counted, lambda _s, item, _e, worker: out.append((item[0], worker)))
    op.output("out", counted, TestingSink([]))
    cluster_main(flow, [], 0, worker_count_per_proc=workers)
    return dict(out)


def test_worker_of_is_bytewaxs_routing() -> None:
    keys = [f"users-{i}" for i in range(40)] + ["playback-events/3", "a", "", "é" * 9]
    keys = [k for k in keys if k]
    for workers in (2, 3, 4):
        assert _landed(keys, workers) == {k: worker_of(k, workers) for k in keys}


def test_local_key_lands_on_its_worker() -> None:
    for workers in (1, 2, 4):
        keys = [local_key(f"topic/{p}", w, workers) for p in range(4) for w in range(workers)]
        landed = _landed(keys, workers)
        assert all(landed[local_key(f"topic/{p}", w, workers)] == w for p in range(4) for w in range(workers))
    assert local_key("topic/0", 0, 1) == "topic/0"
    assert local_key("topic/0", 1, 4) == local_key("topic/0", 1, 4)  # the same in every process and run
