"""``api.watch.Polling``'s new-snapshot signal, shared by the API's three pollers."""

from __future__ import annotations

import asyncio

from rankflow.api.watch import Polling


def test_wait_for_change_wakes_once_per_change():
    async def scenario() -> None:
        poller = Polling()
        assert not await poller.wait_for_change(0.01), "no change yet"
        waiting = asyncio.ensure_future(poller.wait_for_change(5))
        await asyncio.sleep(0)
        poller._announce_change()
        assert await waiting
        assert not await poller.wait_for_change(0.01), "a change wakes the waiters of its time only"

    asyncio.run(scenario())
