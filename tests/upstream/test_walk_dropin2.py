"""A team swapping envoyproxy/ratelimit for ``ratewarden serve`` keeps its environment: health
during a Redis outage, the Prometheus names its dashboards query, and a word at start on the
store timeout it did not set (the second drop-in walk's findings 3, 4 and 5).

Each test runs ``ratewarden serve`` as a process on a redis-server of its own, which it
stops to make the outage; health is read over HTTP and gRPC, the metrics by scraping.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratewarden.server.settings import resolve
from ratewarden.server.upstream_backend import timeout_note
from tests._servers import HOST, RedisServer, free_port
from tests.server_transport._process import ServeProcess, serving
from tests.server_transport.test_serve_process import post_json
from tests.upstream.test_statsd import RULES

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
#: Two descriptors a call, both under rules: a store failure reaches both.
TWO = {
    "domain": "web",
    "descriptors": [
        {"entries": [{"key": "api_key", "value": "k"}]},
        {"entries": [{"key": "client_ip", "value": "10.0.0.1"}]},
    ],
}


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, which it may stop."""
    server = RedisServer()
    try:
        yield server
    finally:
        server.stop()


def upstream_redis(server: RedisServer) -> dict[str, str]:
    return {"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": f"{HOST}:{server.port}"}


def grpc_health(server: ServeProcess) -> list[int]:
    """The gRPC health status of ``""`` and ``"ratelimit"`` (upstream's name)."""
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return [
            stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5).status
            for name in ("", "ratelimit")
        ]


def health_after_outage(server: ServeProcess, redis: RedisServer) -> tuple[int, list[int]]:
    """Stop ``redis``, wait for serve's health loop to log the failed ping (its second
    ``health`` line: the first said the store answers), then read both health endpoints."""
    redis.stop()
    deadline = time.monotonic() + 20
    while len([entry for entry in server.logs() if entry.get("event") == "health"]) < 2:
        assert time.monotonic() < deadline, server.text()
        time.sleep(0.05)
    return server.healthcheck(), grpc_health(server)


def serve_on(
    tmp_path: Path, redis: RedisServer, *args: str, env: dict[str, str] | None = None
) -> Any:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    return serving(rules, *args, env={"RATEWARDEN_HEALTH_INTERVAL": "0.1", **(env or {})})


