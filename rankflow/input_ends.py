"""Where an input ends, partition by partition, in the offsets a run's snapshot positions use.

``rankflow status`` compares a snapshot's positions (per source partition, the next offset
not included) with these ends: a Kafka partition's end offset (its high watermark), or a
JSON Lines file's count of complete lines (``connectors.jsonl.line_end``). The partitions
are named as the sources name them (``TOPIC/N``, the path as given), so the two line up.

**Kafka ends come from a fetch, not from an offset query.** The local broker (Tansu)
answers queried high watermarks wrongly after batched produces; measured with a backlog of
50,000 events produced in batches by ``rankflow produce`` to 4 partitions, the queried
watermarks summed to 29,047, a consumer assigned at the end (which resolves the end by
the same query) stood at 44,543, while the watermarks of fetch responses summed to
50,000, the true count. ``connectors.kafka.log_ranges`` reads them from each partition's
first fetch, which is right on a real Kafka cluster as well: one small fetch per partition.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rankflow.arg_types import kafka
from rankflow.connectors.jsonl import line_end
from rankflow.endpoints import check_input

if TYPE_CHECKING:
    from rankflow.kafka_settings import KafkaSettings


@dataclass(frozen=True)
class Input:
    """One ``--input`` of ``rankflow status``, checked (a readable file or a topic's address)."""

    uri: str
    kind: str
    target: str

    @classmethod
    def parse(cls, uri: str) -> Input:
        """The input ``uri`` names; a ``UsageError`` (one line) for a mistaken one, before any service is asked."""
        kind, target = check_input(uri)
        return cls(uri, kind, target)

    def ends(self, kafka_settings: KafkaSettings) -> dict[str, int]:
        """Each source partition's end offset now.

        ``kafka_settings``: the librdkafka settings of the command (``--kafka-config``, ``-X``),
        given to every client made here."""
        if self.kind == "jsonl":
            return {self.target: line_end(self.target)}
        from rankflow.connectors.kafka import log_ranges, topic_partitions

        endpoint = kafka(f"kafka:{self.target}")
        numbers = topic_partitions(endpoint.brokers, endpoint.topic, kafka_settings)
        ranges = log_ranges(endpoint.brokers, endpoint.topic, numbers, kafka_settings)
        return {f"{endpoint.topic}/{n}": ranges[n][1] for n in numbers}

    def positions_in(self, positions: Mapping[str, int], ends: Mapping[str, int]) -> dict[str, int] | None:
        """The snapshot's ``positions`` of this input's partitions (``ends``' names), a partition
        the snapshot has none of at 0; None when the snapshot reads another input (none of its
        partitions is one of these). A file may be named otherwise in the snapshot (the run's
        path, relative to where it ran): the same file by another name is found too."""
        if self.kind == "kafka":
            if positions and not set(positions) & set(ends):
                return None
            return {name: positions.get(name, 0) for name in ends}
        for name, offset in positions.items():
            if name == self.target or _same_file(name, self.target):
                return {self.target: offset}
        return None if positions else {self.target: 0}


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
