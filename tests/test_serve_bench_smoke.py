"""The serve benchmark harness runs end to end in a tiny configuration: memory store, no Envoy.

Speed is never asserted here (DESIGN.md, section 6). These tests catch a broken
harness: a ``ratewarden serve`` that no longer starts from the benchmark's
rules, a load generator that no longer reaches it, a tally that miscounts, a
report that no longer renders.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks import _serve
from benchmarks._serve_load import rls_requests
from benchmarks._serve_stack import envoy_bootstrap

TINY = _serve.Plan(
    seconds=0.4, warmup=0.2, rounds=2, redis=False, envoy=False, descriptors=(1, 3),
    in_flight=(4,), deny=True, floor=False, charge_denied=False, loaders=1,
)  # fmt: skip


@pytest.fixture(scope="module")
def rows() -> list[_serve.Row]:
    """One tiny run, shared by the tests below."""
    return _serve.run(TINY)


def test_every_case_of_the_plan_is_measured_in_every_round(rows: list[_serve.Row]) -> None:
    """Memory with 1 and 3 descriptors and the deny variant, each with TINY.rounds rates."""
    assert [row.case.label for row in rows] == [
        "memory-w1 1 desc",
        "memory-w1 3 desc",
        "memory-w1 3 desc deny",
    ]
    for row in rows:
        assert len(row.rates) == TINY.rounds
        assert all(rate > 0 for rate in row.rates)


def test_calls_are_answered_and_timed_with_sane_percentiles(rows: list[_serve.Row]) -> None:
    """Calls were made, none failed, one latency per call, 0 < p50 <= p99, serve CPU seen."""
    for row in rows:
        assert row.calls > 0, row.case
        assert row.errors == 0, row.first_error
        assert len(row.latencies) == row.calls
        p50, p99 = row.percentile_ms(0.5), row.percentile_ms(0.99)
        assert 0 < p50 <= p99, (row.case, p50, p99)
        cpu = row.cpu_us("serve")
        assert cpu is not None and cpu > 0


def test_only_the_deny_variant_is_denied_and_about_every_other_call(
    rows: list[_serve.Row],
) -> None:
    """Limits out of reach allow everything; hot-* values (every other request) go over."""
    allowed, denied = rows[:2], rows[2]
    assert all(row.denied == 0 for row in allowed)
    # The hot value of a call is new until the tasks have cycled over every value once,
    # so early calls are allowed: only a share, not exactly half, is checked.
    assert 0 < denied.denied < denied.calls


def test_the_report_renders_and_serializes(rows: list[_serve.Row], tmp_path: Path) -> None:
    """The table has a line per row, the target list skips memory rows, the JSON round-trips."""
    text = _serve.table(rows)
    assert len(text.splitlines()) == 2 + len(rows)
    assert _serve.markdown(rows).count("\n") == 1 + len(rows)
    assert _serve.targets(rows) == []  # no Redis rows in this plan
    path = tmp_path / "serve.json"
    _serve.write_json(path, _serve.meta(TINY, "test"), rows)
    data = json.loads(path.read_text())
    assert [r["calls"] for r in data["rows"]] == [row.calls for row in rows]
    assert all(not math.isnan(r["p99_ms"]) for r in data["rows"])


def test_requests_carry_the_asked_descriptors_and_hot_values() -> None:
    """Serialized requests decode to N descriptors; the deny variant alternates hot and cold."""
    from envoy.service.ratelimit.v3 import rls_pb2

    plain = [rls_pb2.RateLimitRequest.FromString(b) for b in rls_requests("bench", 10, False)]
    assert {len(r.descriptors) for r in plain} == {10}
    deny = [rls_pb2.RateLimitRequest.FromString(b) for b in rls_requests("bench", 3, True)]
    last = [r.descriptors[-1].entries[0] for r in deny[:4]]
    assert [(e.key, e.value) for e in last] == [
        ("tight", "hot-0"),
        ("tight", "cold-1"),
        ("tight", "hot-2"),
        ("tight", "cold-3"),
    ]


def test_the_envoy_bootstrap_puts_the_filter_only_on_rate_limited_listeners() -> None:
    """``off`` has no rate limit filter; ``memory`` has it, pointing at its own gRPC cluster."""
    bootstrap = json.loads(
        envoy_bootstrap({"off": 1001, "memory": 1002}, 2000, {"memory": 3000}, 4000)
    )
    listeners = {item["name"]: item for item in bootstrap["static_resources"]["listeners"]}

    def filters(name: str) -> list[str]:
        chain = listeners[name]["filter_chains"][0]["filters"][0]["typed_config"]
        return [f["name"] for f in chain["http_filters"]]

    assert filters("off") == ["envoy.filters.http.router"]
    assert filters("memory") == ["envoy.filters.http.ratelimit", "envoy.filters.http.router"]
    clusters = {c["name"] for c in bootstrap["static_resources"]["clusters"]}
    assert clusters == {"backend_off", "backend_memory", "ratelimit_memory"}
