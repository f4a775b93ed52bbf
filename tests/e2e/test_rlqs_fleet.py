"""RLQS end to end with two replicas: two real Envoys, two `ratewarden serve --rlqs` over one
redis-server, each Envoy's stream on its own replica.

The replicas share the bucket's shares through the store (docs/rlqs.md, several replicas):
the two Envoys together hold the rule's limit once, not once each. Envoy 1.40 reports every
5 s; the replicas' rounds are a second apart. No test sleeps for a window: each polls with a
deadline, and the request counts are bounded.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._servers import RedisServer
from tests.e2e._envoy import Backend
from tests.e2e._rlqs import RLQS_FLAGS, SHARED_RULES, serving
from tests.e2e.test_rlqs import DEADLINE, first_200, held, rlqs_envoy
from tests.server_transport._process import ServeProcess

pytestmark = pytest.mark.redis


@pytest.fixture
def replicas(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer
) -> Iterator[tuple[ServeProcess, ServeProcess]]:
    """Two `ratewarden serve --rlqs` on one emptied redis-server."""
    redis_server.client().flushall()
    store = ("--store", f"redis://127.0.0.1:{redis_server.port}/0", "--store-timeout", "1")
    directory = tmp_path_factory.mktemp("rlqs-fleet")
    with serving(directory, SHARED_RULES, *store, *RLQS_FLAGS, count=2) as (one, two):
        yield one, two


def tokens(share: object) -> int:
    return share["tokens_per_fill"] if isinstance(share, dict) else 0


def test_two_envoys_on_two_replicas_hold_one_limit_between_them(
    backend: Backend, replicas: tuple[ServeProcess, ServeProcess]
) -> None:
    """6 a minute: the first Envoy holds all 6; the second, on the other replica, gets its
    part once the first replica's round shrank the first's; together they hold 6, and what
    both admit stays within r*W + M*(R*(floor(W/I) + 1) + 1), R = 2, M = max(6, 2)."""
    one, two = replicas
    with rlqs_envoy(backend, one) as first, rlqs_envoy(backend, two) as second:
        started = time.monotonic()
        first_200(first, "shared")
        admitted = 1 + sum(first.get("/", {"x-tenant": "shared"})[0] == 200 for _ in range(10))
        deadline = time.monotonic() + 2 * DEADLINE
        while True:  # the second's share comes from its replica's round after the first's
            status = second.get("/", {"x-tenant": "shared"})[0]
            if status == 200:
                admitted += 1
                break
            assert time.monotonic() < deadline, (held(one, "shared"), held(two, "shared"))
            admitted += first.get("/", {"x-tenant": "shared"})[0] == 200
            time.sleep(0.05)
        for _ in range(10):
            admitted += first.get("/", {"x-tenant": "shared"})[0] == 200
            admitted += second.get("/", {"x-tenant": "shared"})[0] == 200
        width = time.monotonic() - started
        assert admitted <= 6 / 60 * width + 6 * (2 * (math.floor(width) + 1) + 1)
        shares = held(one, "shared") + held(two, "shared")
        assert len(shares) == 2
        assert sum(tokens(share) for share in shares) <= 6, shares
        assert first.get("/", {"x-tenant": "shared"})[0] == 429
        assert second.get("/", {"x-tenant": "shared"})[0] == 429


def test_a_replica_stopped_gracefully_hands_its_share_to_the_other_replica(
    backend: Backend, redis_server: RedisServer, tmp_path: Path
) -> None:
    """--rlqs-ttl 30: both Envoys hold a part of the 6 a minute; on SIGTERM the second replica
    tells its Envoy to expire its part and releases it in the store, so the first replica's
    Envoy holds all 6 within seconds, not the 31 s the part would otherwise stay held
    (docs/rlqs.md, stopping)."""
    redis_server.client().flushall()
    rules = tmp_path / "rules.yaml"
    rules.write_text(SHARED_RULES)
    options = ("--rlqs", "--rlqs-interval", "1", "--rlqs-ttl", "30")
    store = ("--store", f"redis://127.0.0.1:{redis_server.port}/0", "--store-timeout", "1")
    one, two = ServeProcess(rules, *store, *options), ServeProcess(rules, *store, *options)
    try:
        one.wait_serving()
        two.wait_serving()
        with rlqs_envoy(backend, one) as first, rlqs_envoy(backend, two) as second:
            first_200(first, "shared")
            deadline = time.monotonic() + 2 * DEADLINE
            while second.get("/", {"x-tenant": "shared"})[0] != 200:  # its part arrived
                assert time.monotonic() < deadline, (held(one, "shared"), held(two, "shared"))
                first.get("/", {"x-tenant": "shared"})
                time.sleep(0.05)
            assert 0 < tokens(held(two, "shared")[0]) < 6
            assert two.signal(signal.SIGTERM) == 0
            [entry] = [line for line in two.logs() if line.get("event") == "rlqs_hand_over"]
            assert (entry["ended"], entry["released_buckets"]) == (1, 1), entry
            stopped = time.monotonic()
            while tokens(held(one, "shared")[0]) != 6:
                assert time.monotonic() - stopped < DEADLINE, held(one, "shared")
                first.get("/", {"x-tenant": "shared"})
                time.sleep(0.1)
    finally:
        one.stop()
        two.stop()
