"""The native transport: a call of several algorithms cancelled before its task first ran
logs nothing.

Its descriptors of different algorithms are decided side by side (one ``asyncio.gather``),
which is what the call waits on when its task is made. A cancellation (its deadline, its
client gone) that comes before the task's first step cancels that gather and throws into
the call, so no task reads how the gather ended: asyncio printed a
"_GatheringFuture exception was never retrieved" traceback on stderr for each such call,
plain text among serve's JSON log lines. The call is counted and answered as before.

The events are fed to ``NativeGrpcServer`` directly (as in test_native_batches), the call
and its cancellation in one turn of the loop, over the service on a real Redis.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ratewarden.server.app import RateLimitServer
from ratewarden.storage.redis import AsyncRedisStore
from tests._servers import RedisServer
from tests.server_transport.conftest import OK, StartServer, request
from tests.server_transport.test_native_batches import call, cancel, native, turns

pytest.importorskip("pygrpc_native")
pytestmark = pytest.mark.redis

RULES = """\
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: g
    rate_limit: {algorithm: gcra, unit: hour, requests_per_unit: 1000}
  - key: s
    rate_limit: {algorithm: sliding_window, unit: hour, requests_per_unit: 1000}
"""

#: One descriptor of each rule: three algorithms, decided side by side.
THREE = request("d", {"k": "a"}, {"g": "a"}, {"s": "a"})


@pytest.fixture
async def reported() -> AsyncIterator[list[dict[str, Any]]]:
    """What the running loop's exception handler is given (asyncio's own reports)."""
    loop = asyncio.get_running_loop()
    found: list[dict[str, Any]] = []
    before = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: found.append(context))
    yield found
    loop.set_exception_handler(before)


async def test_a_call_cancelled_before_its_task_ran_reports_nothing(
    start_server: StartServer, redis_server: RedisServer, reported: list[dict[str, Any]]
) -> None:
    """Cancelled in the turn it arrived: the call ends without an answer of its own (the
    front answered it), and once everything it started has ended and been collected,
    asyncio has reported nothing (before: "_GatheringFuture exception was never
    retrieved", with the CancelledError's traceback)."""
    redis_server.client().flushall()
    store = AsyncRedisStore.from_url(redis_server.url, timeout=5.0)
    server: RateLimitServer = await start_server(RULES, store=store, transport="grpcio")
    native_server, front = native(server.should_rate_limit)
    native_server._on_events([call(1, THREE)])  # warm: Redis connected, scripts loaded
    await native_server._tasks[1]
    assert front.answers()[1].overall_code == OK
    native_server._on_events([call(2, THREE)])
    task = native_server._tasks[2]
    native_server._on_events([cancel(2)])  # the same turn: its task has not run yet
    await task
    await turns(10)  # the gather's own tasks end
    del task
    gc.collect()
    assert sorted(front.answers()) == [1]  # the cancelled call is the front's to answer
    assert reported == []
