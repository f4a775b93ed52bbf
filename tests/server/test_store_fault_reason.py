"""The health line of a store that does not answer names it: a newcomer starting ``serve``
on a Redis that was not running saw "store does not answer: not serving", with no address
and no cause, until the first call's ``store_failed`` line. The line now names the store
(its password hidden) and, when the ping raised, what it met. A store that answers but
cannot be used is still refused at start, and one that does not answer still is not."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ratewarden.server.app import RateLimitServer
from ratewarden.server.settings import Settings
from ratewarden.server.store_check import named_fault, refuse_unusable, store_fault
from ratewarden.storage.redis import AsyncRedisStore
from tests._servers import HOST, RedisServer, free_port

pytestmark = pytest.mark.redis

RULES = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"


async def test_serve_names_the_store_that_does_not_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing listens on the port: the start's health line names the URL, password hidden."""
    (tmp_path / "rules.yaml").write_text(RULES)
    url = f"redis://:secret@{HOST}:{free_port()}/0"
    settings = Settings(
        config_paths=(str(tmp_path),), store_url=url, grpc_port=0, http_port=0, reload_interval=0
    )
    server = RateLimitServer(settings)
    with caplog.at_level(logging.INFO, logger="ratewarden.server"):
        await server.start()
        await server.stop(0)
    lines = [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "health"]
    named = f"store 'redis://:***@{url.split('@')[1]}' does not answer ("
    assert lines[0].startswith(named) and lines[0].endswith("): not serving")
    assert "cannot connect to" in lines[0]  # what its ping met (the ping's False keeps it)


async def test_a_store_that_does_not_answer_is_not_refused_and_answers_later(
    redis_server: RedisServer,
) -> None:
    closed = AsyncRedisStore.from_url(f"redis://{HOST}:{free_port()}/0", timeout=1.0)
    live = AsyncRedisStore.from_url(redis_server.url, timeout=1.0)
    try:
        fault = await store_fault(closed, 2.0)
        said = named_fault(fault, "memory")
        assert said is not None and said.startswith("store 'memory' does not answer (Redis at")
        await refuse_unusable(closed, 2.0)  # a passing state: no refusal
        assert await store_fault(live, 2.0) is None
        assert named_fault(None, redis_server.url) is None
    finally:
        await closed.aclose()
        await live.aclose()


class Hanging:
    """A store whose ping never ends: the health check's own timeout names it."""

    async def ping(self) -> bool:
        import asyncio

        await asyncio.Event().wait()
        return True


async def test_a_ping_that_never_ends_says_how_long_it_was_given() -> None:
    fault = await store_fault(Hanging(), 0.05)
    assert fault == "store does not answer (no answer to its ping within 0.05 s)"
