"""The shared tail of the flows (``operators.ranking_stage``): one wiring, the same step ids.

Bytewax keys recovery state by a step's full id, so the ids of the steps that hold
state (inputs, stateful stages, outputs: the dead-letter sinks store their position)
are part of every recovery directory already written; these tests pin them.
"""

from __future__ import annotations

from collections.abc import Iterator

from bytewax.dataflow import Dataflow, Operator
from bytewax.testing import TestingSink, TestingSource

from rankflow.flows import activity, boards, listeners

STATEFUL = {"input", "stateful_batch", "output"}  # the core operators whose state is stored by step id


def core_steps(steps: list[Operator]) -> Iterator[Operator]:
    """Every core step of a dataflow, composites opened."""
    for step in steps:
        if getattr(step, "core", False):  # only core operators define it
            yield step
        else:
            yield from core_steps(step.substeps)


def stored_ids(flow: Dataflow) -> set[str]:
    return {s.step_id for s in core_steps(flow.substeps) if type(s).__name__ in STATEFUL}


def flows() -> dict[str, Dataflow]:
    def sinks() -> tuple[TestingSource, TestingSink, TestingSink]:
        return TestingSource([]), TestingSink([]), TestingSink([])
    return {
        "listeners": listeners.build_flow(*sinks(), song_partitions=2, k_max=3, run_token=1),
        "boards": boards.build_flow(*sinks(), board_partitions=2, k_max=3, run_token=1),
        "activity": activity.build_flow(*sinks(), partitions=2, k_max=3, run_token=1),
    }


def test_the_steps_that_hold_state_keep_the_ids_recovery_directories_know():
    counters = {"listeners": "song_counters", "boards": "board_counters", "activity": "window_counters"}
    stages = {"listeners": {"users"}, "boards": {"players"}, "activity": set()}
    for name, flow in flows().items():
        expected = {"input", counters[name], "merger", "publish", "dead_letter_output"} | stages[name]
        assert stored_ids(flow) == {f"{name}.{step}" for step in expected}, name


def test_every_flow_feeds_its_merger_through_the_one_composite():
    for name, flow in flows().items():
        [stage] = [s for s in flow.substeps if s.step_id == f"{name}.merger_input"]
        assert type(stage).__name__ == "merger_input" and not getattr(stage, "core", False)
        inner = {s.step_name for s in stage.substeps}
        assert inner == {"partition_reports", "positions", "dead_letter_counts", "merge"}, name
