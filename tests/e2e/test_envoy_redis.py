"""Envoy → ratewarden → Redis, and what happens when Redis dies and comes back.

The tests run in order on one stack: limits on Redis, then Redis killed (failure_mode
open keeps answering 200 at once, closed answers 429), then Redis restarted on the same
port (limits apply again, with no restart of ratewarden or Envoy). The store timeout is 1 s:
with the 20 ms default a reply late on a busy machine was answered by the failure mode; a
killed Redis refuses connections at once, so the answers while it is gone stay quick.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._servers import RedisServer
from tests.e2e.conftest import Stack, start_stack, stop_stack

pytestmark = pytest.mark.redis

RULES = """\
domain: e2e
descriptors:
  - key: api_key
    value: open-*
    rate_limit: {unit: hour, requests_per_unit: 3, failure_mode: open}
  - key: api_key
    value: closed-*
    rate_limit: {unit: hour, requests_per_unit: 3, failure_mode: closed}
"""


class Redis:
    """A redis-server the tests can kill and start again on the same port."""

    def __init__(self) -> None:
        self.server: RedisServer | None = RedisServer()
        self.port = self.server.port

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def kill(self) -> None:
        assert self.server is not None
        self.server.stop()
        self.server = None

    def restart(self) -> None:
        self.server = RedisServer(port=self.port)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


@pytest.fixture(scope="module")
def killable_redis() -> Iterator[Redis]:
    redis = Redis()
    yield redis
    redis.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, killable_redis: Redis) -> Iterator[Stack]:
    rules = tmp_path_factory.mktemp("e2e-redis") / "rules.yaml"
    rules.write_text(RULES)
    stack = start_stack(
        Path(rules),
        domain="e2e",
        args=("--store", killable_redis.url, "--store-timeout", "1", "--health-interval", "0.1"),
    )
    yield stack
    stop_stack(stack)


def timed_get(stack: Stack, api_key: str) -> tuple[int, float]:
    started = time.monotonic()
    status, _ = stack.get(api_key)
    return status, time.monotonic() - started


def wait_health(stack: Stack, status: int) -> None:
    """Poll ratewarden's /healthcheck (pinged every 0.1 s) until it says ``status``; max 10 s."""
    deadline = time.monotonic() + 10
    while stack.ratewarden.healthcheck() != status:
        assert time.monotonic() < deadline, f"/healthcheck never became {status}"
        time.sleep(0.05)


def test_limits_are_counted_in_redis(stack: Stack) -> None:
    """With Redis up: 200, 200, 200, then 429."""
    assert [stack.get("open-a")[0] for _ in range(4)] == [200, 200, 200, 429]
    assert [stack.get("closed-a")[0] for _ in range(4)] == [200, 200, 200, 429]


def test_with_redis_killed_open_allows_and_closed_denies_at_once(
    stack: Stack, killable_redis: Redis
) -> None:
    """Redis gone: failure_mode open answers 200, closed 429, each well inside Envoy's timeout.

    Envoy's own failure counters stay at 0: ratewarden answered every call itself.
    """
    killable_redis.kill()
    open_replies = [timed_get(stack, "open-b") for _ in range(5)]
    closed_replies = [timed_get(stack, "closed-b") for _ in range(3)]
    assert [status for status, _ in open_replies] == [200] * 5
    assert [status for status, _ in closed_replies] == [429] * 3
    assert max(seconds for _, seconds in open_replies + closed_replies) < 0.5
    stats = stack.filter_stats()
    assert stats.get("error", 0) == 0 and stats.get("failure_mode_allowed", 0) == 0
    wait_health(stack, 500)


def test_when_redis_returns_limits_apply_again_without_a_restart(
    stack: Stack, killable_redis: Redis
) -> None:
    """Redis restarted on its port: health comes back and new keys are limited on Redis again."""
    killable_redis.restart()
    wait_health(stack, 200)
    assert [stack.get("open-c")[0] for _ in range(4)] == [200, 200, 200, 429]
    assert [stack.get("closed-c")[0] for _ in range(4)] == [200, 200, 200, 429]
