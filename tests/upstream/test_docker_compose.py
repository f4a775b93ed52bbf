"""`ratewarden serve` started the way upstream's docker-compose starts envoyproxy/ratelimit.

Issue 19, item 4: upstream's docker-compose.yml environment (its redis and memcached
addresses, and the ports and hosts, adapted to loopback; its ``./examples:/data``
volume as ``RUNTIME_ROOT`` pointing at ``tests/upstream/compose``, our version of
those example rules), no RATEWARDEN_* setting and no flag but the command. The
service must decide from the runtime directory's rules and count in the Redis that
REDIS_URL names: the tests read and change the counters there with redis-py.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from google.protobuf import json_format

from tests._servers import HOST, RedisServer, free_port
from tests.server_transport._process import RATEWARDEN
from tests.server_transport.conftest import request
from tests.server_transport.test_serve_process import post_json
from tests.upstream._serve import get, upstream_serve, without_ratewarden

#: What docker-compose mounts at /data: RUNTIME_ROOT, with ratelimit/config/*.yaml below.
DATA = Path(__file__).parent / "compose"
OK, OVER = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT


def compose_environment(redis_port: int, ports: dict[str, int]) -> dict[str, str]:
    """upstream's docker-compose.yml ``environment:``, addresses on loopback, no RATEWARDEN_*."""
    return dict(
        # docker-compose.yml's list, as written there but for the addresses and the path
        USE_STATSD="false",
        LOG_LEVEL="debug",
        REDIS_SOCKET_TYPE="tcp",
        REDIS_URL=f"{HOST}:{redis_port}",
        RUNTIME_ROOT=str(DATA),
        RUNTIME_SUBDIRECTORY="ratelimit",
        MEMCACHE_HOST_PORT=f"{HOST}:{free_port()}",  # read only by the memcache backend
        # its published ports 8080, 8081, 6070, on free loopback ports instead
        HOST=HOST,
        PORT=str(ports["http"]),
        GRPC_HOST=HOST,
        GRPC_PORT=str(ports["grpc"]),
        DEBUG_HOST=HOST,
        DEBUG_PORT=str(ports["debug"]),
        # upstream's own setting (default 10s; ratewarden's 20 ms when unset): a cold
        # connection on a busy CI machine must not fail open; not what is tested
        REDIS_TIMEOUT="1s",
    )


@dataclass
class Compose:
    """The running service: its ports, and a gRPC stub on GRPC_PORT."""

    ports: dict[str, int]
    stub: Any

    def codes(self, domain: str, *descriptors: dict[str, str]) -> list[int]:
        """``[overall, status 1, ...]`` of one ShouldRateLimit call."""
        response = self.stub.ShouldRateLimit(request(domain, *descriptors), timeout=5)
        return [response.overall_code, *(status.code for status in response.statuses)]


@pytest.fixture
def compose(redis_server: RedisServer) -> Iterator[Compose]:
    """The service on upstream's docker-compose environment."""
    ports = {"http": free_port(), "grpc": free_port(), "debug": free_port()}
    environ = compose_environment(redis_server.port, ports)
    with (
        upstream_serve(environ, ports["http"]),
        grpc.insecure_channel(f"{HOST}:{ports['grpc']}") as channel,
    ):
        yield Compose(ports, rls_pb2_grpc.RateLimitServiceStub(channel))


def _counters(redis_server: RedisServer, value: str) -> dict[str, int]:
    """The fixed-window counters in the REDIS_URL server whose key holds ``value``:
    ``{key: hits counted}`` (a counter is ``"<window> <count>"``)."""
    client = redis_server.client()
    try:
        found = {}
        for key in client.scan_iter(match=f"*{value}*"):
            raw = client.get(key)
            assert raw is not None
            found[key.decode()] = int(raw.split()[-1])
        return found
    finally:
        client.close()


def test_it_decides_from_the_runtime_directory_and_counts_in_redis_url(
    compose: Compose, redis_server: RedisServer
) -> None:
    """buyer: 2 per hour, a rule of RUNTIME_ROOT/ratelimit/config/example.yaml. Each hit is
    counted in the Redis REDIS_URL names, and the decisions read the count there: with the
    counter deleted in that Redis after one hit, the buyer gets two more."""
    buyer = f"b{time.time_ns()}"
    assert compose.codes("shop", {"buyer": buyer})[0] == OK
    counters = _counters(redis_server, buyer)
    assert list(counters.values()) == [1]
    client = redis_server.client()
    try:
        client.delete(*counters)
    finally:
        client.close()
    codes = [compose.codes("shop", {"buyer": buyer})[0] for _ in range(3)]
    assert codes == [OK, OK, OVER]
    assert _counters(redis_server, buyer) == {next(iter(counters)): 2}


