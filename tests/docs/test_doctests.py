"""The examples in docstrings are run: they are part of the documentation, so they must hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["rankflow.options", "rankflow.state.rules", "rankflow.state.signatures", "rankflow.state.ranking_index",
           "rankflow.bench.boards_baseline", "rankflow.state.score_events", "rankflow.state.board_rules",
           "rankflow.connectors.board_read", "rankflow.state.board_index", "rankflow.state.window_rules",
           "rankflow.state.heavy_hitters", "rankflow.connectors.redis_publish", "rankflow.state.message_events",
           "rankflow.operators.recent_plays", "rankflow.state.timers", "rankflow.reader",
           "rankflow.recovery", "rankflow.panic_filter", "rankflow.connectors.redis_generations",
           "rankflow.connectors.redis_keys", "rankflow.state.json_exact", "rankflow.connectors.redis_replicas"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
