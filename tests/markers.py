"""The markers that say which services a test needs: ``redis``, ``broker``, ``browser`` and ``netns``
(hosts made as Linux network namespaces: root, and ``ip`` from Debian's iproute2).

``make test-pure`` runs the tests that need none of them, in seconds and on a machine
without Redis, Tansu or chromium. A test is marked by the service fixtures it uses
(``mark_by_fixtures``, so a fixture user carries its marker by construction); a test that
starts a service another way (``LocalRedis(...)`` itself, ``make services-start``, a
browser) carries an explicit mark. ``guard`` makes a missing mark fail instead of passing
by luck: an unmarked test finds a ``redis-server`` and a ``chromium`` on its ``PATH`` that
refuse to start, and no Tansu binary, so neither it nor a command it runs can start one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# Which marker a service fixture implies. Fixtures built on these (``redis_client``,
# ``flow``, a module's own) are covered too: ``item.fixturenames`` is the whole closure.
SERVICE_FIXTURES = {"redis_url": "redis", "kafka_brokers": "broker"}
SERVICES = ("redis", "broker", "browser", "netns")
REFUSING = {"redis-server": "redis", "chromium": "browser", "ip": "netns"}  # the commands an unmarked test must not start


def mark_by_fixtures(items: list[pytest.Item]) -> None:
    """Add ``redis``/``broker`` to every test that uses a service fixture, directly or not."""
    for item in items:
        for fixture, marker in SERVICE_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)


def needs(item: pytest.Item) -> set[str]:
    """The services a test is marked for."""
    return {name for name in SERVICES if item.get_closest_marker(name) is not None}


def refusing_bin(root: Path, commands: list[str]) -> Path:
    """A folder of stand-ins for ``commands``: each exits 97 naming the marker its test lacks."""
    folder = root / ("refusing-" + "-".join(commands))
    if not folder.exists():
        folder.mkdir(parents=True)
        for command in commands:
            path = folder / command
            path.write_text(f"#!/bin/sh\necho '{command} started by a test not marked {REFUSING[command]}' >&2\nexit 97\n")
            path.chmod(0o755)
    return folder


@contextmanager
def guard(item: pytest.Item, root: Path) -> Iterator[None]:
    """Keep a test from starting the services it is not marked for, in-process or in a command it
    runs, for its setup, call and teardown. (Not a fixture: hypothesis refuses function-scoped ones.)"""
    marked = needs(item)
    refused = [command for command, marker in REFUSING.items() if marker not in marked]
    with pytest.MonkeyPatch.context() as patch:
        if refused:
            patch.setenv("PATH", f"{refusing_bin(root, refused)}{os.pathsep}{os.environ.get('PATH', '')}")
        if "broker" not in marked:
            patch.setattr("rankflow.services.tansu_binary", no_tansu)
        yield


def no_tansu() -> str:
    raise RuntimeError("Tansu started by a test not marked broker")
