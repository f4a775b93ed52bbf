"""The drain before a graceful stop (``--drain``): health NOT_SERVING while calls are answered.

Envoy only stops sending to a replica once its health check has seen it NOT_SERVING; a replica
that closed its ports at the same instant failed every call in between. On both transports
(their health services differ), in process and as ``ratewarden serve`` under SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratewarden.decision import Decision
from ratewarden.rate import Rate
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.server_transport._process import ServeProcess
from tests.server_transport.conftest import OK, StartServer, channel, http, request

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
TRANSPORTS = pytest.mark.parametrize("transport", ["grpcio", "native"])
JSON_BODY = json.dumps(
    {"domain": "transport", "descriptors": [{"entries": [{"key": "open", "value": "x"}]}]}
).encode()


async def health_of(port: int) -> int:
    async with channel(port) as chan:
        stub = health_pb2_grpc.HealthStub(chan)
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    return int(reply.status)


async def call(port: int) -> int:
    async with channel(port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        reply = await stub.ShouldRateLimit(request("transport", {"open": "x"}), timeout=5)
    return int(reply.overall_code)


@TRANSPORTS
async def test_a_draining_server_reports_not_serving_and_still_answers(
    start_server: StartServer, transport: str
) -> None:
    """After ``drain``: gRPC health NOT_SERVING and /healthcheck 500, even after a health
    refresh that finds the store fine, while ShouldRateLimit and /json are still answered."""
    server = await start_server(transport=transport)
    assert await health_of(server.grpc_port) == SERVING
    await server.drain()
    await server.refresh_health()  # the store answers: draining wins
    assert await health_of(server.grpc_port) == NOT_SERVING
    assert (await http(server.http_port, "GET", "/healthcheck")).status == 500
    assert await call(server.grpc_port) == OK
    assert (await http(server.http_port, "POST", "/json", JSON_BODY)).status == 200


class GateStore(AsyncMemoryStore):
    """A memory store whose hits wait until the test opens the gate (a call held in flight)."""

    def __init__(self) -> None:
        super().__init__(clock=ManualClock())
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        self.entered.set()
        await self.gate.wait()
        return await super().hit(algorithm, key, rates, cost)


@TRANSPORTS
async def test_calls_cut_when_the_grace_runs_out_are_counted_in_a_warning(
    start_server: StartServer, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A call still running when --grace is over is cut (gRPC UNAVAILABLE or CANCELLED), and a
    grace_expired warning says how many were."""
    store = GateStore()
    server = await start_server(store=store, transport=transport)
    async with channel(server.grpc_port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        held = asyncio.ensure_future(stub.ShouldRateLimit(request("transport", {"api_key": "k"})))
        await store.entered.wait()
        with caplog.at_level(logging.WARNING, logger="ratewarden.server"):
            await asyncio.wait_for(server.stop(grace=0.2), 10)
        with pytest.raises(grpc.aio.AioRpcError):
            await held
    [expired] = [r for r in caplog.records if getattr(r, "event", None) == "grace_expired"]
    assert expired.calls == 1  # type: ignore[attr-defined]


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.05)


def events(server: ServeProcess) -> list[Any]:
    return [entry.get("event") for entry in server.logs()]


@TRANSPORTS
def test_sigterm_drains_then_stops(rules: Path, transport: str) -> None:
    """SIGTERM with --drain: `draining` logged, health NOT_SERVING (gRPC and /healthcheck)
    while calls are still answered; a second SIGTERM ends the drain at once and the server
    stops gracefully, exit 0, the phases logged in order."""
    server = ServeProcess(rules, "--drain", "60", "--transport", transport)
    try:
        server.wait_serving()
        server.process.send_signal(signal.SIGTERM)
        wait_for(lambda: "draining" in events(server))
        assert asyncio.run(health_of(server.grpc_port)) == NOT_SERVING
        assert server.healthcheck() == 500
        assert asyncio.run(call(server.grpc_port)) == OK
        assert server.process.poll() is None  # still draining: 60 s
        assert server.signal(signal.SIGTERM) == 0
        order = [e for e in events(server) if e not in ("health", "workers")]
        tail = order[order.index("draining") :]
        assert tail == ["draining", "drain_cut_short", "shutting_down", "stopped"]
    finally:
        server.stop()


def test_a_drain_ends_by_itself(rules: Path) -> None:
    """With a short --drain, SIGTERM alone stops the server once the drain is over."""
    server = ServeProcess(rules, "--drain", "0.3")
    try:
        server.wait_serving()
        assert server.signal(signal.SIGTERM) == 0
        order = events(server)
        assert order.index("draining") < order.index("shutting_down") < order.index("stopped")
        assert "drain_cut_short" not in order
    finally:
        server.stop()


def test_sigint_stops_without_draining(rules: Path) -> None:
    """Ctrl-C (SIGINT) at a terminal does not wait out the drain: no `draining`, exit 0 well
    before the 60 s drain would end."""
    server = ServeProcess(rules, "--drain", "60")
    try:
        server.wait_serving()
        assert server.signal(signal.SIGINT, timeout=20) == 0
        assert "draining" not in events(server)
        assert "stopped" in events(server)
    finally:
        server.stop()
