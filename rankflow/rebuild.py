"""``rankflow rebuild``: replay the input into a new generation, check it, switch readers.

Readers keep the current generation until the switch, which is one atomic script;
every key of the old generation is removed after it (``redis_generations``). A live run still publishing into the old
generation stops at its next publish (``GenerationSwitched``).

A rebuild switches only a ranking that is complete and sound:

* **complete**: every source partition reached the end it saw at start, and the
  last snapshot's positions are those ends. A graceful stop (Ctrl-C, SIGTERM)
  ends the sources early and the flow finishes as if the input had ended there;
  such a partial replay satisfies every invariant, so only the positions tell;
* **sound**: no errors, and what the flow's product checks (the listener flow:
  ``total_listeners == counted_users``).

Otherwise the new generation is dropped, readers stay where they were, and the
command fails saying why.
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from rankflow.connectors.redis_generations import (
    claim_generation,
    current_generation,
    drop_generation,
    new_run_token,
    switch_generation,
)
from rankflow.connectors.redis_owner import record_owner
from rankflow.connectors.redis_read import read_generation
from rankflow.connectors.source_batch import ENDS
from rankflow.endpoints import dead_letter_place, make_dead_letter_sink, make_source
from rankflow.execution import execute, stop_signal, tune_gc
from rankflow.options import RunOptions
from rankflow.products import Product
from rankflow.recovery import recovery_config, resumes_from_recovery
from rankflow.run_log import RunLog
from rankflow.runner import build_dataflow, check_run, connect_redis, must_republish, warn_unchecked

log = logging.getLogger("rankflow.rebuild")


class RebuildFailed(RuntimeError):
    """The rebuilt generation was incomplete or failed its checks; readers still use the old one.

    ``signal``: the signal that stopped the rebuild early, if one did.
    """

    def __init__(self, message: str, signal: int | None = None) -> None:
        super().__init__(message)
        self.signal = signal


def rebuild(opts: RunOptions) -> dict[str, Any]:
    """Replay, check, switch; the final snapshot of the new generation."""
    check_run(opts)
    opts.until_eof = True
    tune_gc()
    from_start = not resumes_from_recovery(opts.recovery_dir)  # then retention must not have cut the input
    recovery = recovery_config(opts)
    warn_unchecked(opts)
    source = make_source(opts.input, follow=False, chunk_bytes=opts.read_chunk_bytes, whole_history=from_start,
                         max_line_bytes=opts.max_line_bytes, read_batch=opts.kafka_batch,
                         kafka_settings=opts.kafka_settings)
    dead_letter = make_dead_letter_sink(opts.dead_letter, opts.kafka_settings)
    client = connect_redis(opts.redis_url)
    try:
        token = new_run_token(client, opts.redis_namespace)
        old, new = current_generation(client, opts.redis_namespace), token  # tokens are unique, so generations are
        flow = build_dataflow(opts, token, new, live=False, source=source, fresh=from_start,
                              republish=must_republish(client, opts, new, from_start), dead_letter=dead_letter)
        claim_generation(client, opts.redis_namespace, new, token)
        record_owner(client, opts.redis_namespace, new, token, "", "rebuild",  # a rebuild has no run id
                     dead_letter_place(opts.dead_letter))
        log.info("rebuilding namespace %r beside the ranking readers see (as generation %s): they keep the current "
                 "one (generation %s) until the rebuilt one is complete and checked", opts.redis_namespace, new, old)
        try:
            reporting = RunLog.of(opts, live=False, what="rebuilding").start()
            try:
                execute(flow, opts, recovery)
            finally:
                reporting.stop()
            final = read_generation(client, opts.redis_namespace, new)
            _check_complete(final, source.list_parts())
            _check_sound(final, opts.product)
            switch_generation(client, opts.redis_namespace, old, new)
        except BaseException:
            _drop(client, opts.redis_namespace, new, old)
            raise
        log.info("readers now get the rebuilt ranking (generation %s); the old one (generation %s) is removed", new, old)
        assert final is not None
        return final
    finally:
        client.close()


def _drop(client: redis.Redis, namespace: str, new: int, old: int) -> None:
    drop_generation(client, namespace, new)
    log.error("rebuild failed: what it had written (generation %s) is removed; readers keep the current ranking "
              "(generation %s)", new, old)


def _check_complete(final: dict[str, Any] | None, parts: list[str]) -> None:
    """Every source partition reached its end, and the final snapshot is at those ends."""
    positions = {} if final is None else final["positions"]
    short = [f"{p} at {positions.get(p, 0)}" + (f" of {ENDS[p]}" if p in ENDS else " (end not reached)")
             for p in parts if p not in ENDS or positions.get(p) != ENDS[p]]
    if not short:
        return
    stopped = stop_signal()
    how = "was stopped" if stopped is not None else "ended"
    raise RebuildFailed(f"the rebuild {how} before the end of its input ({'; '.join(short)}): "
                        "nothing was switched", stopped)


def _check_sound(final: dict[str, Any] | None, product: Product) -> None:
    """No errors, and what the product checks of its final snapshot (``Product.rebuild_problem``)."""
    if final is None:
        raise RebuildFailed("the rebuild published no snapshot")
    if final["errors"]:
        raise RebuildFailed(f"the rebuilt ranking has errors: {final['errors'][:3]}")
    problem = product.rebuild_problem(final)
    if problem is not None:
        raise RebuildFailed(problem)

