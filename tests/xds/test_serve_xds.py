"""``ratewarden serve`` with its rules from an xDS server the test starts (in process).

The server is ``RateLimitServer``, the composition root ``serve`` runs; the control
plane is ``tests/xds/_control_plane.py``. Rules arrive, decide, change, are refused
(NACKed, the last good ones kept), and survive the control plane going away.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from ratewarden.server.app import RateLimitServer
from ratewarden.server.xds import messages
from tests._servers import free_port
from tests.server_transport.conftest import OK, OVER_LIMIT, channel, http, request
from tests.xds._control_plane import ControlPlane, until
from tests.xds.conftest import limit, resource, xds_server

START_S = 5.0
Start = Callable[..., Awaitable[RateLimitServer]]


@pytest.fixture
async def start_server() -> AsyncIterator[Start]:
    """``await start_server(plane, **settings)``: serve on loopback with rules from ``plane``,
    retrying every 20-60 ms, started (its first rules applied); stopped after the test."""
    servers: list[RateLimitServer] = []

    async def start(plane: ControlPlane, **options: Any) -> RateLimitServer:
        server = xds_server(plane, **options)
        servers.append(server)
        await asyncio.wait_for(server.start(), START_S)
        return server

    yield start
    for server in servers:
        await server.stop(0)


async def decide(server: RateLimitServer, domain: str, key: str, value: str) -> int:
    """One ShouldRateLimit call over gRPC: the overall code."""
    async with channel(server.grpc_port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        reply = await stub.ShouldRateLimit(request(domain, {key: value}))
    return int(reply.overall_code)


def metric(server: RateLimitServer, name: str) -> float:
    text = server.metrics("")[0].decode()
    [line] = [line for line in text.splitlines() if line.startswith(f"{name} ")]
    return float(line.split()[1])


async def test_rules_from_the_control_plane_decide_and_are_acked(
    plane: ControlPlane, start_server: Start
) -> None:
    """The first update is applied and ACKed (its version and nonce); the service then
    decides from it, over gRPC and /json, and /rlconfig shows it. Node id and metadata
    and the extra headers reach the control plane as upstream sends them."""
    plane.publish("v1", resource("shop-rules", "shop", limit("api_key", 2)))
    server = await start_server(
        plane,
        xds_node_id="rl-node",
        xds_node_metadata=(("cluster", "edge"), ("zone", "a")),
        xds_headers=(("authorization", "Bearer token"),),
    )
    [subscription] = plane.subscriptions()
    assert subscription.request.type_url == messages.TYPE_URL
    assert subscription.request.node.id == "rl-node"
    assert dict(subscription.request.node.metadata.fields.items()) == {
        "cluster": subscription.request.node.metadata.fields["cluster"],
        "zone": subscription.request.node.metadata.fields["zone"],
    }
    assert subscription.request.node.metadata.fields["zone"].string_value == "a"
    assert subscription.metadata["authorization"] == "Bearer token"
    ack = await plane.answer(plane.sent[0])
    assert ack.is_ack
    assert (ack.request.version_info, ack.request.response_nonce) == ("v1", plane.sent[0].nonce)

    assert [await decide(server, "shop", "api_key", "k") for _ in range(3)] == [
        OK,
        OK,
        OVER_LIMIT,
    ]
    reply = await http(server.http_port, "GET", "/rlconfig")
    assert "shop.api_key: 2/minute" in reply.body.decode()
    assert "xds:shop-rules" in reply.body.decode()
    assert metric(server, "ratelimit_service_config_load_success_total") == 1


async def test_an_update_changes_the_decision(plane: ControlPlane, start_server: Start) -> None:
    """A denied key is allowed once an update raises its limit (the over-limit cache is
    emptied as on a file reload), and the update is ACKed."""
    plane.publish("v1", resource("r", "shop", limit("api_key", 1)))
    server = await start_server(plane)
    assert [await decide(server, "shop", "api_key", "k") for _ in range(2)] == [OK, OVER_LIMIT]

    plane.publish("v2", resource("r", "shop", limit("api_key", 5)))
    ack = await plane.answer(plane.sent[-1])
    assert ack.is_ack and ack.request.version_info == "v2"
    assert server.xds is not None and server.xds.accepted_version == "v2"
    assert await decide(server, "shop", "api_key", "k") == OK
    assert metric(server, "ratelimit_service_config_load_success_total") == 2


async def test_a_bad_update_is_nacked_and_the_last_good_rules_keep_deciding(
    plane: ControlPlane, start_server: Start, caplog: pytest.LogCaptureFixture
) -> None:
    """An update the rule checks refuse is NACKed: the last version applied, the update's
    nonce, and an error_detail naming the resource and the problem. The rules in use stay,
    one log line says why, and the load error is counted."""
    plane.publish("v1", resource("r", "shop", limit("api_key", 1)))
    server = await start_server(plane)
    bad = messages.RateLimitDescriptor(
        key="api_key", rate_limit=messages.RateLimitPolicy(requests_per_unit=9)
    )
    with caplog.at_level(logging.ERROR, logger="ratewarden.server.xds"):
        plane.publish("v2", resource("broken", "shop", bad))
        nack = await plane.answer(plane.sent[-1])
    assert nack.is_nack
    assert nack.request.version_info == "v1"
    assert nack.request.response_nonce == plane.sent[-1].nonce
    assert nack.request.error_detail.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "xds:broken:" in nack.request.error_detail.message
    assert "unit: is missing" in nack.request.error_detail.message
    [record] = [r for r in caplog.records if getattr(r, "event", "") == "config_xds_rejected"]
    assert record.version == "v2" and record.kept_version == "v1"  # type: ignore[attr-defined]
    assert "xds:broken" in record.documents  # type: ignore[attr-defined]

    assert [await decide(server, "shop", "api_key", "k") for _ in range(2)] == [OK, OVER_LIMIT]
    assert metric(server, "ratelimit_service_config_load_error_total") == 1
    assert server.xds is not None and server.xds.accepted_version == "v1"

    plane.publish("v3", resource("r", "shop", limit("api_key", 5)))
    assert (await plane.answer(plane.sent[-1])).is_ack
    assert await decide(server, "shop", "api_key", "k") == OK


async def test_a_resource_of_another_type_is_nacked(
    plane: ControlPlane, start_server: Start
) -> None:
    """A response of another type than the one subscribed to is NACKed, naming that type."""
    plane.publish("v1", resource("r", "shop", limit("api_key", 1)))
    await start_server(plane)
    plane.publish("v2", resource("r", "shop"), type_url="type.googleapis.com/other.Thing")
    nack = await plane.answer(plane.sent[-1])
    assert nack.is_nack and "other.Thing" in nack.request.error_detail.message


async def test_the_rules_stay_while_the_control_plane_is_down_and_it_resubscribes(
    plane: ControlPlane, start_server: Start
) -> None:
    """The control plane goes away: the service keeps deciding from the rules it has,
    tries again with backoff, and once the control plane is back subscribes afresh and
    takes its current rules."""
    plane.publish("v1", resource("r", "shop", limit("api_key", 1)))
    server = await start_server(plane)
    assert server.xds is not None
    await plane.stop()
    await until(lambda: server.xds is not None and server.xds.failures >= 2, "failed retries")
    assert [await decide(server, "shop", "api_key", "k") for _ in range(2)] == [OK, OVER_LIMIT]

    plane.publish("v2", resource("r", "shop", limit("api_key", 5)))
    await plane.start()
    await until(lambda: len(plane.subscriptions()) == 2, "a new subscription")
    assert plane.subscriptions()[1].request.version_info == ""
    await plane.answer(plane.sent[-1])
    assert server.xds.accepted_version == "v2"
    assert await decide(server, "shop", "api_key", "k") == OK
    assert server.xds.streams >= 2


async def test_serve_waits_for_a_control_plane_that_is_down_at_start() -> None:
    """No control plane yet: start keeps trying, with backoff, and opens no port; it serves
    once the control plane comes up and sends rules."""
    plane = ControlPlane()
    plane.port = free_port()
    server = xds_server(plane)
    assert server.xds is not None
    starting = asyncio.ensure_future(server.start())
    try:
        await until(lambda: server.xds is not None and server.xds.failures >= 3, "retries")
        assert not starting.done()
        assert server.grpc_port == 0  # no port bound yet
        plane.publish("v1", resource("r", "shop", limit("api_key", 1)))
        await plane.start()
        await asyncio.wait_for(starting, START_S)
        assert await decide(server, "shop", "api_key", "k") == OK
    finally:
        starting.cancel()
        await server.stop(0)
        await plane.stop()


async def test_an_update_without_resources_leaves_no_rule(
    plane: ControlPlane, start_server: Start
) -> None:
    """The control plane removes every rule: applied (ACKed), nothing is limited, and health
    stays SERVING (upstream's default)."""
    plane.publish("v1", resource("r", "shop", limit("api_key", 1)))
    server = await start_server(plane, health_interval=0.02)
    plane.publish("v2")
    assert (await plane.answer(plane.sent[-1])).is_ack
    assert [await decide(server, "shop", "api_key", "k") for _ in range(3)] == [OK, OK, OK]
    assert await server.refresh_health()


async def test_with_health_needs_rules_no_domain_means_not_serving(
    plane: ControlPlane, start_server: Start
) -> None:
    """--health-needs-rules (upstream's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true): an
    update that leaves no domain turns health NOT_SERVING; rules back, SERVING again."""
    plane.publish("v1", resource("r", "shop", limit("api_key", 1)))
    server = await start_server(plane, health_needs_rules=True, health_interval=0.02)
    assert server.serving()
    plane.publish("v2")
    await until(lambda: not server.serving(), "NOT_SERVING")
    assert (await http(server.http_port, "GET", "/healthcheck")).status == 500
    plane.publish("v3", resource("r", "shop", limit("api_key", 1)))
    await until(server.serving, "SERVING again")
