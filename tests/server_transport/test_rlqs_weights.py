"""Weights on the wire: two grpcio clients name themselves with ``x-ratewarden-rlqs-peer``.

A real ``RateLimitServer`` with ``rlqs=True``; each client plays an Envoy whose
``rlqs_server`` grpc_service sends the header through ``initial_metadata``. The rule
weighs ``eu`` 3 and ``us`` 1: asking alike, far over the limit, they end up holding 45
and 15 of its 60 tokens a minute.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from envoy.service.rate_limit_quota.v3 import rlqs_pb2_grpc

from ratewarden.server.rlqs.grpc import PEER_HEADER, peer_name
from tests.server_transport._rlqs import WAIT, Stream, assignment, report
from tests.server_transport.conftest import StartServer, channel, http

RULES = """\
domain: edge
descriptors:
  - key: tenant
    rlqs_weights: {eu: 3, us: 1}
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 60, burst: 8}
"""


class NamedStream(Stream):
    """A ``Stream`` whose call carries ``PEER_HEADER: peer``, as Envoy's initial_metadata."""

    def __init__(self, port: int, peer: str) -> None:
        self.channel = channel(port)
        self.outbox: asyncio.Queue[Any] = asyncio.Queue()
        stub = rlqs_pb2_grpc.RateLimitQuotaServiceStub(self.channel)
        self.call = stub.StreamRateLimitQuotas(self._requests(), metadata=((PEER_HEADER, peer),))

    async def bucket_until(self, wanted: tuple[int, int, int]) -> None:
        """Read assignments (renewals come every round) until the token bucket is ``wanted``."""
        deadline = asyncio.get_running_loop().time() + WAIT
        while assignment(await self.next()).get("token_bucket") != wanted:
            assert asyncio.get_running_loop().time() < deadline, f"never got {wanted}"


async def test_two_envoys_naming_themselves_hold_shares_by_their_weights(
    start_server: StartServer, streams: list[Stream]
) -> None:
    """eu alone holds all 60; once us has reported, the next round gives 45 (burst 6) and
    15 (burst 2): 3 to 1, as the rule's rlqs_weights say, where the split by demand would
    give 30 and 30; /rlqs.json shows each stream's peer name with its share."""
    server = await start_server(RULES, rlqs=True, rlqs_interval=0.2, rlqs_ttl=2)
    eu, us = NamedStream(server.grpc_port, "eu"), NamedStream(server.grpc_port, "us")
    streams += [eu, us]
    eu.send(report("edge", ({"tenant": "a"}, 500, 0)))
    assert assignment(await eu.next())["token_bucket"] == (8, 60, 60)
    us.send(report("edge", ({"tenant": "a"}, 500, 0)))
    await us.bucket_until((2, 15, 60))
    await eu.bucket_until((6, 45, 60))
    state = (await http(server.http_port, "GET", "/rlqs.json")).json()
    peers = {
        entry["peer"]: entry["assignment"]["tokens_per_fill"] for entry in state["assignments"]
    }
    assert peers == {"eu": 45, "us": 15}


class Context:
    """What ``peer_name`` reads of a grpcio servicer context."""

    def __init__(self, *metadata: tuple[str, str]) -> None:
        self.metadata = metadata

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata


def test_a_peer_name_no_rule_could_hold_is_weighed_as_unnamed_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Spaces, control characters or more than 128 characters: the stream is unnamed (the
    rule's default weight) and the log says why; no header at all is unnamed quietly."""
    assert peer_name(Context(("user-agent", "grpc"), (PEER_HEADER, " eu "))) == "eu"
    assert peer_name(Context()) == ""
    with caplog.at_level(logging.WARNING, logger="ratewarden.server.rlqs"):
        assert peer_name(Context((PEER_HEADER, "edge eu"))) == ""
        assert peer_name(Context((PEER_HEADER, "x" * 129))) == ""
    events = [(record.event, record.getMessage()) for record in caplog.records]  # type: ignore[attr-defined]
    assert [event for event, _ in events] == ["rlqs_bad_peer"] * 2
    assert "printable ASCII without spaces" in events[0][1]
    assert "longer than 128 characters" in events[1][1]
