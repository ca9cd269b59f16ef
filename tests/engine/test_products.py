"""The product registry (``rankflow.products``): what differs between the flows is asked of it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rankflow import products
from rankflow.api.app import Settings, create_app
from rankflow.options import FLOWS, RunOptions

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ["rankflow", "api", "connectors", "flows", "operators", "state"]


def paths(app) -> set[str]:
    """The paths the app serves, as its OpenAPI schema lists them."""
    return set(app.openapi()["paths"])


def test_every_flow_is_a_product():
    assert FLOWS == tuple(products.PRODUCTS) and products.DEFAULT == "listeners"
    for name, product in products.PRODUCTS.items():
        assert product.name == name and product.title
        opts = RunOptions(input="jsonl:x", flow=name)
        opts.check()
        assert opts.product is product and opts.top_k == product.k_max


def test_a_kafka_read_batch_is_the_product_default_unless_given():
    from rankflow.connectors.kafka import BATCH_MESSAGES, KafkaEndpoint, KafkaSource
    from rankflow.options import UsageError

    assert RunOptions(input="jsonl:x", flow="listeners").kafka_batch == BATCH_MESSAGES  # the connector's
    assert RunOptions(input="jsonl:x", flow="activity").kafka_batch == 2_000 < BATCH_MESSAGES
    assert RunOptions(input="jsonl:x", flow="boards").kafka_batch == 2_000
    assert RunOptions(input="jsonl:x", flow="activity", read_batch=7).kafka_batch == 7
    with pytest.raises(UsageError, match="--read-batch must be >= 1"):
        RunOptions(input="jsonl:x", read_batch=0).check()
    with pytest.raises(ValueError, match="batch must be >= 1"):
        KafkaSource(KafkaEndpoint("127.0.0.1:1", "t"), until_eof=True, batch=0)  # refused before any connection


def test_an_unknown_flow_is_a_usage_error():
    from rankflow.options import UsageError

    with pytest.raises(UsageError, match="--flow must be one of listeners, boards, activity, got 'nope'"):
        RunOptions(input="jsonl:x", flow="nope").check()


def test_serve_mounts_the_products_asked_for():
    """``rankflow serve --products``: each product's routes only when it is named (all by default)."""
    every = paths(create_app(Settings()))
    own = {name: {r.path_format for router in p.routers() for r in router.routes if r.include_in_schema}
           for name, p in products.PRODUCTS.items()}
    assert all(routes and routes <= every for routes in own.values())
    assert {"/rankings", "/events", "/boards/{game}/{board}/top", "/activity/global/top"} <= every
    boards_only = paths(create_app(Settings(products=("boards",))))
    assert own["boards"] <= boards_only and not (own["listeners"] | own["activity"]) & boards_only
    assert {"/health", "/metrics"} <= boards_only


def test_serve_refuses_an_unknown_product():
    r = subprocess.run([sys.executable, "-m", "rankflow.cli", "serve", "--products", "listeners,nope"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--products: expected products among" in r.stderr, \
        r.stderr


def test_no_product_dispatch_outside_the_registry():
    """No runtime module compares flow names or sniffs a snapshot's fields to tell the products
    apart: they ask ``rankflow.products``."""
    offending = []
    for folder in RUNTIME:
        for path in (ROOT / folder).rglob("*.py"):
            if "bench" in path.parts or "products" in path.parts:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if any(s in line for s in ("flow ==", "flow !=", '"total_listeners" in', '"watermark" in',
                                           'flow in ("')):
                    offending.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offending, offending
    assert not product_words(ROOT / "api" / "app.py")


def product_words(path: Path) -> list[str]:
    """The code of ``path`` (names, attributes, imports; not its prose) that names a product: a
    word of one (``board_watch``, ``SnapshotCache``; not ``dashboard``), or one of its route or
    serve-part modules (``api.parts``, where every product's parts come from, is no product's)."""
    import ast
    import re

    from rankflow.api.settings import Settings

    words = {"listener", "song", "board", "score", "match", "activity", "channel", "ingest", "producer",
             "mirror", "ranking"}
    # the listeners' snapshot and bodies caches, by name: an HTTP cache (api.http_cache) is the engine's
    owned = {"SnapshotCache", "BodyCache", "SharedTops", "snapshot_cache", "body_cache"}
    modules = set()
    for product in products.PRODUCTS.values():
        words.add(product.name)
        modules.update(module.rsplit(".", 1)[1] for module in product.routes)
        modules.update(type(part).__module__.rsplit(".", 1)[1] for part in product.serve_parts(Settings()))
    modules.discard("parts")

    def names_a_product(name: str) -> bool:
        tokens = {t.lower() for t in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", name)}
        return name in modules or name in owned or bool(tokens & words) or bool({t.rstrip("s") for t in tokens} & words)

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.arg, ast.alias)):
            names = [getattr(node, "arg", None) or node.name, getattr(node, "asname", None) or ""]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.ImportFrom):
            names = (node.module or "").split(".")
        else:
            continue
        found += [f"{getattr(node, 'lineno', '?')}: {name}" for name in names if name and names_a_product(name)]
    return found


def test_the_word_check_sees_a_product_in_code(tmp_path):
    """``product_words`` finds what the old ``api/app.py`` had (it would let nothing pass unseen)."""
    code = tmp_path / "app.py"
    code.write_text("from rankflow.api.store import SnapshotCache\n"
                    "def f(app):\n    return app.state.board_watch.version, dashboard.router\n")
    assert sorted(w.split(": ")[1] for w in product_words(code)) == ["SnapshotCache", "board_watch", "store"]


def test_the_command_line_imports_no_flow_to_start():
    """The products import their flows when a run builds one: ``rankflow --help`` and the readers
    start without them."""
    code = ("import sys, rankflow.cli as c; c.build_parser(); "
            "print(sorted(m for m in sys.modules if m.startswith('rankflow.flows')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout, r.stderr)


class Fourth(products.Product):
    """A product the registry did not ship with: one class and one entry."""

    name = "fourth"
    title = "a fourth ranking"
    options = (products.Option(("--fourth-width",), "fourth_width", type=int, metavar="W", default=3,
                               help="its own option (default: %(default)s)"),)
    k_max = 7

    def namespace(self, namespace: str) -> str:
        return f"{namespace}:fourth"


def test_a_fourth_product_is_one_class_and_one_entry(monkeypatch):
    """Registered, a product has its --flow, its options grouped in --help (with a default though
    ``RunOptions`` has no field for it), its namespace and K, and its option is refused elsewhere."""
    from rankflow.cli import _run_options, build_parser
    from rankflow.options import UsageError

    monkeypatch.setitem(products.PRODUCTS, "fourth", Fourth())
    parser = build_parser()
    opts = _run_options(parser.parse_args(["run", "--flow", "fourth", "--input", "jsonl:x", "--fourth-width", "9"]))
    opts.check()
    assert opts.extra == {"fourth_width": 9} and opts.option("fourth_width") == 9
    assert opts.redis_namespace == "rankflow:fourth" and opts.top_k == 7
    plain = _run_options(parser.parse_args(["run", "--flow", "fourth", "--input", "jsonl:x"]))
    assert plain.option("fourth_width") == 3
    with pytest.raises(UsageError, match="--fourth-width is an option of --flow fourth, not of --flow boards"):
        _run_options(parser.parse_args(["run", "--flow", "boards", "--input", "jsonl:x", "--fourth-width", "9"]))
    run = next(a for a in parser._actions if a.dest == "command").choices["run"]
    assert "--flow fourth:\n  a fourth ranking" in run.format_help() and "(default: 3)" in run.format_help()
