"""What ``rankflow status`` reports of each product in a namespace: who owns it, its last
snapshot, and how far that snapshot is behind the input's end.

The input's ends are read first, then Redis: ``caught_up`` then means the snapshot
includes every event that was in the input when ``status`` started (a live run that
keeps up may already be past those ends; it is never counted behind for events that
arrived while ``status`` ran). Lag is counted in the input's offsets: Kafka messages,
or JSON Lines lines.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from rankflow import products
from rankflow.connectors.redis_generations import current_generation
from rankflow.connectors.redis_owner import read_owner
from rankflow.connectors.redis_read import read_generation
from rankflow.input_ends import Input


@dataclass(frozen=True)
class Published:
    """A product's namespace as Redis holds it: its generation, that generation's owner
    (``redis_owner.read_owner``) and latest snapshot (None: none yet)."""

    namespace: str
    generation: int
    owner: dict[str, Any] | None
    snapshot: dict[str, Any] | None


def read_published(client: redis.Redis, namespace: str) -> Published:
    """The current generation of ``namespace``, its owner and its latest snapshot, read again
    if a rebuild switched the generation between the reads."""
    for _ in range(3):
        generation = current_generation(client, namespace)
        snapshot = read_generation(client, namespace, generation)
        owner = read_owner(client, namespace, generation)
        if current_generation(client, namespace) == generation:
            break
    return Published(namespace, generation, owner, snapshot)


@dataclass(frozen=True)
class ProductStatus:
    """One product's status: what Redis holds (``published``) against the input's ends."""

    product: str
    published: Published
    input: Input | None
    """The ``--input`` its snapshot reads (None: none of them)."""
    positions: dict[str, int] | None
    ends: dict[str, int]
    problem: str | None
    now_ms: int

    @property
    def partitions(self) -> list[dict[str, Any]]:
        if self.positions is None:
            return []
        return [{"partition": name, "position": self.positions[name], "end": end,
                 "lag": max(0, end - self.positions[name])} for name, end in sorted(self.ends.items(), key=_order)]

    @property
    def lag(self) -> int:
        return sum(p["lag"] for p in self.partitions)

    @property
    def caught_up(self) -> bool:
        """Every partition's position has reached the end read when ``status`` started; never
        without a snapshot, or with a snapshot of another input."""
        return self.published.snapshot is not None and self.positions is not None and self.lag == 0

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` object (docs/cli.md): plain integers, times in ms since the epoch."""
        snap = self.published.snapshot
        return {
            "product": self.product,
            "namespace": self.published.namespace,
            "generation": self.published.generation,
            "owner": self.published.owner,
            "snapshot": None if snap is None else {
                "snapshot_id": snap["snapshot_id"], "run": snap["run"], "epoch": snap["epoch"],
                "published_at": snap["published_at"], "age_ms": max(0, self.now_ms - int(snap["published_at"]))},
            "input": None if self.input is None else self.input.uri,
            "partitions": self.partitions,
            "lag": self.lag,
            "caught_up": self.caught_up,
            "dead_letters": None if snap is None else snap.get("dead_letters"),
            "dead_letters_by_reason": None if snap is None else snap.get("dead_letters_by_reason"),
            "problem": self.problem,
        }


def _order(item: tuple[str, int]) -> tuple[str, int, str]:
    """Partitions in their order: ``t/2`` before ``t/10``."""
    name = item[0]
    topic, _, number = name.rpartition("/")
    return (topic, int(number), "") if number.isdigit() else (name, -1, "")


def statuses(client: redis.Redis, namespace: str, flow: str | None, inputs: Sequence[Input],
             ends: Mapping[Input, dict[str, int]]) -> list[ProductStatus]:
    """Every product's status in ``namespace`` (each product publishes into its own, see
    ``Product.namespace``), or ``flow``'s alone: every product with a snapshot, or ``flow``
    with or without one. ``ends``: each input's ends, read before."""
    now_ms = int(time.time() * 1000)
    chosen = [products.get(flow)] if flow is not None else list(products.PRODUCTS.values())
    found = []
    for product in chosen:
        published = read_published(client, product.namespace(namespace))
        if published.snapshot is None and flow is None:
            continue
        found.append(_status(product.name, published, inputs, ends, now_ms))
    return found


def _status(product: str, published: Published, inputs: Sequence[Input], ends: Mapping[Input, dict[str, int]],
            now_ms: int) -> ProductStatus:
    snap = published.snapshot
    if snap is None:
        only = inputs[0] if len(inputs) == 1 else None
        positions = None if only is None else {name: 0 for name in ends[only]}
        return ProductStatus(product, published, only, positions, ends[only] if only else {},
                             f"no snapshot in namespace {published.namespace!r}", now_ms)
    stored: dict[str, int] = snap["positions"]
    for given in inputs:
        positions = given.positions_in(stored, ends[given])
        if positions is not None and (stored or len(inputs) == 1):
            return ProductStatus(product, published, given, positions, ends[given], None, now_ms)
    reads = ", ".join(sorted(stored)) or "nothing yet"
    return ProductStatus(product, published, None, None, {},
                         f"its snapshot reads {reads}, which no --input names (give its input too, or choose "
                         "the products with --flow)", now_ms)