def test_every_file_of_the_runtime_directory_is_a_domain(
    compose: Compose, redis_server: RedisServer
) -> None:
    """config.yaml's domain decides too, and a descriptor no rule matches is not counted."""
    assert compose.codes("warehouse", {"database": "orders"}) == [OK, OK]
    assert _counters(redis_server, "orders")
    ghost = f"g{time.time_ns()}"
    assert compose.codes("warehouse", {"database": ghost}) == [OK, OK]
    assert compose.codes("nowhere", {"database": ghost}) == [OK, OK]
    assert _counters(redis_server, ghost) == {}


def test_the_example_rules_keep_their_meaning(compose: Compose) -> None:
    """A 0 limit blocks, shadow_mode never denies, unlimited never counts, replaces drops
    the named rule from the request, a value beats the key alone."""
    buyer = f"b{time.time_ns()}"
    assert compose.codes("shop", {"buyer": buyer, "item": "banned"}) == [OVER, OVER]
    shady = [compose.codes("shop", {"buyer": buyer, "promo": "shady"}) for _ in range(4)]
    assert shady == [[OK, OK]] * 4
    gifts = [compose.codes("shop", {"buyer": buyer, "gift": "card"}) for _ in range(5)]
    assert gifts == [[OK, OK]] * 5
    limited = {"buyer": buyer, "item": "limited"}
    assert [compose.codes("shop", limited)[0] for _ in range(2)] == [OK, OVER]
    other = {"buyer": f"{buyer}x", "item": "limited"}
    account = {"category": "account"}
    assert compose.codes("shop", other, account) == [OK, OK, OK]
    assert compose.codes("shop", other, account) == [OK, OK, OK]


def test_quota_mode_denies_only_when_every_quota_is_over(compose: Compose) -> None:
    """Two quota_mode descriptors (1 and 2 per hour): OK while either has room, OVER when
    both are out; each answer carries the metadata of the descriptors that passed."""
    client = f"c{time.time_ns()}"
    first = {"client": client, "service": "service_a"}
    second = {"client": client, "service": "service_b"}
    answers = [
        compose.stub.ShouldRateLimit(request("shop", first, second), timeout=5) for _ in range(3)
    ]
    codes = [[a.overall_code, *(s.code for s in a.statuses)] for a in answers]
    assert codes == [[OK, OK, OK], [OK, OVER, OK], [OVER, OVER, OVER]]
    passed = [json_format.MessageToDict(a.dynamic_metadata) for a in answers]
    both = {"quota_a": {"name": "service_a"}, "quota_b": {"name": "service_b"}}
    assert passed == [both, {"quota_b": {"name": "service_b"}}, {}]


def test_the_http_port_answers_on_the_same_counters(compose: Compose) -> None:
    """PORT serves /json over the same rules and Redis counters as GRPC_PORT."""
    buyer = f"h{time.time_ns()}"
    assert compose.codes("shop", {"buyer": buyer})[0] == OK
    body = {"domain": "shop", "descriptors": [{"entries": [{"key": "buyer", "value": buyer}]}]}
    assert [post_json(compose.ports["http"], body) for _ in range(2)] == [200, 429]


def test_the_debug_port_serves_the_rules_and_the_metrics(compose: Compose) -> None:
    """DEBUG_PORT answers /rlconfig (upstream's debug endpoint) with both files' rules, and
    /metrics with upstream's stats keys (detailed_metric: the request's value)."""
    value = f"u{time.time_ns()}"
    assert compose.codes("shop", {"unspec": value})[0] == OK
    status, text = get(compose.ports["debug"], "/rlconfig")
    assert (
        status == 200 and "shop.buyer.promo_shady" in text and "warehouse.database_orders" in text
    )
    status, text = get(compose.ports["debug"], "/metrics")
    assert status == 200
    labels = f'domain="shop",key="unspec_{value}",key1="unspec_{value}",key2=""'
    assert f"ratelimit_service_rate_limit_total_hits_total{{{labels}}} 1.0" in text


def test_a_setting_that_cannot_be_honoured_stops_the_start(tmp_path: Path) -> None:
    """REDIS_POOL_ON_EMPTY_BEHAVIOR=CREATE (which upstream itself does not support): exit 2
    and one line naming it and the way out."""
    pool = {"REDIS_POOL_ON_EMPTY_BEHAVIOR": "CREATE", "RUNTIME_ROOT": str(tmp_path)}
    environ = without_ratewarden(pool)
    done = subprocess.run(
        [*RATEWARDEN, "serve"], check=False, env=environ, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.startswith(
        "ratewarden serve: error: REDIS_POOL_ON_EMPTY_BEHAVIOR='CREATE' cannot be honoured"
    )
    assert "remove the setting" in done.stderr
