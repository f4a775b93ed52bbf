"""ServiceStats: the service's decisions counted into Prometheus, exactly, with bounded labels.

The service runs over a real MemoryStore on a ManualClock; the registry is read
back through prometheus_client's own text parser, as Prometheus would.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ratewarden.errors import StorageUnavailableError
from ratewarden.server import config
from ratewarden.server.reload import ConfigWatcher
from ratewarden.server.service import RateLimitService
from ratewarden.server.stats import MAX_UNKNOWN_DOMAINS, OTHER, ServiceStats
from ratewarden.storage.memory import MemoryStore
from ratewarden.testing import ManualClock
from tests.server.conftest import ALIGNED, OK, OVER, desc

RULES = """\
domain: web
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: dark
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: fragile
    rate_limit: {unit: minute, requests_per_unit: 100, failure_mode: closed}
  - key: lenient
    rate_limit: {unit: minute, requests_per_unit: 100, failure_mode: open}
"""


def samples(stats: ServiceStats) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition: (sample name, sorted labels) -> value."""
    body, content_type = stats.exposition()
    assert content_type.startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(stats: ServiceStats, name: str, **labels: str) -> float:
    """The value of the one series of ``name`` with these labels (others aside: the per-key
    counters' ``key1`` and ``key2`` follow from ``key``); 0 when there is none (yet)."""
    wanted = set(labels.items())
    found = [v for (n, got), v in samples(stats).items() if n == name and wanted <= set(got)]
    assert len(found) <= 1, f"{name} {labels} matches {len(found)} series"
    return found[0] if found else 0.0


