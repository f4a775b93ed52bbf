"""--grpc-max-connection-age (upstream's GRPC_MAX_CONNECTION_AGE) over real loopback sockets.

A connection older than the age is sent GOAWAY by grpc-core (the age jittered by +-10%), and
closed after the grace; the client connects afresh for its next call, which is how long-lived
connections from Envoy spread over replicas added later. Real time, bounded: an age of 1 s
(the first call must be answered before it, on a busy machine too), at most 5 s of waiting.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from tests.server_transport.conftest import OK, StartServer, channel, request

READY = grpc.ChannelConnectivity.READY


async def test_a_connection_past_the_age_is_closed_and_the_next_call_connects_afresh(
    start_server: StartServer,
) -> None:
    """At the age the client's channel leaves READY (GOAWAY, then the close); the next call
    is answered on a new connection. auto picks grpcio for it, whatever is installed."""
    server = await start_server(grpc_max_connection_age=1.0, grpc_max_connection_age_grace=0.2)
    assert server.transport == "grpcio"
    async with channel(server.grpc_port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        first = await stub.ShouldRateLimit(request("transport", {"api_key": "a"}))
        assert chan.get_state() == READY
        await asyncio.wait_for(chan.wait_for_state_change(READY), timeout=5)
        assert chan.get_state() != READY
        second = await stub.ShouldRateLimit(request("transport", {"api_key": "a"}))
    assert (first.overall_code, second.overall_code) == (OK, OK)
    # The counter went on across the two connections: one server, one store.
    assert [first.statuses[0].limit_remaining, second.statuses[0].limit_remaining] == [2, 1]


async def test_without_an_age_the_connection_stays(start_server: StartServer) -> None:
    """The default: no age, the connection is kept (grpcio, 1 s watched)."""
    server = await start_server(transport="grpcio")
    async with channel(server.grpc_port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        await stub.ShouldRateLimit(request("transport", {"api_key": "a"}))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(chan.wait_for_state_change(READY), timeout=1)
        assert chan.get_state() == READY
