"""--grpc-host, --debug-port, --key-prefix, --store-timeout and --merge-domains in a running server.

These options exist for envoyproxy/ratelimit's GRPC_HOST, DEBUG_PORT, CACHE_KEY_PREFIX,
REDIS_TIMEOUT and MERGE_DOMAIN_CONFIG (docs/envoy.md); here is what each does to the server.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from ratewarden.server import config as rules
from ratewarden.server.app import RateLimitServer
from ratewarden.server.reload import ReloadOutcome
from ratewarden.server.settings import Settings
from ratewarden.storage.redis import AsyncRedisStore
from tests._servers import HOST, RedisServer
from tests.server_transport.conftest import (
    OK,
    OVER_LIMIT,
    RULES,
    StartServer,
    http,
    request,
)

OTHER_LOOPBACK = "127.0.0.2"  # Linux routes all of 127.0.0.0/8 to the loopback interface


async def test_grpc_host_binds_the_grpc_port_apart_from_the_http_one(
    start_server: StartServer,
) -> None:
    """--grpc-host puts gRPC on its own address; HTTP stays on --host."""
    server = await start_server(host="127.0.0.1", grpc_host=OTHER_LOOPBACK)
    async with grpc.aio.insecure_channel(f"{OTHER_LOOPBACK}:{server.grpc_port}") as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        reply = await stub.ShouldRateLimit(request("transport", {"api_key": "a"}))
    assert reply.overall_code == OK
    assert (await http(server.http_port, "GET", "/healthcheck")).status == 200


async def test_the_debug_port_serves_the_http_endpoints(start_server: StartServer) -> None:
    """--debug-port opens a second HTTP port: /rlconfig, /metrics and /healthcheck answer there."""
    server = await start_server(debug_port=0)
    assert server.debug_port not in (0, server.http_port)
    rlconfig = await http(server.debug_port, "GET", "/rlconfig")
    assert rlconfig.status == 200 and b"transport.api_key" in rlconfig.body
    assert (await http(server.debug_port, "GET", "/metrics")).status == 200
    assert (await http(server.debug_port, "GET", "/healthcheck")).status == 200


async def test_the_metrics_port_serves_the_metrics_alone(start_server: StartServer) -> None:
    """--metrics-port (upstream's USE_PROMETHEUS) serves the metrics at --metrics-path, the same
    counts as /metrics on the HTTP port, and nothing else: other paths are 404."""
    server = await start_server(debug_port=0, metrics_port=0, metrics_path="/stats/prometheus")
    assert server.metrics_port not in (0, server.http_port, server.debug_port)
    async with grpc.aio.insecure_channel(f"{HOST}:{server.grpc_port}") as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        await stub.ShouldRateLimit(request("transport", {"api_key": "m"}))
    metrics = await http(server.metrics_port, "GET", "/stats/prometheus")
    line = b'ratelimit_service_rate_limit_total_hits_total{domain="transport",key="api_key"'
    assert metrics.status == 200 and line in metrics.body
    for path in ("/metrics", "/rlconfig", "/healthcheck"):
        assert (await http(server.metrics_port, "GET", path)).status == 404
    assert (await http(server.metrics_port, "POST", "/json")).status == 404


async def test_without_debug_port_no_third_listener(start_server: StartServer) -> None:
    """By default there is no debug port."""
    server = await start_server()
    assert server.debug is None and server.debug_port == 0
    assert server.prometheus is None and server.metrics_port == 0


async def test_key_prefix_and_store_timeout_reach_the_redis_store(
    start_server: StartServer, redis_server: RedisServer
) -> None:
    """--key-prefix starts every Redis key; --store-timeout is the store's timeout."""
    server = await start_server(
        store_url=f"redis://127.0.0.1:{redis_server.port}/0",
        key_prefix="upstream_prefix",
        store_timeout=0.75,
    )
    assert isinstance(server.store, AsyncRedisStore)
    assert (server.store.prefix, server.store.timeout) == ("upstream_prefix", 0.75)
    reply = await server.should_rate_limit(request("transport", {"api_key": "prefixed"}))
    assert reply.overall_code == OK
    client = redis_server.client()
    try:
        keys = list(client.scan_iter(match="upstream_prefix:*prefixed*"))
    finally:
        client.close()
    assert keys


SPLIT = """\
domain: transport
descriptors:
  - key: other
    rate_limit: {unit: hour, requests_per_unit: 1}
"""


async def test_merge_domains_serves_one_domain_from_several_files(tmp_path: Path) -> None:
    """--merge-domains: the rules of a domain split over two files are all enforced."""
    directory = tmp_path
    (directory / "a.yaml").write_text(RULES)
    (directory / "b.yaml").write_text(SPLIT)
    settings = Settings(
        config_paths=(str(directory),),
        grpc_port=0,
        http_port=0,
        reload_interval=0,
        merge_domains=True,
    )
    server = RateLimitServer(settings)
    try:
        first = await server.should_rate_limit(request("transport", {"other": "x"}))
        second = await server.should_rate_limit(request("transport", {"other": "x"}))
        assert (first.overall_code, second.overall_code) == (OK, OVER_LIMIT)
        assert server.watcher.check_once() is ReloadOutcome.UNCHANGED
    finally:
        await server.store.aclose()


def test_without_merge_domains_the_server_refuses_the_split_domain(tmp_path: Path) -> None:
    """Without --merge-domains the same two files do not start a server."""
    directory = tmp_path
    (directory / "a.yaml").write_text(RULES)
    (directory / "b.yaml").write_text(SPLIT)
    settings = Settings(config_paths=(str(directory),), grpc_port=0, http_port=0)
    with pytest.raises(rules.ConfigError, match="duplicate domain 'transport'"):
        RateLimitServer(settings)
