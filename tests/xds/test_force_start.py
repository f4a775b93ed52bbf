"""``--xds-force-start`` (upstream's ``FORCE_START_WITHOUT_INITIAL_CONFIG=true``): the ports
open before the first rules from the control plane; until they arrive every call fails
``UNAVAILABLE`` (``/json``: 503), counted as a failed call, and charges nothing; then the
rules decide as usual."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratewarden.server.app import NO_RULES, RateLimitServer
from ratewarden.server.xds import messages
from tests._servers import free_port
from tests.server_transport._rlqs import Stream, assignment, report
from tests.server_transport.conftest import OK, OVER_LIMIT, channel, http, request
from tests.xds._control_plane import ControlPlane, until
from tests.xds.conftest import START_S, limit, resource, xds_server
from tests.xds.conftest import forced as started


@pytest.fixture
async def down() -> AsyncIterator[ControlPlane]:
    """A control plane with an address but not started (down at the server's start)."""
    plane = ControlPlane()
    plane.port = free_port()
    yield plane
    await plane.stop()


async def forced(
    plane: ControlPlane, servers: list[RateLimitServer], **options: object
) -> RateLimitServer:
    """The conftest's ``forced``, its health checked every 0.02 s."""
    return await started(plane, servers, health_interval=0.02, **options)


async def call(server: RateLimitServer, value: str = "k") -> int:
    async with channel(server.grpc_port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        reply = await stub.ShouldRateLimit(request("shop", {"api_key": value}), timeout=START_S)
    return int(reply.overall_code)


async def post(server: RateLimitServer, value: str = "k") -> tuple[int, bytes]:
    body = {"domain": "shop", "descriptors": [{"entries": [{"key": "api_key", "value": value}]}]}
    reply = await http(server.http_port, "POST", "/json", json.dumps(body).encode())
    return reply.status, reply.body


def failed_calls(server: RateLimitServer) -> float:
    server.stats.flush()
    text = server.metrics("")[0].decode()
    prefix = 'ratelimit_service_should_rate_limit_error_total{err_type="service_error"} '
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


@pytest.mark.parametrize("transport", ["grpcio", "native"])
async def test_calls_fail_unavailable_until_the_first_rules_then_decide(
    down: ControlPlane, servers: list[RateLimitServer], transport: str
) -> None:
    """The control plane is down: start returns with the ports bound; each call fails
    UNAVAILABLE with upstream's words, /json 503, counted as a failed call; health is
    SERVING (the store answers), as upstream's. The rules arrive: the limit counts from
    the first request after them (the failed ones charged nothing)."""
    server = await forced(down, servers, transport=transport)
    assert server.transport == transport and server.grpc_port and server.http_port
    assert server.xds is not None and not server.xds.ready.is_set()
    for _ in range(3):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call(server)
        assert (raised.value.code(), raised.value.details()) == (
            grpc.StatusCode.UNAVAILABLE,
            NO_RULES,
        )
    assert await post(server) == (503, NO_RULES.encode() + b"\n")
    assert failed_calls(server) == 4
    assert await server.refresh_health()
    assert (await http(server.http_port, "GET", "/healthcheck")).status == 200
    async with channel(server.grpc_port) as chan:
        health = await health_pb2_grpc.HealthStub(chan).Check(health_pb2.HealthCheckRequest())
    assert health.status == health_pb2.HealthCheckResponse.SERVING

    down.publish("v1", resource("r", "shop", limit("api_key", 2)))
    await down.start()
    await until(lambda: server.rules_loaded, "the first rules")
    assert [await call(server) for _ in range(3)] == [OK, OK, OVER_LIMIT]
    assert (await post(server, "other"))[0] == 200
    assert failed_calls(server) == 4


async def test_health_needs_rules_keeps_it_not_serving_until_they_arrive(
    down: ControlPlane, servers: list[RateLimitServer]
) -> None:
    """With --health-needs-rules (upstream's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED) the open
    ports say NOT_SERVING until a domain arrives, then SERVING."""
    server = await forced(down, servers, health_needs_rules=True)
    assert not server.serving()
    assert (await http(server.http_port, "GET", "/healthcheck")).status == 500
    down.publish("v1", resource("r", "shop", limit("api_key", 2)))
    await down.start()
    await until(server.serving, "SERVING once the rules arrive")
    assert (await http(server.http_port, "GET", "/healthcheck")).status == 200


async def test_a_bad_first_update_leaves_the_calls_failing(
    plane: ControlPlane, servers: list[RateLimitServer], caplog: pytest.LogCaptureFixture
) -> None:
    """A first update that is NACKed loads nothing: calls keep failing, not allowing, and the
    config_xds_rejected line says so (it said 'keeping the rules in use', with none loaded)."""
    no_unit = messages.RateLimitPolicy(requests_per_unit=9)
    plane.publish(
        "v1", resource("r", "shop", messages.RateLimitDescriptor(key="api_key", rate_limit=no_unit))
    )
    caplog.set_level(logging.ERROR, logger="ratewarden.server.xds")
    server = await forced(plane, servers)
    await until(lambda: bool(plane.sent), "the first update sent")
    assert (await plane.answer(plane.sent[-1])).is_nack
    [rejected] = [r for r in caplog.records if getattr(r, "event", "") == "config_xds_rejected"]
    assert rejected.getMessage() == (
        "rules from the xDS server rejected; no rules loaded yet: every call fails UNAVAILABLE "
        "until the first arrive"
    )
    assert not server.rules_loaded
    assert (await post(server))[0] == 503
    plane.publish("v2", resource("r", "shop", limit("api_key", 2)))
    await until(lambda: server.rules_loaded, "the good update")
    assert (await post(server))[0] == 200


async def test_quota_streams_are_refused_unavailable_until_the_first_rules(
    down: ControlPlane, servers: list[RateLimitServer]
) -> None:
    """--rlqs: a quota stream opened before the rules ends UNAVAILABLE (Envoy keeps its
    no_assignment_behavior and opens it again); once they arrive, streams get assignments."""
    server = await forced(down, servers, rlqs=True)
    early = Stream(server.grpc_port)
    try:
        early.send(report("shop", ({"api_key": "a"}, 1, 0)))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await early.next()
        assert (raised.value.code(), raised.value.details()) == (
            grpc.StatusCode.UNAVAILABLE,
            NO_RULES,
        )
    finally:
        await early.close()
    down.publish("v1", resource("r", "shop", limit("api_key", 6)))
    await down.start()
    await until(lambda: server.rules_loaded, "the first rules")
    later = Stream(server.grpc_port)
    try:
        later.send(report("shop", ({"api_key": "a"}, 1, 0)))
        assert assignment(await later.next())["bucket"] == {"api_key": "a"}
    finally:
        await later.close()


def disconnected(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The messages of the xds_disconnected log lines so far."""
    return [r.getMessage() for r in caplog.records if getattr(r, "event", "") == "xds_disconnected"]


async def test_the_disconnected_line_says_what_decides_before_and_after_the_first_rules(
    down: ControlPlane, servers: list[RateLimitServer], caplog: pytest.LogCaptureFixture
) -> None:
    """xds_disconnected said 'keeping the rules in use' with no rules loaded, while every call
    failed. Force-started with the control plane down, it says that no rules are loaded and
    that calls fail until the first arrive; once rules came and the plane goes away, it says
    the rules in use are kept."""
    caplog.set_level(logging.INFO, logger="ratewarden.server.xds")
    server = await forced(down, servers)
    await until(lambda: bool(disconnected(caplog)), "an xds_disconnected line")
    assert disconnected(caplog)[0] == (
        "no stream to the xDS server; no rules loaded yet: every call fails UNAVAILABLE until "
        "the first arrive; connecting again"
    )
    down.publish("v1", resource("r", "shop", limit("api_key", 2)))
    await down.start()
    await until(lambda: server.rules_loaded, "the first rules")
    seen = len(disconnected(caplog))
    await down.stop()
    await until(lambda: len(disconnected(caplog)) > seen, "an xds_disconnected line after rules")
    assert disconnected(caplog)[-1] == (
        "no stream to the xDS server; keeping the rules in use; connecting again"
    )


async def test_the_disconnected_line_before_the_first_rules_says_the_ports_stay_closed(
    down: ControlPlane, caplog: pytest.LogCaptureFixture
) -> None:
    """Without --xds-force-start the ports open only with the first rules: the line says so."""
    caplog.set_level(logging.INFO, logger="ratewarden.server.xds")
    server = xds_server(down)
    starting = asyncio.create_task(server.start())
    try:
        await until(lambda: bool(disconnected(caplog)), "an xds_disconnected line")
    finally:
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        await server.stop(0)
    assert disconnected(caplog)[0] == (
        "no stream to the xDS server; no rules loaded yet: the ports stay closed until the "
        "first arrive; connecting again"
    )
