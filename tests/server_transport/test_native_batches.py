"""The native transport's batches, handed to the event loop as the front hands them.

A batch's calls are started in one turn of the loop, in arrival order: a call the
answer gives at once is decided in that turn, without a task; a call that waits is
resumed in a task where it waits, and keeps its own cancellation. These tests feed
``NativeGrpcServer`` batches of events directly, over a front that records what it is
told, so that which calls share a batch is the test's to say (over a socket, the
front decides).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.errors import ConfigurationError
from ratewarden.server import grpc_native
from ratewarden.server.app import RateLimitServer
from ratewarden.server.grpc_native import NativeGrpcServer
from ratewarden.server.resumed import Resumed
from tests.server_transport.conftest import OK, OVER_LIMIT, StartServer, request

pytest.importorskip("pygrpc_native")

CALL, CANCEL = 0, 1  # pygrpc_native's EVENT_CALL and EVENT_CANCEL
RLS = 0  # the method id of ShouldRateLimit
INVALID_ARGUMENT, UNKNOWN = 3, 2


class Front:
    """What the server tells the front, in order: ``("respond", id, bytes)`` or
    ``("fail", id, code, message)``."""

    def __init__(self) -> None:
        self.told: list[tuple[Any, ...]] = []

    def respond(self, call_id: int, data: bytes) -> None:
        self.told.append(("respond", call_id, data))

    def fail(self, call_id: int, code: int, message: str) -> None:
        self.told.append(("fail", call_id, code, message))

    def answers(self) -> dict[int, Any]:
        """Each call's answer: its decoded response, or ``(code, message)``."""
        found: dict[int, Any] = {}
        for kind, call_id, *rest in self.told:
            assert call_id not in found, f"call {call_id} was answered twice"
            if kind == "respond":
                found[call_id] = rls_pb2.RateLimitResponse.FromString(rest[0])
            else:
                found[call_id] = tuple(rest)
        return found


def native(answer: Any) -> tuple[NativeGrpcServer, Front]:
    """A ``NativeGrpcServer`` over ``answer`` and a recording front, on the running loop."""
    server = NativeGrpcServer(answer)
    front = Front()
    server._front, server._cancel = front, CANCEL
    server._loop = asyncio.get_running_loop()
    return server, front


def call(call_id: int, message: Any) -> tuple[Any, ...]:
    return (CALL, call_id, RLS, message.SerializeToString(), "client", None)


def cancel(call_id: int) -> tuple[Any, ...]:
    return (CANCEL, call_id, RLS, b"", "client", None)


async def turns(count: int = 3) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


def reply(remaining: int) -> Any:
    response = rls_pb2.RateLimitResponse(overall_code=OK)
    response.statuses.add(code=OK, limit_remaining=remaining)
    return response


async def test_calls_answered_at_once_take_no_task_and_go_out_in_arrival_order() -> None:
    """A batch the answer decides at once: every call decided in the batch's turn, no
    task made, the answers handed to the front together, in arrival order."""
    order: list[str] = []

    async def answer(message: Any) -> Any:
        order.append(message.domain)
        return reply(len(order))

    server, front = native(answer)
    server._on_events([call(i, request(f"d{i}", {"k": "v"})) for i in range(5)])
    assert order == ["d0", "d1", "d2", "d3", "d4"]  # decided in the batch's own turn
    assert server._tasks == {}
    assert front.told == []  # handed over at the next turn, all together
    await turns(1)
    assert [entry[1] for entry in front.told] == [0, 1, 2, 3, 4]
    answers = front.answers()
    assert [answers[i].statuses[0].limit_remaining for i in range(5)] == [1, 2, 3, 4, 5]


async def test_a_failing_call_fails_alone() -> None:
    """In one batch, a refused request is INVALID_ARGUMENT, a call whose answer raises is
    UNKNOWN (and logged), a call that waits and then raises is UNKNOWN too; every other
    call of the batch is answered."""
    gate = asyncio.Event()

    async def answer(message: Any) -> Any:
        if message.domain == "refused":
            raise ConfigurationError("RateLimitRequest has no descriptors; send at least one")
        if message.domain == "broken":
            raise RuntimeError("a bug")
        if message.domain == "broken-later":
            await gate.wait()
            raise RuntimeError("a bug after a wait")
        return reply(7)

    server, front = native(answer)
    server._on_events(
        [
            call(1, request("fine", {"k": "v"})),
            call(2, request("refused", {"k": "v"})),
            call(3, request("broken", {"k": "v"})),
            call(4, request("broken-later", {"k": "v"})),
            call(5, request("fine", {"k": "v"})),
        ]
    )
    gate.set()
    await turns()
    answers = front.answers()
    assert answers[1].statuses[0].limit_remaining == 7
    assert answers[2] == (
        INVALID_ARGUMENT,
        "RateLimitRequest has no descriptors; send at least one",
    )
    assert answers[3] == (UNKNOWN, "")
    assert answers[4] == (UNKNOWN, "")
    assert answers[5].statuses[0].limit_remaining == 7
    assert server._tasks == {}


