"""The stages of the write path import upstream only: ``parse -> keyed stage -> routing ->
counters -> merger -> publish``.

Each module of ``operators/`` has a place on that path (:data:`STAGES`); the engine's own
types (``operators.engine_types``) and the metrics (with ``catch_up``, the readiness they
serve) sit below every stage. A module may
import its own stage's and upstream stages' modules, never a downstream one, so that
following one event opens the modules in the order it passes them, and what a stage
sends is named where it is made or in the engine's types. A module of ``operators/`` with
no place here fails the test: give it one.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ENGINE, PARSE, KEYED, ROUTING, COUNTERS, MERGER, PUBLISH = range(7)
STAGES = {
    "engine_types": ENGINE, "metrics": ENGINE, "catch_up": ENGINE, "worker_keys": ENGINE,
    "parse": PARSE,
    "keyed_shards": KEYED, "song_keys": KEYED, "user_stage": KEYED, "player_stage": KEYED,
    "routing": ROUTING,
    "counter": COUNTERS, "song_counter": COUNTERS, "board_counter": COUNTERS, "window_counter": COUNTERS,
    "recent_plays": COUNTERS,
    "merger": MERGER, "song_ranking": MERGER, "board_ranking": MERGER, "window_ranking": MERGER,
    "ranking_stage": PUBLISH,
}
"""Each module of ``operators/`` and its stage (``window_counter`` routes activity's messages
itself: it has no stage between parse and its counters)."""

PRODUCTS = {"song_counter", "song_ranking", "recent_plays", "song_keys", "routing", "user_stage",
            "board_counter", "board_ranking", "player_stage", "window_counter", "window_ranking"}
"""Modules that hold one product's pieces: the engine's generic stages import none of them."""
GENERIC = ("engine_types", "counter", "merger", "ranking_stage", "parse")


def imported(path: Path, package: str = "operators") -> set[str]:
    """The ``rankflow.<package>`` modules ``path`` imports, at any depth (a function's
    import too, except under ``TYPE_CHECKING``: types only)."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    prefix = f"rankflow.{package}."
    return {n[len(prefix):].split(".")[0] for n in names if n.startswith(prefix)}


def modules() -> dict[str, set[str]]:
    return {p.stem: imported(p) for p in sorted((ROOT / "operators").glob("*.py")) if p.stem != "__init__"}


def test_every_operator_module_has_a_stage():
    assert set(modules()) == set(STAGES), "place a new module of operators/ in STAGES"


def test_no_stage_imports_a_stage_downstream_of_it():
    downstream = [f"{module} (stage {STAGES[module]}) imports {other} (stage {STAGES[other]})"
                  for module, others in modules().items() for other in sorted(others)
                  if module in STAGES and other in STAGES and STAGES[other] > STAGES[module]]
    assert downstream == []


def test_the_generic_stages_import_no_product():
    """The merger module's one lazy import (old recovery state, see ``merger.__getattr__``) aside."""
    found = modules()
    found["merger"].discard("song_counter")
    assert {m: sorted(found[m] & PRODUCTS) for m in GENERIC if found[m] & PRODUCTS} == {}
    publish = ROOT / "connectors" / "redis_publish.py"
    assert imported(publish) <= {"metrics", "engine_types"}
    products = {"redis_listeners", "redis_boards", "redis_activity", "activity_staging"}
    assert imported(publish, "connectors") & products == set()
    assert {"snapshot", "board_snapshot", "activity_snapshot"} & imported(publish, "state") == set()


def test_the_engine_types_are_defined_once():
    """Every stage names the engine's types from ``operators.engine_types``, none defines its own."""
    names = {"MERGER_KEY", "PositionReport", "Tally", "Tick", "SourceMark", "PartitionBatch"}
    defined = []
    for path in sorted((ROOT / "operators").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            targets = ([node.name] if isinstance(node, ast.ClassDef)
                       else [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)])
            defined += [(path.stem, n) for n in targets if n in names]
            if isinstance(node, ast.ImportFrom) and path.stem != "engine_types":
                defined += [(path.stem, f"{a.name} from {node.module}") for a in node.names
                            if a.name in names and node.module != "rankflow.operators.engine_types"]
    assert sorted(defined) == [("engine_types", n) for n in sorted(names - {"SourceMark"})]
