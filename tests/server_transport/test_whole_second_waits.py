"""A sub-second wait reads 1 s on every transport: gRPC (grpcio and native) and ``POST /json``.

Envoy keeps the whole seconds of ``duration_until_reset`` for ``x-ratelimit-reset``, so the
service sends whole seconds, rounded up (tests/server/test_service_whole_seconds.py asks the
service itself); the transports pass the same answer on.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from google.protobuf import json_format

from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.server_transport.conftest import OVER_LIMIT, StartServer, channel, http, request

#: A quarter of a second into a whole second since the epoch.
START = 1_700_006_400.25

RULES = """\
domain: waits
descriptors:
  - key: api_key
    rate_limit: {algorithm: gcra, unit: second, requests_per_unit: 1}
"""

TRANSPORTS = ["grpcio"]
if importlib.util.find_spec("pygrpc_native") is not None:
    TRANSPORTS.append("native")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_sub_second_wait_is_one_second_over_grpc_and_json_alike(
    start_server: StartServer, transport: str
) -> None:
    """1/s: the second request, 0.3 s after the first, waits 0.7 s: gRPC says 1 s (not
    0.7), and /json, asked at the same point on its own key, answers the same message."""
    clock = ManualClock(START)
    server = await start_server(RULES, store=AsyncMemoryStore(clock=clock), transport=transport)
    body = {"domain": "waits", "descriptors": [{"entries": [{"key": "api_key", "value": "j"}]}]}
    async with channel(server.grpc_port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        await stub.ShouldRateLimit(request("waits", {"api_key": "g"}), timeout=10)
        first = await http(server.http_port, "POST", "/json", json.dumps(body).encode())
        assert first.status == 200
        clock.advance(0.3)
        over_grpc = await stub.ShouldRateLimit(request("waits", {"api_key": "g"}), timeout=10)
    over_json = await http(server.http_port, "POST", "/json", json.dumps(body).encode())
    assert over_grpc.overall_code == OVER_LIMIT
    wait = over_grpc.statuses[0].duration_until_reset
    assert (wait.seconds, wait.nanos) == (1, 0)
    assert over_json.status == 429
    assert over_json.json()["statuses"][0]["durationUntilReset"] == "1s"
    parsed = json_format.ParseDict(over_json.json(), rls_pb2.RateLimitResponse())
    assert parsed == over_grpc