async def test_a_waiting_call_is_resumed_where_it_waits_and_gets_what_it_awaited() -> None:
    """A call that waits becomes a task at its wait; what it awaited comes back into it,
    and its answer reaches the front; the calls around it are answered at once."""
    result: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def answer(message: Any) -> Any:
        if message.domain == "slow":
            return reply(await result)
        return reply(1)

    server, front = native(answer)
    server._on_events([call(1, request("fast", {"k": "v"})), call(2, request("slow", {"k": "v"}))])
    server._on_events([call(3, request("fast", {"k": "v"}))])
    assert list(server._tasks) == [2]
    await turns()
    assert sorted(front.answers()) == [1, 3]
    result.set_result(42)
    await turns()
    assert front.answers()[2].statuses[0].limit_remaining == 42
    assert server._tasks == {}


async def test_a_cancelled_call_is_cancelled_where_it_waits_and_the_others_are_answered() -> None:
    """A cancel event (the client's reset, or its deadline) for a call that waits throws
    the cancellation into it where it waits: it is never answered, its cleanup runs, and
    the other calls of its batch are answered."""
    gate = asyncio.Event()
    cleaned: list[str] = []

    async def answer(message: Any) -> Any:
        if message.domain == "held":
            try:
                await gate.wait()
            except asyncio.CancelledError:
                cleaned.append("held")
                raise
        return reply(3)

    server, front = native(answer)
    server._on_events(
        [
            call(1, request("fast", {"k": "v"})),
            call(2, request("held", {"k": "v"})),
            call(3, request("held", {"k": "v"})),
        ]
    )
    server._on_events([cancel(2)])
    await turns()
    assert cleaned == ["held"]
    gate.set()
    await turns()
    answers = front.answers()
    assert sorted(answers) == [1, 3]  # call 2 was cancelled: the front has answered it
    assert server._tasks == {}


async def test_a_batch_on_the_service_answers_each_call_as_alone(
    start_server: StartServer,
) -> None:
    """Through the service on the memory store: a batch of calls on one key of 3 a minute,
    with a malformed request among them, admits exactly 3 (remaining 2, 1, 0) in arrival
    order, denies the rest, and refuses only the malformed one."""
    server: RateLimitServer = await start_server(transport="grpcio")
    native_server, front = native(server.should_rate_limit)
    burst = [call(i, request("transport", {"api_key": "batch"})) for i in range(6)]
    burst.insert(2, call(99, rls_pb2.RateLimitRequest(domain="transport")))
    native_server._on_events(burst)
    await turns()
    answers = front.answers()
    assert answers.pop(99)[0] == INVALID_ARGUMENT
    codes = [answers[i].overall_code for i in range(6)]
    assert codes == [OK, OK, OK, OVER_LIMIT, OVER_LIMIT, OVER_LIMIT]
    assert [answers[i].statuses[0].limit_remaining for i in range(3)] == [2, 1, 0]


async def test_a_started_call_awaited_directly_gets_what_it_awaits_and_its_cancellation() -> None:
    """The resumed call is a coroutine like any: awaited (not run by a task) it takes the
    value it waits for, and a cancellation of its awaiter reaches it where it waits."""
    loop = asyncio.get_running_loop()
    seen: list[Any] = []

    async def waits(future: asyncio.Future[int]) -> None:
        try:
            seen.append(await future)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    first: asyncio.Future[int] = loop.create_future()
    started = waits(first)
    awaiter = loop.create_task(_awaited(Resumed(started, started.send(None))))
    await turns()
    first.set_result(5)
    await awaiter
    second: asyncio.Future[int] = loop.create_future()
    started = waits(second)
    awaiter = loop.create_task(_awaited(Resumed(started, started.send(None))))
    await turns()
    awaiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await awaiter
    assert seen == [5, "cancelled"]


async def _awaited(resumed: Resumed) -> None:
    await resumed


async def test_a_call_cancelled_before_its_task_ran_cancels_what_it_awaits() -> None:
    """Cancelled before its task's first step, the call gets the cancellation where it
    waits, and the future it awaits is cancelled too, as a task cancels the one it waits on
    (a reply that comes later is not kept for nobody)."""
    loop = asyncio.get_running_loop()
    seen: list[Any] = []
    reply_future: asyncio.Future[int] = loop.create_future()

    async def waits() -> None:
        try:
            seen.append(await reply_future)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    started = waits()
    task = loop.create_task(Resumed(started, started.send(None)))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]
    assert reply_future.cancelled()


@pytest.mark.parametrize(("cpus", "threads"), [(None, 1), (1, 1), (2, 1), (3, 1), (4, 2), (64, 2)])
def test_the_front_gets_one_io_thread_on_a_small_machine(
    monkeypatch: pytest.MonkeyPatch, cpus: int | None, threads: int
) -> None:
    """Up to three CPUs, one HTTP/2 thread (a second only took turns with the first on two
    CPUs); from four, the package's default of two. An unknown count counts as one."""
    monkeypatch.setattr(grpc_native.os, "cpu_count", lambda: cpus)
    assert grpc_native.io_threads() == threads
