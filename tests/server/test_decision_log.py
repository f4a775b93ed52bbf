"""``--log-level debug`` (upstream's ``LOG_LEVEL=debug``) logs a ``decision`` line per decided
descriptor, naming its entries, its rule, the limit and the answer; at any other level the
service's hooks are the stats themselves, with nothing in front of them."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.server.app import RateLimitServer
from ratewarden.server.decision_log import DecisionLog
from ratewarden.server.logs import _StructuredFormatter
from ratewarden.server.settings import resolve
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.server.conftest import ALIGNED, desc

RULES = """\
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: watched
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: layered
    rate_limit:
      limits: [{unit: second, requests_per_unit: 3}, {unit: minute, requests_per_unit: 5}]
"""

Start = Callable[..., Awaitable[RateLimitServer]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    (tmp_path / "rules.yaml").write_text(RULES)
    servers: list[RateLimitServer] = []

    async def started(**flags: str) -> RateLimitServer:
        given = {"config_paths": [str(tmp_path)], "reload_interval": "0", **flags}
        store = AsyncMemoryStore(clock=ManualClock(ALIGNED))
        server = RateLimitServer(resolve(given, {}), store=store)
        servers.append(server)
        return server

    yield started
    for server in servers:
        await server.store.aclose()


def request(key: str, value: str) -> Any:
    return rls_pb2.RateLimitRequest(domain="edge", descriptors=[desc((key, value))])


def decisions(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if getattr(r, "event", "") == "decision"]


async def test_debug_logs_each_decided_descriptor(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    server = await start(log_level="debug")
    assert isinstance(server.service.hooks, DecisionLog)
    caplog.set_level(logging.DEBUG, logger="ratewarden.server.service")
    for _ in range(3):
        await server.service.should_rate_limit(request("user", "alice"))
    await server.service.should_rate_limit(request("watched", "x"))
    await server.service.should_rate_limit(request("watched", "x"))
    await server.service.should_rate_limit(request("free", "y"))
    lines = decisions(caplog)
    assert len(lines) == 6
    assert lines[0].startswith("descriptor (user=alice) in domain edge: rule edge.user ")
    assert "remaining 1" in lines[0] and lines[0].endswith(": OK")
    assert "remaining 0" in lines[1] and lines[1].endswith(": OK")
    assert lines[2].endswith(": OVER_LIMIT")
    assert lines[3].endswith(": OK")
    assert lines[4].endswith("OVER_LIMIT, reported OK (shadow_mode)")
    assert "unlimited" in lines[5] and lines[5].endswith(": OK")
    # The stats behind the log still counted every decision.
    text = server.stats.exposition()[0].decode()
    assert (
        'ratewarden_decisions_total{algorithm="fixed_window",outcome="denied",rule="edge.user"} 1.0'
        in text
    )


async def test_other_levels_put_nothing_in_front_of_the_stats(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    server = await start(log_level="info")
    assert server.service.hooks is server.stats
    caplog.set_level(logging.DEBUG, logger="ratewarden.server.service")
    await server.service.should_rate_limit(request("user", "bob"))
    assert decisions(caplog) == []


async def test_upstream_log_level_debug_turns_it_on(start: Start) -> None:
    settings = resolve({"config_paths": ["x"]}, {"LOG_LEVEL": "debug"})
    assert settings.log_level == "debug"


async def test_a_line_names_the_limit_and_count_the_answer_reports(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    """A call whose hits no window can hold is denied with nothing left, as its status says
    (the store's own remaining, untouched, is not the answer); with several limits the line
    names the one the status reports."""
    server = await start(log_level="debug", charge_denied="true")
    caplog.set_level(logging.DEBUG, logger="ratewarden.server.service")
    over = rls_pb2.RateLimitRequest(domain="edge", descriptors=[desc(("user", "carol"), hits=5)])
    answer = await server.service.should_rate_limit(over)
    assert answer.statuses[0].limit_remaining == 0
    layered = rls_pb2.RateLimitRequest(
        domain="edge", descriptors=[desc(("layered", "dave"), hits=7)]
    )
    answer = await server.service.should_rate_limit(layered)
    assert answer.statuses[0].current_limit.unit == rls_pb2.RateLimitResponse.RateLimit.MINUTE
    first, second = decisions(caplog)
    assert "limit 2/hour, remaining 0), hits 5: OVER_LIMIT" in first
    assert "limit 5/minute, remaining 0), hits 7: OVER_LIMIT" in second


def test_a_text_line_escapes_a_value_that_would_start_another_line() -> None:
    """``--log-format text``: a descriptor value with a newline (the caller's text) stays on
    its line, escaped, rather than writing what reads as another record."""
    record = logging.LogRecord(
        "ratewarden.server.service",
        logging.DEBUG,
        __file__,
        1,
        "descriptor (user=x\n2026-12-07T00:00:00.000Z ERROR ratewarden.server: fake)",
        (),
        None,
    )
    text = _StructuredFormatter("text", None).format(record)
    assert "\n" not in text
    assert "(user=x\\n2026-12-07T00:00:00.000Z ERROR" in text