@pytest.mark.parametrize(
    ("given", "follows"),
    [
        ({}, False),  # upstream's default: REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=false
        ({"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "false"}, False),
        ({"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true"}, True),
        ({"RATEWARDEN_HEALTH_FOLLOWS_STORE": "true"}, True),  # ratewarden's own wins
    ],
)
def test_upstream_health_follows_redis_only_with_its_active_connection_check(
    tmp_path: Path, redis: RedisServer, given: dict[str, str], follows: bool
) -> None:
    """Under upstream's Redis variables health stays SERVING while Redis is down, as
    upstream's does, unless REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true (or ratewarden's own
    --health-follows-store) ties it to the store: /healthcheck 500, gRPC NOT_SERVING."""
    with serve_on(tmp_path, redis, env={**upstream_redis(redis), **given}) as server:
        status, statuses = health_after_outage(server, redis)
        if follows:
            assert (status, statuses) == (500, [NOT_SERVING, NOT_SERVING])
        else:
            assert (status, statuses) == (200, [SERVING, SERVING])
            assert post_json(server.http_port, TWO) == 200  # the failure mode answers
        health = [entry for entry in server.logs() if entry.get("event") == "health"]
        assert health[-1]["serving"] is not follows


@pytest.mark.parametrize(("args", "follows"), [((), True), (("--no-health-follows-store",), False)])
def test_own_flags_keep_health_on_the_store_unless_told_otherwise(
    tmp_path: Path, redis: RedisServer, args: tuple[str, ...], follows: bool
) -> None:
    """With ratewarden's own --store, health follows the store by default (a replica that
    cannot reach Redis leaves the pool); --no-health-follows-store keeps it SERVING."""
    with serve_on(tmp_path, redis, "--store", redis.url, *args) as server:
        status, statuses = health_after_outage(server, redis)
    assert status == (500 if follows else 200)
    assert statuses == [NOT_SERVING if follows else SERVING] * 2


def test_health_follows_store_as_each_source_sets_it() -> None:
    """Which sources set ``health_follows_store``: upstream's Redis variables (false unless
    REDIS_HEALTH_CHECK_ACTIVE_CONNECTION), its memcache backend (false: upstream's reports
    nothing to health), ratewarden's own variable over them, and true with neither."""
    base = {"RUNTIME_ROOT": "/srv"}
    redis = {**base, "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379"}
    memcache = {**base, "BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "127.0.0.1:11211"}
    assert resolve({}, base).health_follows_store is True
    assert resolve({}, redis).health_follows_store is False
    active = {**redis, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "1"}
    assert resolve({}, active).health_follows_store is True
    assert resolve({}, memcache).health_follows_store is False
    own = {**redis, "RATEWARDEN_HEALTH_FOLLOWS_STORE": "true"}
    assert resolve({}, own).health_follows_store is True
    assert resolve({"health_follows_store": "false"}, active).health_follows_store is False


def test_a_redis_without_redis_timeout_is_named_at_start(
    tmp_path: Path, redis: RedisServer
) -> None:
    """REDIS_URL without REDIS_TIMEOUT: one upstream_store_timeout warning at start naming
    ratewarden's 20 ms and what to set; none once REDIS_TIMEOUT is set."""
    with serve_on(tmp_path, redis, env=upstream_redis(redis)) as server:
        notes = [e for e in server.logs() if e.get("event") == "upstream_store_timeout"]
    assert len(notes) == 1
    assert "20 ms" in notes[0]["msg"] and "REDIS_TIMEOUT" in notes[0]["msg"]
    assert "--store-timeout" in notes[0]["msg"]
    environ = upstream_redis(redis)
    assert timeout_note(0.02, {}, {**environ, "REDIS_TIMEOUT": "50ms"}) is None
    assert timeout_note(0.02, {"store_timeout": "0.05"}, environ) is None
    assert timeout_note(0.02, {}, {**environ, "RATEWARDEN_STORE": redis.url}) is None
    memcache = {"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "127.0.0.1:11211"}
    assert timeout_note(0.02, {}, memcache) is None
    assert timeout_note(0.02, {}, {}) is None


def metric_lines(port: int, accept: str = "") -> list[str]:
    """The sample lines of ``upstream's`` families (``ratelimit_service_``) on ``port``."""
    import urllib.request

    request = urllib.request.Request(f"http://{HOST}:{port}/metrics")
    if accept:
        request.add_header("Accept", accept)
    with urllib.request.urlopen(request, timeout=5) as reply:
        text = reply.read().decode()
    return [line for line in text.splitlines() if line.startswith("ratelimit_service_")]


def test_use_prometheus_exposes_upstreams_names_and_redis_error_once_a_call(
    tmp_path: Path, redis: RedisServer
) -> None:
    """USE_PROMETHEUS=true: the counters' samples carry upstream's bare names (no ``_total``,
    no ``_created``), in the text format and in OpenMetrics; with Redis down two calls of two
    descriptors count ``should_rate_limit_error{err_type="redis_error"} 2``, as upstream's
    default mapping counts its ``redis_error`` stat, and no ``store_error``."""
    metrics = free_port()
    environ = {
        **upstream_redis(redis),
        "USE_PROMETHEUS": "true",
        "PROMETHEUS_ADDR": f"{HOST}:{metrics}",
    }
    body = {"domain": "web", "descriptors": [{"entries": [{"key": "api_key", "value": "s"}]}]}
    with serve_on(tmp_path, redis, env=environ) as server:
        assert [post_json(server.http_port, body) for _ in range(6)] == [200] * 5 + [429]
        lines = metric_lines(metrics)
        hits = 'ratelimit_service_rate_limit_total_hits{domain="web",key="api_key"'
        assert any(line.startswith(hits) and line.endswith(" 6.0") for line in lines), lines
        over = 'ratelimit_service_rate_limit_over_limit{domain="web",key="api_key"'
        assert any(line.startswith(over) and line.endswith(" 1.0") for line in lines), lines
        assert 'ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 6.0' in lines
        assert "ratelimit_service_config_load_success 1.0" in lines
        upstreams = ("rate_limit_total_hits", "rate_limit_over_limit", "total_requests")
        for line in lines + metric_lines(metrics, "application/openmetrics-text"):
            name = line.split("{")[0].split(" ")[0]
            if any(name.startswith(f"ratelimit_service_{u}") for u in upstreams):
                assert not name.endswith(("_total", "_created")), line
        redis.stop()
        assert [post_json(server.http_port, TWO) for _ in range(2)] == [200, 200]
        errors = [line for line in metric_lines(metrics) if "should_rate_limit_error" in line]
    assert errors == ['ratelimit_service_should_rate_limit_error{err_type="redis_error"} 2.0']
