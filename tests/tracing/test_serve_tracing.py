"""``--tracing http|grpc``: a span per ShouldRateLimit call, exported over OTLP to a collector
the test starts on loopback, on both gRPC transports; in the trace the call's metadata carries,
sampled as envoyproxy/ratelimit samples."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from ratewarden.server.app import NO_RULES, RateLimitServer
from ratewarden.server.settings import Settings
from ratewarden.server.tracing import SPAN_NAME
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.server_transport.conftest import RULES, channel, request
from tests.tracing._collector import Collector, GrpcCollector, HttpCollector

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
SERVER_KIND = 2  # opentelemetry.proto.trace.v1.Span.SPAN_KIND_SERVER
STATUS_ERROR = 2
Serve = Callable[..., Awaitable[RateLimitServer]]


@pytest.fixture(params=["http", "grpc"])
async def collector(request: pytest.FixtureRequest) -> AsyncIterator[Collector]:
    """A started OTLP collector of each protocol; stopped after the test."""
    found: Collector
    if request.param == "http":
        found = HttpCollector()
    else:
        found = GrpcCollector()
        await found.start()
    yield found
    await found.stop()  # type: ignore[attr-defined]


@pytest.fixture
async def serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collector: Collector
) -> AsyncIterator[Serve]:
    """``await serve(**settings)``: a started server exporting to ``collector`` with its
    protocol; ``await server.stop(0)`` sends the spans left. Stopped after the test if not."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER"):
        monkeypatch.delenv(name, raising=False)
    protocol = "http" if isinstance(collector, HttpCollector) else "grpc"
    servers: list[RateLimitServer] = []
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)

    async def start(**options: Any) -> RateLimitServer:
        options = {"grpc_port": 0, "http_port": 0, "reload_interval": 0, **options}
        options.setdefault("config_paths", (str(rules),))
        settings = Settings(tracing=protocol, **options)
        server = RateLimitServer(settings, store=AsyncMemoryStore(clock=ManualClock()))
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        if server.grpc_port and server.serving():
            await server.stop(0)


async def call(
    server: RateLimitServer, metadata: tuple[tuple[str, str], ...] = (), domain: str = "transport"
) -> grpc.StatusCode:
    """One ShouldRateLimit call (api_key=k) with ``metadata``: its gRPC status code."""
    async with channel(server.grpc_port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        try:
            await stub.ShouldRateLimit(request(domain, {"api_key": "k"}), metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def traceparent(sampled: bool = True) -> tuple[tuple[str, str], ...]:
    return (("traceparent", f"00-{TRACE}-{PARENT}-{'01' if sampled else '00'}"),)


@pytest.mark.parametrize("transport", ["grpcio", "native"])
async def test_each_call_is_a_server_span_in_envoys_trace(
    serve: Serve, collector: Collector, transport: str
) -> None:
    """Three calls to a limit of 3 an hour and a fourth over it, each in the trace its
    traceparent names: four SERVER spans, children of Envoy's span, with the rpc attributes,
    the domain, the descriptor count and each overall code; the resource names ratewarden."""
    server = await serve(transport=transport)
    assert server.transport == transport
    codes = [await call(server, traceparent()) for _ in range(4)]
    assert codes == [grpc.StatusCode.OK] * 4
    await server.stop(0)
    spans = await collector.wait_for(4)
    assert len(spans) == 4
    for span in spans:
        assert (span.name, span.kind) == (SPAN_NAME, SERVER_KIND)
        assert (span.trace_id, span.parent_span_id) == (TRACE, PARENT)
        assert span.attributes["rpc.system"] == "grpc"
        assert span.attributes["rpc.method"] == "ShouldRateLimit"
        assert span.attributes["rpc.grpc.status_code"] == 0
        assert span.attributes["ratelimit.domain"] == "transport"
        assert span.attributes["ratelimit.descriptors"] == 1
        assert span.status_code == 0
        assert span.resource["service.name"] == "ratewarden"
        assert span.resource["service.instance.id"]
    overall = [span.attributes["ratelimit.overall_code"] for span in spans]
    assert sorted(overall) == ["OK", "OK", "OK", "OVER_LIMIT"]
    assert len({span.span_id for span in spans}) == 4


@pytest.mark.parametrize("transport", ["grpcio", "native"])
async def test_failed_calls_carry_their_code(
    serve: Serve, collector: Collector, transport: str, tmp_path: Path
) -> None:
    """A malformed request (no domain) is INVALID_ARGUMENT, the client's fault: the code, no
    error status. A call before the first rules (--xds-force-start) is UNAVAILABLE: the code
    and an error status with upstream's words."""
    server = await serve(transport=transport)
    assert await call(server, traceparent(), domain="") == grpc.StatusCode.INVALID_ARGUMENT
    await server.stop(0)
    [bad] = await collector.wait_for(1)
    assert (bad.attributes["rpc.grpc.status_code"], bad.status_code) == (3, 0)

    waiting = await serve(
        transport=transport,
        config_paths=(),
        config_xds="127.0.0.1:9",  # nothing answers: the rules never come
        xds_force_start=True,
        xds_retry_interval=5.0,
        xds_retry_max=5.0,
    )
    assert await call(waiting, traceparent()) == grpc.StatusCode.UNAVAILABLE
    await waiting.stop(0)
    spans = await collector.wait_for(2)
    unavailable = spans[-1]
    assert unavailable.attributes["rpc.grpc.status_code"] == 14
    assert (unavailable.status_code, unavailable.status_message) == (STATUS_ERROR, NO_RULES)


async def test_sampling_follows_envoys_decision_and_else_the_rate(
    serve: Serve, collector: Collector
) -> None:
    """At a rate of 0: a call without a trace and a call whose parent was not sampled make no
    span; a sampled W3C parent and a sampled B3 parent (headers Envoy's Zipkin tracer sends)
    are followed."""
    server = await serve(tracing_sampling_rate=0.0, transport="grpcio")
    b3 = (("x-b3-traceid", TRACE), ("x-b3-spanid", PARENT), ("x-b3-sampled", "1"))
    for metadata in ((), traceparent(sampled=False), traceparent(), b3):
        assert await call(server, metadata) == grpc.StatusCode.OK
    await server.stop(0)
    spans = await collector.wait_for(2)
    assert len(spans) == 2
    assert {(span.trace_id, span.parent_span_id) for span in spans} == {(TRACE, PARENT)}


async def test_the_resource_is_given_over_the_environment(
    serve: Serve, collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--tracing-resource wins over OTEL_RESOURCE_ATTRIBUTES, which adds what it lacks; a
    rate of 1 traces a call that came without a trace (a root span)."""
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=env,deployment.environment=prod")
    server = await serve(
        tracing_resource=(("service.name", "edge-rl"), ("service.instance.id", "pod-7")),
        transport="grpcio",
    )
    assert await call(server) == grpc.StatusCode.OK
    await server.stop(0)
    [span] = await collector.wait_for(1)
    assert span.parent_span_id == ""
    assert span.resource["service.name"] == "edge-rl"
    assert span.resource["service.instance.id"] == "pod-7"
    assert span.resource["deployment.environment"] == "prod"
