"""The bounded waits of the server's background loops keep a cancellation.

``RateLimitServer.stop`` cancels the health loop and the stats' flush loop and waits for
them. Each iteration waits a bounded time for the store's ping or a StatsD send; if a
cancellation that lands just as that wait finishes were lost (Python 3.11's
``asyncio.wait_for`` returns the result then: CPython gh-86296), the loop would run
again and ``stop`` would wait for it forever. Here the awaited call itself cancels the
task waiting on it, which is exactly that moment, every time.
"""

from __future__ import annotations

import asyncio

import pytest

from ratewarden.server.statsd import StatsdSink
from ratewarden.server.store_check import store_fault


async def test_a_cancellation_as_the_store_answers_its_ping_is_not_lost() -> None:
    checking: asyncio.Task[str | None]

    class CancelledAsItAnswers:
        async def ping(self) -> bool:
            checking.cancel()  # stop() cancelling the health loop as the ping returns
            return True

    async def check() -> str | None:
        fault = await store_fault(CancelledAsItAnswers(), 1.0)
        await asyncio.sleep(0)  # a cancellation still pending is delivered here at the latest
        return fault

    checking = asyncio.create_task(check())
    with pytest.raises(asyncio.CancelledError):
        await checking


async def test_a_cancellation_as_a_statsd_send_finishes_is_not_lost() -> None:
    sending: asyncio.Task[None]

    class CancelledAsItSends(StatsdSink):
        async def _send_tcp(self, lines: list[bytes]) -> None:
            sending.cancel()  # stop() cancelling the flush loop as the send returns

    sink = CancelledAsItSends("tcp", "127.0.0.1", 9)
    sink.count("ratelimit.service.config_load_success")

    async def send() -> None:
        await sink.send()
        await asyncio.sleep(0)  # a cancellation still pending is delivered here at the latest

    sending = asyncio.create_task(send())
    with pytest.raises(asyncio.CancelledError):
        await sending
    assert sink.sent == 1  # the lines went: the send finished, then the task stopped
