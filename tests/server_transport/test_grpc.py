"""The gRPC port over real loopback sockets: ShouldRateLimit, health, errors, graceful stop.

Every test runs on each transport (``--transport grpcio`` and ``native``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratewarden.decision import Decision
from ratewarden.rate import Rate
from ratewarden.server.app import RateLimitServer
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.server_transport.conftest import (
    HOST,
    OK,
    OVER_LIMIT,
    PingStore,
    StartServer,
    channel,
    request,
)

TRANSPORTS = ["grpcio", "native"]


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def start_server(start_server: StartServer, transport: str) -> StartServer:
    """The package's ``start_server`` on this test's transport."""

    async def start(*args: Any, **options: Any) -> RateLimitServer:
        options.setdefault("transport", transport)
        return await start_server(*args, **options)

    return start


SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@asynccontextmanager
async def rls_stub(port: int) -> AsyncIterator[Any]:
    """A RateLimitService stub on a channel to ``port``, closed on exit."""
    async with channel(port) as chan:
        yield rls_pb2_grpc.RateLimitServiceStub(chan)


@pytest.fixture
async def stub(start_server: StartServer) -> AsyncIterator[Any]:
    """A RateLimitService stub on a server started with the package's rules."""
    server = await start_server()
    async with rls_stub(server.grpc_port) as opened:
        yield opened


async def health_of(port: int, service: str = "") -> int:
    async with channel(port) as chan:
        stub = health_pb2_grpc.HealthStub(chan)
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=service))
        return int(reply.status)


async def refused_soon(stub: Any) -> grpc.StatusCode:
    """The status of the first new call the stopping server refuses (polls for up to 5 s).

    A call that reached the server before it stopped accepting is held by the test's
    store until its deadline (not refused): polling goes on.
    """
    for _ in range(100):
        try:
            await stub.ShouldRateLimit(request("transport", {"open": "x"}), timeout=0.5)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                return exc.code()
        await asyncio.sleep(0.01)
    raise AssertionError("the server kept accepting new calls while stopping")


ONE_KEY = request("transport", {"api_key": "a"})


class GateStore(AsyncMemoryStore):
    """A memory store whose hits wait for the test to open the gate (a call held in flight)."""

    def __init__(self) -> None:
        super().__init__(clock=ManualClock())
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        self.entered.set()
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return await super().hit(algorithm, key, rates, cost)


class ExplodingService:
    """Stands in for a service with a bug: every call raises."""

    async def should_rate_limit_wire(self, request: Any) -> bytes:
        raise RuntimeError("a bug in the service")


async def test_calls_are_allowed_until_the_limit_then_over_limit(stub: Any) -> None:
    """3/hour on api_key: three OK answers counting down, then OVER_LIMIT, over real gRPC."""
    replies = [await stub.ShouldRateLimit(request("transport", {"api_key": "a"})) for _ in range(4)]
    assert [r.overall_code for r in replies] == [OK, OK, OK, OVER_LIMIT]
    assert [r.statuses[0].limit_remaining for r in replies] == [2, 1, 0, 0]
    assert replies[0].statuses[0].current_limit.requests_per_unit == 3


async def test_statuses_come_back_one_per_descriptor_in_request_order(stub: Any) -> None:
    """A descriptor without a rule is OK without current_limit; a limited one carries its limit."""
    reply = await stub.ShouldRateLimit(
        request("transport", {"open": "x"}, {"api_key": "b"}, {"unknown": "y"})
    )
    assert [s.code for s in reply.statuses] == [OK, OK, OK]
    assert [s.HasField("current_limit") for s in reply.statuses] == [False, True, False]