class FailingStore(MemoryStore):
    """A memory store that fails like an unreachable Redis while ``down``."""

    down = False

    def hit(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            raise StorageUnavailableError("connection refused")
        return super().hit(*args, **kwargs)


def service(stats: ServiceStats, store: MemoryStore | None = None) -> RateLimitService:
    clock = ManualClock(ALIGNED)
    return RateLimitService(
        config.loads(RULES, "rules.yaml"),
        store if store is not None else MemoryStore(clock=clock),
        hooks=stats,
    )


def ask(svc: RateLimitService, *descriptors: Any, hits: int = 0, domain: str = "web") -> Any:
    from envoy.service.ratelimit.v3 import rls_pb2

    return svc.should_rate_limit(
        rls_pb2.RateLimitRequest(domain=domain, descriptors=descriptors, hits_addend=hits)
    )


P = "ratelimit_service_rate_limit_"


def test_hits_within_near_and_over_limit_are_counted_as_envoyproxy_ratelimit_names_them() -> None:
    """7 calls on a 5/minute key: 5 within, 2 over, 7 total; near_limit_ratio 0.8 puts the
    threshold at 4, so only the 5th hit lands above it."""
    stats = ServiceStats(clock=ManualClock(ALIGNED))
    svc = service(stats)
    codes = [ask(svc, desc(("api_key", "a"))).overall_code for _ in range(7)]
    assert codes == [OK] * 5 + [OVER] * 2
    labels = {"domain": "web", "key": "api_key"}
    assert value(stats, P + "total_hits_total", **labels) == 7
    assert value(stats, P + "within_limit_total", **labels) == 5
    assert value(stats, P + "near_limit_total", **labels) == 1
    assert value(stats, P + "over_limit_total", **labels) == 2
    assert value(stats, P + "shadow_mode_total", **labels) == 0
    outcome = {"rule": "web.api_key", "algorithm": "fixed_window"}
    assert value(stats, "ratewarden_decisions_total", **outcome, outcome="allowed") == 5
    assert value(stats, "ratewarden_decisions_total", **outcome, outcome="denied") == 2


def test_near_limit_counts_the_hits_above_the_ratio() -> None:
    """Threshold floor(5 x 0.8) = 4: a call of 3 hits taking a key from 2 used to 5 has
    exactly one hit above 4, so near_limit moves by 1, not 3."""
    stats = ServiceStats(clock=ManualClock(ALIGNED))
    svc = service(stats)
    ask(svc, desc(("api_key", "b")), hits=2)
    ask(svc, desc(("api_key", "b")), hits=3)
    labels = {"domain": "web", "key": "api_key"}
    assert value(stats, P + "total_hits_total", **labels) == 5
    assert value(stats, P + "within_limit_total", **labels) == 5
    assert value(stats, P + "near_limit_total", **labels) == 1


def test_a_shadow_rule_counts_over_limit_and_shadow_mode_but_answers_ok() -> None:
    """Shadow hits over the limit count as over_limit and shadow_mode, like envoyproxy/ratelimit."""
    stats = ServiceStats(clock=ManualClock(ALIGNED))
    svc = service(stats)
    codes = [ask(svc, desc(("dark", "x"))).overall_code for _ in range(4)]
    assert codes == [OK] * 4
    labels = {"domain": "web", "key": "dark"}
    assert value(stats, P + "over_limit_total", **labels) == 3
    assert value(stats, P + "shadow_mode_total", **labels) == 3
    assert value(stats, P + "within_limit_total", **labels) == 1
    decided = {"rule": "web.dark", "algorithm": "fixed_window", "outcome": "shadowed"}
    assert value(stats, "ratewarden_decisions_total", **decided) == 3


def test_store_failures_count_failure_mode_decisions_and_store_errors() -> None:
    """With the store down: closed denies, open allows; each counted per mode, each failed
    store call counted as a store_error and a degraded decision."""
    stats = ServiceStats(clock=ManualClock(ALIGNED))
    store = FailingStore(clock=ManualClock(ALIGNED))
    svc = service(stats, store)
    store.down = True
    assert ask(svc, desc(("fragile", "f"))).overall_code == OVER
    assert ask(svc, desc(("lenient", "l"))).overall_code == OK
    assert ask(svc, desc(("lenient", "l"))).overall_code == OK
    assert (
        value(
            stats,
            P + "failure_mode_denied_total",
            domain="web",
            key="fragile",
            failure_mode="closed",
        )
        == 1
    )
    assert (
        value(
            stats,
            P + "failure_mode_allowed_total",
            domain="web",
            key="lenient",
            failure_mode="open",
        )
        == 2
    )
    errors = "ratelimit_service_should_rate_limit_error_total"
    assert value(stats, errors, err_type="store_error") == 3
    degraded = {"rule": "web.lenient", "failure_mode": "open", "reason": "StorageUnavailableError"}
    assert value(stats, "ratewarden_degraded_total", **degraded) == 2
    latency = "ratewarden_store_latency_seconds_count"
    assert value(stats, latency) == 3  # failed calls are timed too


def test_each_call_is_counted_and_timed_once() -> None:
    """request() moves total_requests and the response time histogram; failed calls are
    service_errors."""
    stats = ServiceStats(clock=ManualClock(ALIGNED))
    stats.request(0.002)
    stats.request(0.004, failed=True)
    assert (
        value(stats, "ratelimit_service_total_requests_total", grpc_method="ShouldRateLimit") == 2
    )
    assert value(stats, "ratelimit_service_response_time_seconds_count") == 2
    assert value(stats, "ratelimit_service_response_time_seconds_sum") == pytest.approx(0.006)
    errors = "ratelimit_service_should_rate_limit_error_total"
    assert value(stats, errors, err_type="service_error") == 1


def test_keys_past_max_keys_are_counted_as_other() -> None:
    """A config with many keys cannot grow the registry past max_keys label sets."""
    stats = ServiceStats(clock=ManualClock(ALIGNED), max_keys=2)
    svc = service(stats)
    ask(svc, desc(("api_key", "a")))
    ask(svc, desc(("dark", "a")))
    ask(svc, desc(("lenient", "a")))
    ask(svc, desc(("fragile", "a")))
    ask(svc, desc(("api_key", "a")))
    total = P + "total_hits_total"
    assert value(stats, total, domain="web", key="api_key") == 2
    assert value(stats, total, domain="web", key="dark") == 1
    assert value(stats, total, domain="web", key=OTHER) == 2
    assert value(stats, total, domain="web", key="lenient") == 0


def test_max_keys_below_one_is_refused() -> None:
    """A bound of 0 would count everything as "other": refused up front."""
    with pytest.raises(ValueError, match="max_keys"):
        ServiceStats(max_keys=0)


def test_config_loads_and_failed_reloads_are_counted_through_the_watcher(tmp_path: Any) -> None:
    """ConfigWatcher's on_load: the first load and each reload count as successes (and set
    the timestamp gauge); a broken file counts an error and keeps the old config."""
    clock = ManualClock(ALIGNED)
    stats = ServiceStats(clock=clock)
    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    applied: list[Any] = []
    watcher = ConfigWatcher([str(path)], config.load, applied.append, on_load=stats.config_load)
    watcher.load_initial()
    assert value(stats, "ratelimit_service_config_load_success_total") == 1
    stamp = "ratelimit_service_config_last_load_success_timestamp_seconds"
    assert value(stats, stamp) == ALIGNED
    clock.advance(30)
    path.write_text("domain: web\ndescriptors: [{key: k, nonsense: 1}]\n")
    watcher.check_once()
    assert value(stats, "ratelimit_service_config_load_error_total") == 1
    assert value(stats, stamp) == ALIGNED
    assert applied == []
    path.write_text(RULES.replace("requests_per_unit: 5", "requests_per_unit: 6"))
    watcher.check_once()
    assert value(stats, "ratelimit_service_config_load_success_total") == 2
    assert value(stats, stamp) == ALIGNED + 30
    assert len(applied) == 1


def test_a_failing_on_load_callback_does_not_break_the_reload(tmp_path: Any) -> None:
    """on_load is instrumentation: if it raises, the config is still applied."""

    def broken(ok: bool) -> None:
        raise RuntimeError("metrics backend exploded")

    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    applied: list[Any] = []
    watcher = ConfigWatcher([str(path)], config.load, applied.append, on_load=broken)
    assert watcher.load_initial() is not None
    path.write_text(RULES.replace("requests_per_unit: 5", "requests_per_unit: 7"))
    watcher.check_once()
    assert len(applied) == 1 and watcher.reloads == 1


def test_the_live_dashboard_stats_see_the_same_decisions() -> None:
    """ServiceStats feeds LiveStats: the over-limit key shows up in its top keys."""
    stats = ServiceStats(clock=ManualClock(ALIGNED))
    svc = service(stats)
    for _ in range(8):
        ask(svc, desc(("api_key", "greedy")))
    state = stats.live.state()
    [current, _previous] = state["top"]["over"]
    assert current["entries"] == [["web.api_key\x00api_key=greedy", 3, 0]]
    assert state["totals"]["web.api_key"] == [8, 3, 1, 0, 0]


def test_values_past_the_cap_are_counted_per_rule() -> None:
    """max_values_per_rule 2: the third and fourth distinct api keys overflow, counted twice."""
    stats = ServiceStats()
    svc = RateLimitService(
        config.loads(RULES, "rules.yaml"),
        MemoryStore(clock=ManualClock(ALIGNED)),
        hooks=stats,
        max_values_per_rule=2,
    )
    for name in ("a", "b", "c", "d", "a"):
        assert ask(svc, desc(("api_key", name))).overall_code == OK
    name = "ratelimit_service_rate_limit_value_overflow_total"
    assert value(stats, name, domain="web", rule="web.api_key") == 2


def test_overflowing_overrides_get_one_short_rule_label_per_domain() -> None:
    """An override's rule is named after its values, but all of a domain's overrides share
    one cap and one overflow counter: 10 distinct 10 KB values past a cap of 2 values make 8
    overflows, counted under the one rule label of the domain's overrides."""
    stats = ServiceStats(max_keys=3)
    svc = RateLimitService(
        config.loads(RULES, "rules.yaml"),
        MemoryStore(clock=ManualClock(ALIGNED)),
        hooks=stats,
        max_values_per_rule=2,
    )
    minute = 2  # RateLimitResponse.RateLimit.MINUTE
    for i in range(10):
        ask(svc, desc(("api_key", "v" * 10_000 + str(i)), limit=(100, minute)))
    name = "ratelimit_service_rate_limit_value_overflow_total"
    rules = {
        dict(labels)["rule"]: n for (sample, labels), n in samples(stats).items() if sample == name
    }
    assert rules == {"web.(limit overrides)": 8}


def test_descriptors_of_an_unknown_domain_are_counted_as_domain_not_found() -> None:
    """envoyproxy/ratelimit's <domain>.domain_not_found: one per descriptor, the answer OK;
    a known domain never counts, whatever its descriptors match."""
    stats = ServiceStats()
    svc = service(stats)
    response = ask(svc, desc(("api_key", "k")), desc(("x", "y")), domain="webb")
    assert [response.overall_code, *(s.code for s in response.statuses)] == [OK, OK, OK]
    ask(svc, desc(("nothing", "matches")))
    name = P + "domain_not_found_total"
    assert value(stats, name, domain="webb") == 2
    assert value(stats, name, domain="web") == 0


def test_unknown_domains_past_the_cap_are_counted_as_other() -> None:
    """Any caller can name any domain: past MAX_UNKNOWN_DOMAINS names, one "other" series."""
    stats = ServiceStats()
    svc = service(stats)
    for index in range(MAX_UNKNOWN_DOMAINS + 3):
        ask(svc, desc(("api_key", "k")), domain=f"d{index}")
    ask(svc, desc(("api_key", "k")), domain="d0")
    counted = {
        dict(labels)["domain"]: n
        for (sample, labels), n in samples(stats).items()
        if sample == P + "domain_not_found_total"
    }
    assert len(counted) == MAX_UNKNOWN_DOMAINS + 1
    assert (counted["d0"], counted[OTHER]) == (2, 3)


def test_the_tally_asks_to_be_flushed_when_full_and_take_empties_it() -> None:
    """A tally holds at most MAX_PENDING keys before it says it is full; take() hands over
    everything and starts afresh, so memory stays bounded between flushes."""
    from ratewarden.server.response import DescriptorOutcome
    from ratewarden.server.tally import MAX_PENDING, TOTAL, Tally

    rule = config.loads(RULES, "rules.yaml").domains["web"].match((("api_key", "a"),)).rule
    assert rule is not None
    tally = Tally()

    def outcome(key: str) -> DescriptorOutcome:
        return DescriptorOutcome(
            "web", key, rule, 2, False, False, 0, None, True, None, (("api_key", key),)
        )

    fulls = [tally.decision("web", rule, outcome(f"web.api_key_{i}")) for i in range(MAX_PENDING)]
    assert fulls == [False] * (MAX_PENDING - 1) + [True]
    taken = tally.take()
    assert len(taken.slots) == MAX_PENDING
    assert {counts[TOTAL] for counts in taken.slots.values()} == {2}
    assert tally.take().slots == {}


def test_a_spent_budget_denying_a_check_is_counted_a_denied_decision() -> None:
    """A budget check asks for 0 hits: upstream's per-key counters count hits, so their
    over_limit stays 0 (as envoyproxy/ratelimit's would for hits_addend 0), and
    ``ratewarden_decisions_total{outcome="denied"}`` counts the denial."""
    rules = (
        "domain: llm\ndescriptors:\n  - key: tenant\n"
        "    budget: {unit: minute, tokens_per_unit: 10}\n"
    )
    stats = ServiceStats(clock=ManualClock(ALIGNED))
    svc = RateLimitService(
        config.loads(rules, "rules.yaml"), MemoryStore(clock=ManualClock(ALIGNED)), hooks=stats
    )
    assert ask(svc, desc(("tenant", "a"), hits=10), domain="llm").overall_code == OK
    codes = [ask(svc, desc(("tenant", "a"), hits=0), domain="llm").overall_code for _ in range(3)]
    assert codes == [OVER] * 3
    labels = {"domain": "llm", "key": "tenant"}
    assert value(stats, P + "over_limit_total", **labels) == 0
    assert value(stats, P + "total_hits_total", **labels) == 10
    decided = {"rule": "llm.tenant"}
    assert value(stats, "ratewarden_decisions_total", **decided, outcome="denied") == 3
    assert value(stats, "ratewarden_decisions_total", **decided, outcome="allowed") == 1
