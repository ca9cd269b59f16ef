"""Calling the scripts of ``connectors.scripts``: one call, or a query that calls again.

:func:`bind` gives a client's callable for a script: redis-py's ``Script``, which sends
``EVALSHA`` and, when Redis answers ``NOSCRIPT`` (it restarted, or flushed its scripts),
loads the script and sends it again; in a pipeline it loads the pipeline's scripts
first. Writers call it directly (the publisher, once per snapshot); the script is
registered once per client.

A read whose keys depend on the generation (or on where an alias points) is a
:class:`Query`: it builds its call from what its reader last learnt, reads the reply,
and either has its answer or learnt where to look and calls again, at most
:attr:`Query.attempts` times. :func:`run` and :func:`arun` drive any query on a sync or
an ``asyncio`` client; both follow :func:`_steps`, so the two differ only in ``await``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, Protocol, TypeVar

from rankflow.connectors.read_hint import GenerationHint
from rankflow.connectors.scripts import Call, Script


class Query(Protocol):
    """One read, over as many calls as it takes to find its keys."""

    attempts: int
    """Calls at most before :meth:`gave_up`: each generation switch (or alias move) costs one."""

    def call(self) -> Call:
        """The next call's keys and arguments, from what the reader knows now."""

    def settle(self, reply: Any) -> bool:
        """Read a reply: True if it answers the query, False if it taught where to look."""

    def gave_up(self) -> Exception:
        """The error raised when no call of :attr:`attempts` answered."""


Q = TypeVar("Q", bound=Query)


def bind(client: Any, script: Script) -> Any:
    """``script`` on ``client`` (sync or asyncio): call it with ``keys=`` and ``args=``."""
    return client.register_script(script.source)


C = TypeVar("C")
H = TypeVar("H", bound=GenerationHint)


class ScriptReader(Generic[C, H]):
    """What every product's reader holds, sync or asyncio alike: its client, its
    :attr:`hint` of where the namespace's state is now, that hint's keys, and its read
    script bound to the client. A product's reader names the two (:attr:`hint_type`,
    :attr:`source`) and adds its queries, each a :class:`Query` for :func:`run` or :func:`arun`."""

    hint_type: Callable[[str], H]
    """Builds the reader's hint from its namespace."""
    source: Script
    """The read script its queries call."""

    def __init__(self, client: C, namespace: str) -> None:
        self.client = client
        self.hint: H = self.hint_type(namespace)
        self.keys = self.hint.keys
        self.script = bind(client, self.source)


def _steps(query: Q) -> Generator[Call, Any, Q]:
    """The calls of one query: yields each call, is sent its reply; returns the answered query."""
    for _ in range(query.attempts):
        reply = yield query.call()
        if query.settle(reply):
            return query
    raise query.gave_up()


def run(script: Callable[..., Any], query: Q) -> Q:
    """``query`` answered with the bound ``script`` (:func:`bind`) of a sync client."""
    steps = _steps(query)
    call = next(steps)
    while True:
        try:
            call = steps.send(script(keys=call.keys, args=call.args))
        except StopIteration as done:
            answered: Q = done.value
            return answered


async def arun(script: Callable[..., Awaitable[Any]], query: Q) -> Q:
    """``query`` answered with the bound ``script`` (:func:`bind`) of an asyncio client."""
    steps = _steps(query)
    call = next(steps)
    while True:
        try:
            call = steps.send(await script(keys=call.keys, args=call.args))
        except StopIteration as done:
            answered: Q = done.value
            return answered