async def test_every_health_name_reports_serving_once_started(start_server: StartServer) -> None:
    """'', the rate limit service's full name and envoyproxy/ratelimit's 'ratelimit' are SERVING."""
    server = await start_server()
    for name in ("", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"):
        assert await health_of(server.grpc_port, name) == SERVING


async def test_health_follows_whether_the_store_answers(start_server: StartServer) -> None:
    """NOT_SERVING while the store's ping fails; SERVING on the next check after it answers."""
    store = PingStore()
    server = await start_server(store=store)
    assert await health_of(server.grpc_port) == NOT_SERVING
    store.alive = True
    assert await server.refresh_health()
    assert await health_of(server.grpc_port) == SERVING
    store.alive = False
    assert not await server.refresh_health()
    assert await health_of(server.grpc_port) == NOT_SERVING


async def test_a_failing_service_answers_ok_not_unknown(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception in the service is logged and answered OK per descriptor (--on-error open)."""
    server = await start_server()
    server.service = ExplodingService()  # type: ignore[assignment]
    with caplog.at_level(logging.ERROR, logger="ratewarden.server"):
        async with rls_stub(server.grpc_port) as stub:
            reply = await stub.ShouldRateLimit(request("transport", {"a": "1"}, {"b": "2"}))
    assert reply.overall_code == OK
    assert [s.code for s in reply.statuses] == [OK, OK]
    assert server.errors == 1
    failures = [r for r in caplog.records if getattr(r, "event", None) == "call_failed"]
    assert len(failures) == 1 and failures[0].levelno == logging.ERROR
    assert "a bug in the service" in caplog.text


async def test_a_failing_service_denies_with_on_error_closed(start_server: StartServer) -> None:
    """With --on-error closed the same failure answers OVER_LIMIT for every descriptor."""
    server = await start_server(on_error="closed")
    server.service = ExplodingService()  # type: ignore[assignment]
    async with rls_stub(server.grpc_port) as stub:
        reply = await stub.ShouldRateLimit(request("transport", {"a": "1"}))
    assert reply.overall_code == OVER_LIMIT
    assert [s.code for s in reply.statuses] == [OVER_LIMIT]


async def test_a_malformed_request_is_invalid_argument(stub: Any) -> None:
    """A request without a domain is refused with INVALID_ARGUMENT and the reason, not UNKNOWN."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.ShouldRateLimit(request("", {"api_key": "a"}))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "domain is empty" in (raised.value.details() or "")


@asynccontextmanager
async def held_call(
    start_server: StartServer,
) -> AsyncIterator[tuple[RateLimitServer, GateStore, asyncio.Future[Any], Any]]:
    """A server with one ShouldRateLimit held in flight by its store until ``store.gate``
    opens: (server, store, the call in flight, a stub on the channel it went out on)."""
    store = GateStore()
    server = await start_server(store=store)
    async with rls_stub(server.grpc_port) as stub:
        in_flight = asyncio.ensure_future(stub.ShouldRateLimit(ONE_KEY))
        await store.entered.wait()
        yield server, store, in_flight, stub


async def test_stop_lets_a_call_in_flight_finish_and_refuses_new_calls(
    start_server: StartServer,
) -> None:
    """While stopping: NOT_SERVING, new calls refused, and the call held in flight succeeds."""
    async with held_call(start_server) as (server, store, in_flight, stub):
        stopping = asyncio.create_task(server.stop(grace=30))
        # UNAVAILABLE on a new connection, CANCELLED for a stream racing the GOAWAY.
        refused = await refused_soon(stub)
        assert refused in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        assert not server.serving()
        assert not stopping.done()
        store.gate.set()
        reply = await in_flight
        await asyncio.wait_for(stopping, 5)
    assert reply.overall_code == OK and reply.statuses[0].limit_remaining == 2


async def test_stop_gives_up_on_a_stuck_call_after_the_grace(start_server: StartServer) -> None:
    """A call that never finishes is cancelled when the grace runs out; stop returns."""
    async with held_call(start_server) as (server, _, in_flight, _):
        await asyncio.wait_for(server.stop(grace=0.2), 5)
        with pytest.raises(grpc.aio.AioRpcError) as cut:
            await in_flight
    assert cut.value.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)


async def test_a_busy_grpc_port_fails_start_with_the_address(start_server: StartServer) -> None:
    """A second server on a port already in use raises OSError naming the address."""
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen for gRPC on {HOST}:{port}"):
            await start_server(grpc_port=port)


async def test_response_headers_setting_reaches_envoy_over_grpc(start_server: StartServer) -> None:
    """--response-headers draft-10: RateLimit-Policy and RateLimit come back in the response."""
    server = await start_server(response_headers="draft-10")
    async with rls_stub(server.grpc_port) as stub:
        reply = await stub.ShouldRateLimit(request("transport", {"api_key": "h"}))
    headers = {h.key.lower(): h.value for h in reply.response_headers_to_add}
    assert set(headers) == {"ratelimit-policy", "ratelimit"}
    assert ";q=3;w=3600" in headers["ratelimit-policy"]
    assert ";r=2;" in headers["ratelimit"]


async def test_legacy_response_headers_take_the_names_given(start_server: StartServer) -> None:
    """--response-headers legacy: envoyproxy/ratelimit's three headers, under
    RateLimit-Limit/-Remaining/-Reset or the names --legacy-header-names gives."""
    for names in (
        ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"),
        ("X-L", "X-R", "X-T"),
    ):
        server = await start_server(response_headers="legacy", legacy_header_names=names)
        async with rls_stub(server.grpc_port) as stub:
            reply = await stub.ShouldRateLimit(request("transport", {"api_key": "legacy"}))
        headers = {h.key: h.value for h in reply.response_headers_to_add}
        assert list(headers) == list(names)
        assert headers[names[0]] == "3" and headers[names[1]] == "2"
        assert 0 < int(headers[names[2]]) <= 3600


async def test_the_server_has_a_circuit_breaker_unless_turned_off(
    start_server: StartServer,
) -> None:
    """--breaker-failures N gives the service a breaker; 0 leaves it without one."""
    with_breaker = await start_server(breaker_failures=2, breaker_cooldown=0.5)
    without = await start_server(breaker_failures=0)
    assert with_breaker.service.breaker is not None
    assert (with_breaker.service.breaker.failures, with_breaker.service.breaker.cooldown) == (
        2,
        0.5,
    )
    assert without.service.breaker is None
    assert with_breaker.service.breaker.failure_ratio is None  # consecutive failures only


async def test_a_failure_ratio_also_opens_the_servers_breaker(start_server: StartServer) -> None:
    """--breaker-failure-ratio R --breaker-window N: a primary's circuit also opens once R of
    its last N store calls failed (judged when N are in), as well as on consecutive ones."""
    server = await start_server(breaker_failure_ratio=0.4, breaker_window=10)
    breaker = server.service.breaker
    assert breaker is not None
    assert (breaker.failure_ratio, breaker.window, breaker.min_calls) == (0.4, 10, 10)
    assert breaker.failures == 5 and breaker.per_node
    for _ in range(3):  # 4 failures of 10 calls, never two in a row
        breaker.success("p1"), breaker.failure("p1"), breaker.success("p1")
    assert breaker.states().get("p1") == "closed"  # 9 calls: not judged yet
    breaker.failure("p1")
    assert breaker.states()["p1"] == "open"
    assert breaker.states()[""] == "closed"  # another node's circuit is its own
    default = (await start_server(breaker_failure_ratio=0.5)).service.breaker
    assert default is not None and (default.window, default.min_calls) == (100, 100)


async def test_the_transport_asked_for_serves_the_port(
    start_server: StartServer, transport: str
) -> None:
    """--transport grpcio / native: the server says which one it runs, and answers on it."""
    server = await start_server()
    assert server.transport == transport
    expected = "NativeGrpcServer" if transport == "native" else "GrpcServer"
    assert type(server.grpc).__name__ == expected
    assert await health_of(server.grpc_port) == SERVING


async def test_an_unknown_health_name_is_not_found(start_server: StartServer) -> None:
    """Check on a name the server does not report is NOT_FOUND, as grpcio's health servicer."""
    server = await start_server()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await health_of(server.grpc_port, "no.such.Service")
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


async def test_health_watch_streams_every_change(start_server: StartServer) -> None:
    """Watch sends the current status, then each change; an unknown name is SERVICE_UNKNOWN."""
    store = PingStore()
    server = await start_server(store=store)
    async with channel(server.grpc_port) as chan:
        stub = health_pb2_grpc.HealthStub(chan)
        watch = stub.Watch(health_pb2.HealthCheckRequest(service="ratelimit"))
        unknown = stub.Watch(health_pb2.HealthCheckRequest(service="no.such.Service"))
        assert (await asyncio.wait_for(watch.read(), 5)).status == NOT_SERVING
        store.alive = True
        assert await server.refresh_health()
        assert (await asyncio.wait_for(watch.read(), 5)).status == SERVING
        store.alive = False
        assert not await server.refresh_health()
        assert (await asyncio.wait_for(watch.read(), 5)).status == NOT_SERVING
        first = await asyncio.wait_for(unknown.read(), 5)
        assert first.status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        watch.cancel()
        unknown.cancel()


async def refusal_of_raw_call(port: int, method: str, payload: bytes) -> grpc.aio.AioRpcError:
    """The error a call of the RateLimitService's ``method`` with raw ``payload`` fails with."""
    async with channel(port) as chan:
        call = chan.unary_unary(f"/envoy.service.ratelimit.v3.RateLimitService/{method}")
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call(payload)
    return raised.value


async def test_an_unknown_method_is_unimplemented(start_server: StartServer) -> None:
    """A call to a method the server does not serve is UNIMPLEMENTED."""
    server = await start_server()
    error = await refusal_of_raw_call(server.grpc_port, "NoSuchMethod", b"")
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_bytes_that_are_not_a_request_are_invalid_argument(
    start_server: StartServer,
) -> None:
    """Undecodable bytes are INVALID_ARGUMENT naming the reason, on every transport."""
    server = await start_server()
    error = await refusal_of_raw_call(server.grpc_port, "ShouldRateLimit", b"\xff\xff\xff")
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid RateLimitRequest" in (error.details() or "")


async def test_a_call_past_its_deadline_is_deadline_exceeded_and_its_work_cancelled(
    start_server: StartServer,
) -> None:
    """The client's deadline ends the call (DEADLINE_EXCEEDED) and cancels its decision.
    The deadline leaves the server time to start the call (0.3 s did not once, in a busy CI
    run: the call never reached the store, so nothing was there to cancel)."""
    store = GateStore()
    server = await start_server(store=store)
    async with rls_stub(server.grpc_port) as stub:
        call = asyncio.ensure_future(stub.ShouldRateLimit(ONE_KEY, timeout=2.0))
        await asyncio.wait_for(store.entered.wait(), 5)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        # The held decision is cancelled, not left waiting: the counter never moves.
        await asyncio.wait_for(store.cancelled.wait(), 5)
        store.gate.set()
        reply = await stub.ShouldRateLimit(ONE_KEY, timeout=5)
    assert reply.statuses[0].limit_remaining == 2


async def test_a_cancelled_call_cancels_its_decision(start_server: StartServer) -> None:
    """A client that cancels its call frees the server's work on it (nothing is charged)."""
    store = GateStore()
    server = await start_server(store=store)
    async with rls_stub(server.grpc_port) as stub:
        call = stub.ShouldRateLimit(ONE_KEY)
        await asyncio.wait_for(store.entered.wait(), 5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.wait_for(store.cancelled.wait(), 5)
        store.gate.set()
        reply = await stub.ShouldRateLimit(ONE_KEY, timeout=5)
    assert reply.statuses[0].limit_remaining == 2


async def test_a_large_request_is_answered_whole(stub: Any) -> None:
    """5,000 descriptors (~150 KB each way, many HTTP/2 frames): 5,000 statuses, in order."""
    many = request("transport", *({"open": f"value-{i:06d}"} for i in range(5_000)))
    reply = await stub.ShouldRateLimit(many, timeout=30)
    assert len(reply.statuses) == 5_000
    assert reply.overall_code == OK


async def test_calls_that_arrive_together_are_each_answered_as_alone(stub: Any) -> None:
    """200 calls at once on one key of 3/hour: exactly 3 OK, with remaining 2, 1, 0."""
    replies = await asyncio.gather(
        *(stub.ShouldRateLimit(request("transport", {"api_key": "burst"})) for _ in range(200))
    )
    allowed = [r.statuses[0].limit_remaining for r in replies if r.overall_code == OK]
    assert sorted(allowed) == [0, 1, 2]
    assert sum(r.overall_code == OVER_LIMIT for r in replies) == 197


async def test_a_request_over_four_mebibytes_is_resource_exhausted(stub: Any) -> None:
    """Both transports refuse a request over grpcio's default 4 MiB, and go on serving."""
    huge = request("transport", {"open": "x" * (4 * 1024 * 1024 + 1)})
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.ShouldRateLimit(huge, timeout=30)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    reply = await stub.ShouldRateLimit(ONE_KEY, timeout=5)
    assert reply.overall_code == OK


async def test_grpc_on_a_unix_socket(start_server: StartServer, tmp_path: Path) -> None:
    """--grpc-uds PATH: ShouldRateLimit and health answer on the socket, on every transport."""
    path = tmp_path / "rls.sock"
    server = await start_server(grpc_uds=str(path))
    assert server.grpc_port == 0
    async with grpc.aio.insecure_channel(f"unix:{path}") as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        reply = await stub.ShouldRateLimit(ONE_KEY, timeout=5)
        health = await health_pb2_grpc.HealthStub(chan).Check(
            health_pb2.HealthCheckRequest(service="ratelimit"), timeout=5
        )
    assert reply.overall_code == OK and reply.statuses[0].limit_remaining == 2
    assert health.status == SERVING
