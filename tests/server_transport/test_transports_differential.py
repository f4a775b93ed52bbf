"""Same answers everywhere: random call sequences through every transport and in process.

Three servers load the same rules, each over its own memory store on its own
ManualClock; the clocks move together. Every call of a random sequence (several
algorithms, nested and unknown descriptors, hits_addend, Envoy's own limit
override, requests the service refuses) goes to the grpcio port, the native port
and ``RateLimitServer.should_rate_limit`` in process, and the three answers must
be equal: the whole RateLimitResponse, or the same refusal (INVALID_ARGUMENT over
gRPC, ConfigurationError in process, with the same reason).
"""

from __future__ import annotations

import importlib.util
import random
from typing import Any

import grpc
import pytest
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

from ratewarden.errors import ConfigurationError
from ratewarden.server.app import RateLimitServer
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.server_transport.conftest import StartServer, channel

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("pygrpc_native") is None, reason="pygrpc-native is not installed"
)

#: A whole minute since the epoch.
START = 1_700_006_400.0

RULES = """\
domain: mixed
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: api_key
    value: partner-*
    rate_limit: {algorithm: gcra, unit: second, requests_per_unit: 2, burst: 3}
  - key: remote_address
    rate_limit:
      algorithm: sliding_window
      limits:
        - {unit: second, requests_per_unit: 3}
        - {unit: minute, requests_per_unit: 8}
  - key: path
    value: /login
    descriptors:
      - key: remote_address
        rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 1, burst: 2}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 4, algorithm: leaky_bucket}
    quota_mode: true
  - key: shadowed
    rate_limit: {unit: minute, requests_per_unit: 1}
    shadow_mode: true
"""

KEYS = ("api_key", "remote_address", "tenant", "shadowed", "unknown")
VALUES = ("a", "b", "partner-1", "partner-2", "10.0.0.1")


def random_descriptor(rng: random.Random) -> Any:
    if rng.random() < 0.2:
        entries = [("path", "/login"), ("remote_address", rng.choice(VALUES))]
    else:
        entries = [(rng.choice(KEYS), rng.choice(VALUES))]
    descriptor = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in entries]
    )
    roll = rng.random()
    if roll < 0.15:
        descriptor.hits_addend.value = rng.choice((0, 2, 5))
    elif roll < 0.22:
        descriptor.limit.requests_per_unit = rng.choice((1, 2, 10))
        descriptor.limit.unit = rng.choice((1, 2))  # SECOND, MINUTE
    return descriptor


def random_request(rng: random.Random) -> Any:
    domain = "mixed" if rng.random() > 0.05 else rng.choice(("", "other"))
    count = rng.choice((1, 1, 2, 3, 4))
    return rls_pb2.RateLimitRequest(
        domain=domain,
        descriptors=[random_descriptor(rng) for _ in range(count)],
        hits_addend=rng.choice((0, 0, 0, 1, 3)),
    )


async def over_grpc(stub: Any, request: Any) -> Any:
    try:
        return await stub.ShouldRateLimit(request, timeout=10)
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, exc
        return ("refused", exc.details())


async def in_process(server: RateLimitServer, request: Any) -> Any:
    try:
        return await server.should_rate_limit(request)
    except ConfigurationError as exc:
        return ("refused", str(exc))


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
async def test_every_transport_and_the_service_answer_alike(
    start_server: StartServer, seed: int
) -> None:
    clocks = [ManualClock(START) for _ in range(3)]
    grpcio, native, local = [
        await start_server(RULES, store=AsyncMemoryStore(clock=clock), transport=transport)
        for clock, transport in zip(clocks, ("grpcio", "native", "grpcio"), strict=True)
    ]
    assert (grpcio.transport, native.transport) == ("grpcio", "native")
    rng = random.Random(seed)
    async with channel(grpcio.grpc_port) as one, channel(native.grpc_port) as two:
        stubs = [rls_pb2_grpc.RateLimitServiceStub(chan) for chan in (one, two)]
        denied = refused = 0
        for step in range(150):
            request = random_request(rng)
            answers = [await over_grpc(stub, request) for stub in stubs]
            answers.append(await in_process(local, request))
            assert answers[0] == answers[1] == answers[2], (seed, step, request, answers)
            if isinstance(answers[0], tuple):
                refused += 1
            elif answers[0].overall_code == rls_pb2.RateLimitResponse.OVER_LIMIT:
                denied += 1
            elapsed = rng.choice((0.0, 0.0, 0.05, 0.3, 1.0, 7.0))
            for clock in clocks:
                clock.advance(elapsed)
    # The sequences reach both answers and the refusals, or the comparison proves little.
    assert denied > 10
    assert refused > 0
