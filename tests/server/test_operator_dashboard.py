"""The dashboard says what it means (findings 10 and 11 of the operator3 walk).

- The Rules table's over, rate and total, counts a shadow rule's would-be over, as its red
  sparkline draws it and ``over_limit`` on /metrics counts it: after 3 over-limit decisions
  on a shadow rule the row read ``over (total) 0``.
- ``/dashboard?interval=`` outside whole milliseconds from 250 to 10,000 (``500ms``, ``abc``,
  ``100``, ``-1``) is a 400 saying the range; the page quietly polled at 1 s or a bound.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from ratewarden.server.app import RateLimitServer
from ratewarden.server.dashboard.live import LiveStats
from ratewarden.server.dashboard.page import PAGE
from ratewarden.server.dashboard.view import render
from ratewarden.server.settings import Settings
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.server_transport.conftest import RULES, http

T0 = 1_700_006_400.0
Start = Callable[[], Awaitable[RateLimitServer]]


def _decide(live: LiveStats, rule: str, *, over: bool, shadowed: bool) -> None:
    live.decision(
        rule, (("plan", "free"),), hits=1, over=over, shadowed=shadowed, near_hits=0,
        degraded=None,
    )  # fmt: skip


def test_a_shadow_rules_would_be_over_is_in_the_rules_over() -> None:
    """3 shadowed and 2 enforced over: each rule's over (rate and total) counts its own."""
    clock = ManualClock(T0)
    live = LiveStats(clock)
    for _ in range(3):
        _decide(live, "web.shadow", over=True, shadowed=True)
    for _ in range(2):
        _decide(live, "web.enforced", over=True, shadowed=False)
    _decide(live, "web.enforced", over=False, shadowed=False)
    rows = {row["path"]: row for row in render([live.state()], [], clock.now())["rules"]}
    assert rows["web.shadow"]["over"] == {"total": 3, "rate": 0.3}
    assert rows["web.shadow"]["totals"]["shadowed"] == 3  # the shadow panel's figure, as before
    assert rows["web.enforced"]["over"] == {"total": 2, "rate": 0.2}
    assert sum(rows["web.shadow"]["history"]["over"]) == rows["web.shadow"]["over"]["total"]
    assert "num(r.over.total)" in PAGE.decode() and "num(rate(r.over.rate))" in PAGE.decode()


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    """``await start()``: a server on free ports and a memory store."""
    (tmp_path / "rules.yaml").write_text(RULES)
    servers: list[RateLimitServer] = []

    async def started() -> RateLimitServer:
        settings = Settings(
            config_paths=(str(tmp_path),), grpc_port=0, http_port=0, reload_interval=0
        )
        server = RateLimitServer(settings, store=AsyncMemoryStore(clock=ManualClock()))
        await server.start()
        servers.append(server)
        return server

    yield started
    for server in servers:
        await server.stop(0)


@pytest.mark.parametrize(
    "query",
    ["interval=500ms", "interval=abc", "interval=100", "interval=-1", "interval=99999999",
     "interval=", "interval=500&interval=600", "interval=%C2%B2", "interval=" + "9" * 5000],
)  # fmt: skip
async def test_a_bad_interval_is_a_400_saying_the_range(start: Start, query: str) -> None:
    """Plain text naming what was given and the range; no page."""
    server = await start()
    answer = await http(server.http_port, "GET", f"/dashboard?{query}")
    assert answer.status == 400
    text = answer.body.decode()
    assert text.startswith("interval '")
    assert "give the poll interval once, in whole milliseconds from 250 to 10,000" in text


@pytest.mark.parametrize("query", ["", "?interval=250", "?interval=500", "?interval=10000",
                                   "?other=1"])  # fmt: skip
async def test_a_good_interval_or_none_serves_the_page(start: Start, query: str) -> None:
    """The range's ends included; other parameters are not the page's business."""
    server = await start()
    answer = await http(server.http_port, "GET", f"/dashboard{query}")
    assert answer.status == 200
    assert answer.body.startswith(b"<!doctype html>") or b"<html" in answer.body[:200]
