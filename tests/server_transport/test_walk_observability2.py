"""``ratewarden_decisions_total`` of a real server counts what ``/dashboard.json`` counts: the
answers of a ``requests_per_unit: 0`` rule (denied, or shadowed on a shadow rule) and of an
``unlimited`` rule (allowed), which no store is asked about.

The server runs in-process on loopback (``start_server``); /metrics is read with
prometheus_client's parser, /dashboard.json as the page reads it.
"""

from __future__ import annotations

import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from tests.server_transport.conftest import OK, OVER_LIMIT, StartServer, channel, http, request
from tests.server_transport.test_metrics import get, parse

RULES = """\
domain: transport
descriptors:
  - key: block
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: dark_block
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: internal
    rate_limit: {unlimited: true}
"""


async def codes(port: int, key: str, times: int) -> list[int]:
    async with channel(port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        return [
            (await stub.ShouldRateLimit(request("transport", {key: "v"}))).overall_code
            for _ in range(times)
        ]


@pytest.mark.parametrize("shadow", [False, True], ids=["enforcing", "--shadow"])
async def test_zero_and_unlimited_rules_are_decisions_in_the_metric_as_on_the_dashboard(
    start_server: StartServer, shadow: bool
) -> None:
    """2 calls each: block denied (OK under --shadow, which turns only the answer), dark_block
    shadowed, internal allowed, in ratewarden_decisions_total as in the dashboard's rows (the
    metric had no series for any of them)."""
    server = await start_server(RULES, shadow=shadow)
    assert await codes(server.grpc_port, "block", 2) == [OK if shadow else OVER_LIMIT] * 2
    assert await codes(server.grpc_port, "dark_block", 2) == [OK] * 2
    assert await codes(server.grpc_port, "internal", 2) == [OK] * 2

    scrape = await http(server.http_port, "GET", "/metrics")
    samples = parse(scrape.body.decode())
    expected = {
        "transport.block": "denied",
        "transport.dark_block": "shadowed",
        "transport.internal": "allowed",
    }
    for rule, outcome in expected.items():
        for each in ("allowed", "denied", "shadowed"):
            counted = get(
                samples,
                "ratewarden_decisions_total",
                rule=rule,
                algorithm="fixed_window",
                outcome=each,
            )
            assert counted == (2 if each == outcome else 0), (rule, each)

    rows = {
        row["path"]: row
        for row in (await http(server.http_port, "GET", "/dashboard.json")).json()["rules"]
    }
    assert rows["transport.block"]["totals"]["decisions"] == 2
    assert rows["transport.block"]["totals"]["over"] == 2
    assert rows["transport.dark_block"]["totals"]["shadowed"] == 2
    assert rows["transport.internal"]["totals"]["decisions"] == 2
