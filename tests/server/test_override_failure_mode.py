"""A request's limit override on a descriptor no rule matches follows ``serve --failure-mode``
(the service's ``default_failure_mode``), as a rule without its own failure_mode does: before,
it always failed open, so ``--failure-mode closed`` let such overrides through a store outage.
The store here is a real redis-server, stopped."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.errors import ConfigurationError
from ratewarden.server import config as rules
from ratewarden.server.app import RateLimitServer
from ratewarden.server.service import AsyncRateLimitService, RateLimitService
from ratewarden.server.settings import resolve
from ratewarden.storage.memory import MemoryStore
from ratewarden.testing import ManualClock
from tests._servers import STORE_TIMEOUT, RedisServer
from tests.server.conftest import ALIGNED, OK, OVER, desc

pytest.importorskip("redis")

from ratewarden.storage.redis import AsyncRedisStore, RedisStore

RULES = """\
domain: edge
descriptors:
  - key: own
    rate_limit: {unit: minute, requests_per_unit: 5, failure_mode: open}
"""
MINUTE = rls_pb2.RateLimitResponse.RateLimit.MINUTE


def overridden(key: str) -> Any:
    """A request of domain edge whose one descriptor carries a limit override of 1/minute."""
    return rls_pb2.RateLimitRequest(
        domain="edge", descriptors=[desc((key, "k"), limit=(1, MINUTE))]
    )


@pytest.fixture
def down_url(make_redis: Callable[..., RedisServer]) -> str:
    """The URL of a redis-server that ran and was stopped: a store that is down."""
    server = make_redis()
    server.stop()
    return server.url


Ask = Callable[[Any], Any]


@pytest.fixture(params=["sync", "async"])
async def service_on(request: pytest.FixtureRequest, down_url: str) -> AsyncIterator[Any]:
    """``service_on(default_failure_mode)``: an ``ask`` over that twin of the service on the
    stopped Redis, with no circuit breaker (every call reaches the store and fails)."""
    config = rules.loads(RULES)
    closers: list[Any] = []

    def build(**options: str) -> Callable[[Any], Any]:
        clock = ManualClock(ALIGNED)
        if request.param == "sync":
            store = RedisStore.from_url(down_url, clock=clock, timeout=STORE_TIMEOUT)
            closers.append(store.close)
            return RateLimitService(config, store, **options).should_rate_limit
        astore = AsyncRedisStore.from_url(down_url, clock=clock, timeout=STORE_TIMEOUT)
        closers.append(astore.aclose)
        return AsyncRateLimitService(config, astore, **options).should_rate_limit

    yield build
    for close in closers:
        result = close()
        if result is not None:
            await result


async def codes(ask: Ask, key: str, times: int) -> list[int]:
    """The overall codes of ``times`` overridden requests on ``key``."""
    out = []
    for _ in range(times):
        response = ask(overridden(key))
        if not isinstance(response, rls_pb2.RateLimitResponse):
            response = await response
        out.append(response.overall_code)
    return out


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, [OK, OK]),
        ({"default_failure_mode": "open"}, [OK, OK]),
        ({"default_failure_mode": "closed"}, [OVER, OVER]),
        ({"default_failure_mode": "local"}, [OK, OVER]),  # 1/minute counted in this process
    ],
)
async def test_an_override_no_rule_matches_takes_the_default_failure_mode(
    service_on: Callable[..., Ask], options: dict[str, str], expected: list[int]
) -> None:
    """Redis down, a descriptor no rule matches with a limit of 1/minute: open allows,
    closed denies (it allowed before), local enforces the override in this process."""
    assert await codes(service_on(**options), "unmatched", 2) == expected


async def test_an_override_on_a_rule_keeps_the_rules_failure_mode(
    service_on: Callable[..., Ask],
) -> None:
    """The default is for overrides without a rule: one on a rule that says open allows."""
    ask = service_on(default_failure_mode="closed")
    assert await codes(ask, "own", 2) == [OK, OK]


def test_a_default_failure_mode_not_known_is_refused() -> None:
    """A typo is refused when the service is built, naming the modes."""
    with pytest.raises(ConfigurationError, match="'deny' must be one of open, closed, local"):
        RateLimitService(rules.loads(RULES), MemoryStore(), default_failure_mode="deny")


async def test_serve_failure_mode_reaches_the_override(tmp_path: Path, down_url: str) -> None:
    """Through the server's wiring: ``--failure-mode closed`` denies an override no rule
    matches while Redis is down, past the circuit breaker's opening too."""
    (tmp_path / "rules.yaml").write_text(RULES)
    given = {
        "config_paths": [str(tmp_path)],
        "store_url": down_url,
        "grpc_port": "0",
        "http_port": "0",
        "reload_interval": "0",
        "failure_mode": "closed",
    }
    server = RateLimitServer(resolve(given, {}))
    await server.start()
    try:
        for _ in range(7):  # the breaker opens after 5 failures in a row
            response = await server.should_rate_limit(overridden("unmatched"))
            assert response.overall_code == OVER
    finally:
        await server.stop(0)
