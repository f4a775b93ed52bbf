"""Key explosion: ``max_values_per_rule`` bounds the counters one rule can create.

Over the cap, a new value is counted on the rule's one overflow counter, with
the rule's own limits; values already known keep their own counters; a value
unseen for the rule's longest period frees its place. The service reports
each overflow to ``ServiceHooks.on_value_overflow``. Time is a ManualClock.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.errors import ConfigurationError
from ratewarden.server import config
from ratewarden.server.config import DescriptorRule
from ratewarden.server.service import RateLimitService, ServiceHooks
from ratewarden.server.value_cap import overflow_key
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.testing import ManualClock
from tests.fuzz._grpc import background_server

RULES = """\
domain: cap
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 100}
"""
OK, OVER = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT


class Overflows(ServiceHooks):
    """Records every on_value_overflow call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def on_value_overflow(self, domain: str, rule: DescriptorRule) -> None:
        self.calls.append((domain, rule.path))


def ask(service: RateLimitService, key: str, value: str) -> int:
    request = rls_pb2.RateLimitRequest(
        domain="cap",
        descriptors=[
            ratelimit_pb2.RateLimitDescriptor(
                entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=key, value=value)]
            )
        ],
    )
    code: int = service.should_rate_limit(request).overall_code
    return code


def make(cap: int | None, **options: Any) -> tuple[RateLimitService, MemoryStore, Overflows]:
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    hooks = Overflows()
    service = RateLimitService(
        config.loads(RULES, "cap.yaml"), store, hooks=hooks, max_values_per_rule=cap, **options
    )
    return service, store, hooks


def test_values_up_to_the_cap_each_get_their_own_counter() -> None:
    """Three values under a cap of 3: each admits its own 2 a minute; no overflow reported."""
    service, _, hooks = make(3)
    for value in ("a", "b", "c"):
        assert [ask(service, "ip", value) for _ in range(3)] == [OK, OK, OVER]
    assert hooks.calls == []
    assert service.values.tracked(service.config.rules[0]) == 3


def test_new_values_past_the_cap_share_one_overflow_counter() -> None:
    """Values 4, 5, 6...: together they get one allowance of 2 a minute, not 2 each; the
    hook hears every overflowed descriptor."""
    service, _, hooks = make(3)
    for value in ("a", "b", "c"):
        ask(service, "ip", value)
    answers = [ask(service, "ip", f"spray-{n}") for n in range(10)]
    assert answers == [OK, OK] + [OVER] * 8
    assert hooks.calls == [("cap", "cap.ip")] * 10
    assert service.values.tracked(service.config.rules[0]) == 3, "the cap holds memory too"


def test_known_values_keep_their_own_allowance_during_a_flood() -> None:
    """A flood of junk values does not take the known clients' allowances away."""
    service, _, _ = make(2)
    assert ask(service, "ip", "known") == OK
    for n in range(50):
        ask(service, "ip", f"junk-{n}")
    assert ask(service, "ip", "known") == OK
    assert ask(service, "ip", "known") == OVER


def test_a_value_unseen_for_the_rules_period_frees_its_place() -> None:
    """After a minute without 'a' (the rule's period), a new value takes its place."""
    service, _, hooks = make(1)
    clock = service.clock
    assert isinstance(clock, ManualClock)
    assert ask(service, "ip", "a") == OK
    assert ask(service, "ip", "b") == OK  # overflow counter
    assert hooks.calls == [("cap", "cap.ip")]
    clock.advance(61)
    assert ask(service, "ip", "b") == OK
    assert len(hooks.calls) == 1, "b has a counter of its own now"


def test_each_rule_has_its_own_cap() -> None:
    """Filling the ip rule's cap leaves the tenant rule's untouched."""
    service, _, hooks = make(1)
    ask(service, "ip", "a")
    ask(service, "ip", "b")
    ask(service, "tenant", "t1")
    assert hooks.calls == [("cap", "cap.ip")]


def test_without_a_cap_every_value_counts_alone() -> None:
    """max_values_per_rule=None (the library default) keeps no table and never overflows."""
    service, _, hooks = make(None)
    assert [ask(service, "ip", f"v{n}") for n in range(200)] == [OK] * 200
    assert hooks.calls == []


