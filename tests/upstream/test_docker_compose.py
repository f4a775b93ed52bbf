"""`ratewarden serve` started the way upstream's docker-compose starts envoyproxy/ratelimit.

Issue 19, item 4: upstream's environment (addresses and paths adapted to loopback and a
temporary directory), no RATEWARDEN_* setting and no flag but the command; the service must
decide from the runtime directory's rules and count in the Redis that REDIS_URL names.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

from tests._servers import HOST, RedisServer, free_port
from tests.server_transport._process import RATEWARDEN
from tests.server_transport.conftest import request
from tests.server_transport.test_serve_process import post_json

RULES = """\
domain: compose
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 3}
"""
START_TIMEOUT_S = 30.0


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=2) as reply:
            return int(reply.status), reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:
        return 0, ""


def _post_json(port: int, value: str) -> int:
    return post_json(
        port,
        {"domain": "compose", "descriptors": [{"entries": [{"key": "api_key", "value": value}]}]},
    )


@pytest.fixture
def compose(redis_server: RedisServer, tmp_path: Path) -> Iterator[dict[str, int]]:
    """The service on upstream's docker-compose environment; its ports."""
    config = tmp_path / "data" / "ratelimit" / "config"
    config.mkdir(parents=True)
    (config / "compose.yaml").write_text(RULES)
    ports = {"http": free_port(), "grpc": free_port(), "debug": free_port()}
    environ = {key: value for key, value in os.environ.items() if not key.startswith("RATEWARDEN_")}
    environ.update(
        USE_STATSD="false",
        LOG_LEVEL="debug",
        REDIS_SOCKET_TYPE="tcp",
        REDIS_URL=f"{HOST}:{redis_server.port}",
        RUNTIME_ROOT=str(tmp_path / "data"),
        RUNTIME_SUBDIRECTORY="ratelimit",
        PORT=str(ports["http"]),
        GRPC_PORT=str(ports["grpc"]),
        DEBUG_PORT=str(ports["debug"]),
        REDIS_TIMEOUT="1s",  # a cold connection on a busy CI machine; not what is tested
    )
    log_path = Path(tempfile.mkstemp(prefix="ratewarden-compose-", suffix=".log")[1])
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [*RATEWARDEN, "serve"], stdout=log, stderr=subprocess.STDOUT, env=environ
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while _get(ports["http"], "/healthcheck")[0] != 200:
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"serve did not start:\n{log_path.read_text()}")
            time.sleep(0.05)
        yield ports
    finally:
        process.terminate()
        try:
            assert process.wait(20) == 0, log_path.read_text()
        finally:
            if process.poll() is None:
                process.kill()
            log_path.unlink(missing_ok=True)


def test_it_decides_from_the_runtime_directory_and_counts_in_redis_url(
    compose: dict[str, int], redis_server: RedisServer
) -> None:
    """3 per minute from RUNTIME_ROOT/ratelimit/config: the fourth call is denied, and the
    counter lives in the Redis REDIS_URL names."""
    value = f"k{time.time_ns()}"
    assert [_post_json(compose["http"], value) for _ in range(4)] == [200, 200, 200, 429]
    client = redis_server.client()
    try:
        assert [key for key in client.scan_iter(match=f"*{value}*")]
    finally:
        client.close()


def test_grpc_port_answers_envoy_calls_on_the_same_counters(compose: dict[str, int]) -> None:
    """GRPC_PORT serves ShouldRateLimit over the same rules and Redis counters as /json."""
    value = f"g{time.time_ns()}"
    assert _post_json(compose["http"], value) == 200
    with grpc.insecure_channel(f"{HOST}:{compose['grpc']}") as channel:
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)
        codes = [
            stub.ShouldRateLimit(request("compose", {"api_key": value}), timeout=5).overall_code
            for _ in range(3)
        ]
    ok, over = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT
    assert codes == [ok, ok, over]


def test_the_debug_port_serves_the_rules_and_the_metrics(compose: dict[str, int]) -> None:
    """DEBUG_PORT answers /rlconfig (upstream's debug endpoint) and /metrics."""
    status, text = _get(compose["debug"], "/rlconfig")
    assert status == 200 and "compose.api_key" in text
    status, text = _get(compose["debug"], "/metrics")
    assert status == 200 and "ratelimit_service" in text


def test_a_setting_that_cannot_be_honoured_stops_the_start(tmp_path: Path) -> None:
    """USE_DOG_STATSD=true (DogStatsD is not built): exit 2 and one line naming it and the way
    out."""
    environ = {key: value for key, value in os.environ.items() if not key.startswith("RATEWARDEN_")}
    environ.update(USE_DOG_STATSD="true", RUNTIME_ROOT=str(tmp_path))
    done = subprocess.run(
        [*RATEWARDEN, "serve"], check=False, env=environ, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.startswith(
        "ratewarden serve: error: USE_DOG_STATSD='true' cannot be honoured"
    )
    assert "USE_STATSD" in done.stderr
