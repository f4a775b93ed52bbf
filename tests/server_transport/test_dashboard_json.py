"""GET /dashboard.json of a running server: what the page draws, from real calls.

The server runs in-process on loopback (the ``start_server`` fixture) so that the
store can be made to fail on cue.
"""

from __future__ import annotations

from typing import Any

from envoy.service.ratelimit.v3 import rls_pb2_grpc

from ratewarden.errors import StorageUnavailableError
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.server_transport.conftest import OK, OVER_LIMIT, StartServer, channel, http, request

RULES = """\
domain: transport
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100, failure_mode: open}
  - key: payments
    rate_limit: {unit: minute, requests_per_unit: 100, failure_mode: closed}
"""


class FlakyStore(AsyncMemoryStore):
    """A memory store that fails like an unreachable Redis while ``down``."""

    def __init__(self) -> None:
        super().__init__(clock=ManualClock())
        self.down = False

    async def hit(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            raise StorageUnavailableError("connection refused")
        return await super().hit(*args, **kwargs)


async def ask(port: int, key: str, value: str, times: int) -> list[int]:
    async with channel(port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        return [
            (await stub.ShouldRateLimit(request("transport", {key: value}))).overall_code
            for _ in range(times)
        ]


async def dashboard(port: int) -> Any:
    reply = await http(port, "GET", "/dashboard.json")
    assert reply.status == 200
    assert reply.headers["content-type"] == "application/json"
    return reply.json()


async def test_rules_rates_top_keys_degraded_and_latency_follow_the_calls(
    start_server: StartServer,
) -> None:
    """5 calls on a 3/minute key, then an outage under open and closed rules: the JSON shows the
    rule over with the key on top, each failure mode's degraded decisions, and store calls."""
    store = FlakyStore()
    server = await start_server(RULES, store=store)
    before = await dashboard(server.http_port)
    assert [r["status"] for r in before["rules"]] == ["idle", "idle", "idle"]

    assert await ask(server.grpc_port, "api_key", "k1", 5) == [OK] * 3 + [OVER_LIMIT] * 2
    store.down = True
    assert await ask(server.grpc_port, "tenant", "t1", 2) == [OK] * 2
    assert await ask(server.grpc_port, "payments", "p1", 1) == [OVER_LIMIT]

    view = await dashboard(server.http_port)
    rows = {row["path"]: row for row in view["rules"]}
    api = rows["transport.api_key"]
    assert api["status"] == "over"
    assert api["totals"] == {"decisions": 5, "over": 2, "near": 1, "shadowed": 0, "degraded": 0}
    assert api["limits"] == "3 per minute" and api["algorithm"] == "fixed_window"
    assert api["rate"]["decisions"] == 5 / view["window_s"]
    # A closed failure mode denies without checking a limit: degraded, not over, not listed.
    assert view["top"]["over"] == [
        {"rule": "transport.api_key", "key": "api_key=k1", "hits": 2, "error": 0},
    ]
    assert rows["transport.tenant"]["degraded_modes"] == {"open": 2}
    assert rows["transport.tenant"]["status"] == "degraded"  # allowed, but nobody counted
    assert rows["transport.payments"]["degraded_modes"] == {"closed": 1}
    assert rows["transport.payments"]["totals"]["over"] == 0
    assert rows["transport.payments"]["status"] == "degraded"
    # 4 answered (the second denial of k1 came from the over-limit cache), 3 failed: all timed
    assert view["store_latency"]["calls"] == 7
    assert view["store_latency"]["p99_s"] <= view["store_latency"]["max_s"]
    assert view["workers"] == 1


async def test_a_reload_lists_the_new_rules_and_keeps_the_old_ones_counts(
    start_server: StartServer,
) -> None:
    """After a reload drops a rule, its row stays (marked not loaded) with its counts."""
    server = await start_server(RULES)
    await ask(server.grpc_port, "tenant", "t", 2)
    [path] = server.settings.config_paths
    with open(path, "w") as file:
        file.write(RULES.split("  - key: tenant", maxsplit=1)[0])
    server.watcher.check_once()
    rows = {r["path"]: r for r in (await dashboard(server.http_port))["rules"]}
    assert rows["transport.api_key"]["loaded"] is True
    assert rows["transport.tenant"]["loaded"] is False
    assert rows["transport.tenant"]["totals"]["decisions"] == 2
    assert "transport.payments" not in rows