def test_a_reload_forgets_rules_that_are_gone() -> None:
    """Swapping in a config without the ip rule drops its table (no memory kept for it)."""
    service, _, _ = make(5)
    ask(service, "ip", "a")
    ask(service, "tenant", "t")
    only_tenant = "domain: cap\ndescriptors:\n" + RULES.split("requests_per_unit: 2}\n")[1]
    service.swap_config(config.loads(only_tenant, "cap.yaml"))
    assert [rule.path for rule in service.config.rules] == ["cap.tenant"]
    assert sorted(path for _, path in service.values._seen) == ["cap.tenant"]


def test_the_overflow_counter_is_a_key_of_its_own_on_the_store() -> None:
    """The store holds at most cap + 1 counters for the rule, the extra one the overflow."""
    service, store, _ = make(2)
    for n in range(20):
        ask(service, "ip", f"v{n}")
    assert len(store) <= 3
    rule = service.config.rules[0]
    assert overflow_key(rule.domain, rule.path).startswith("rls-overflow/")


def test_an_overflow_logs_a_warning_at_most_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A flood writes one line, not one per request."""
    service, _, _ = make(1)
    with caplog.at_level(logging.WARNING, logger="ratewarden.server.service"):
        for n in range(30):
            ask(service, "ip", f"v{n}")
    lines = [r for r in caplog.records if "overflow counter" in r.getMessage()]
    assert len(lines) == 1
    assert "cap.ip" in lines[0].getMessage()


def test_a_failing_hook_does_not_change_the_answer() -> None:
    """on_value_overflow raising is logged and ignored."""

    class Broken(ServiceHooks):
        def on_value_overflow(self, domain: str, rule: DescriptorRule) -> None:
            raise RuntimeError("metrics backend down")

    service = RateLimitService(
        config.loads(RULES, "cap.yaml"),
        MemoryStore(clock=ManualClock()),
        hooks=Broken(),
        max_values_per_rule=1,
    )
    assert [ask(service, "ip", v) for v in ("a", "b", "c", "d")] == [OK, OK, OK, OVER]


def ask_with_override(service: RateLimitService, value: str) -> int:
    """A descriptor (ip, value) with Envoy's limit override of 2 a minute."""
    descriptor = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key="ip", value=value)]
    )
    descriptor.limit.requests_per_unit = 2
    descriptor.limit.unit = rls_pb2.RateLimitResponse.RateLimit.MINUTE
    request = rls_pb2.RateLimitRequest(domain="cap", descriptors=[descriptor])
    code: int = service.should_rate_limit(request).overall_code
    return code


def test_limit_overrides_share_one_cap_per_domain() -> None:
    """Envoy's limit overrides are rules made per request (their path names the value): they
    are capped as one group per domain, so new values cannot make a table each, and each
    overflow is reported as the domain's pool's, not as a rule per value."""
    service, store, hooks = make(2)
    answers = [ask_with_override(service, f"o{n}") for n in range(10)]
    assert answers == [OK, OK, OK, OK] + [OVER] * 6  # 2 own counters, then 2 shared
    assert hooks.calls == [("cap", "cap.(limit overrides)")] * 8
    assert len(service.values._seen) == 1
    assert len(store) == 3


@pytest.mark.parametrize("cap", [0, -1, True, 1.5, "10"])
def test_a_bad_cap_is_a_configuration_error(cap: Any) -> None:
    """The cap is a whole number of at least 1, or None."""
    with pytest.raises(ConfigurationError, match="max_values_per_rule"):
        make(cap)


@pytest.mark.parametrize(("given", "cap"), [(None, 100_000), (7, 7), (0, None)])
def test_serve_caps_values_per_rule_by_default(
    tmp_path: Path, given: int | None, cap: int | None
) -> None:
    """ratewarden serve: 100,000 values per rule unless --max-values-per-rule says otherwise
    (0 turns the cap off)."""
    options = {} if given is None else {"max_values_per_rule": given}
    store = AsyncMemoryStore(clock=ManualClock())
    with background_server(tmp_path, RULES, store, **options) as server:
        assert server.server.service.values.limit == cap
